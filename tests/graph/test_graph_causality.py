"""No graph trains that sees the future: the check before the first step (model/graph/causality.py) refuses a
graph whose logits at t read a later token, or whose loss head reads its own target, naming the node where
the future first enters, and passes the sound ones (every family's graph; tests/model/test_leaks.py holds the
graph family's heads to the same rule the other families' are held to)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest

from family_shapes import TINY_GRAPH
from microgpt.backends import get_backend
from microgpt.core.errors import ConfigError
from microgpt.data.tokenizer import CharTokenizer
from microgpt.model.family import family
from microgpt.model.graph.library import library_groups

GRAPH = family("graph")
TOKENIZER = CharTokenizer("abcdefghijk")


def with_attention_mask(mask: str, **params) -> dict:
    """TINY_GRAPH with the library's attention group redefined to attend under `mask`."""
    document = copy.deepcopy(TINY_GRAPH)
    attention = library_groups()["attention"]
    next(n for n in attention["nodes"] if n["op"] == "attention")["params"] = {"mask": mask, **params}
    document["groups"] = {"attention": attention, **document["groups"]}
    return document


def build(document: dict):
    config = GRAPH.Config(vocab_size=11, graph=document, seq_len=9)
    return GRAPH.build(config, get_backend("numpy"), TOKENIZER, 0)


def test_a_sound_graph_is_built():
    assert build(TINY_GRAPH).n_params > 0


@pytest.mark.parametrize("mask", ["full", "anticausal"])
def test_attention_that_sees_later_tokens_is_refused_where_it_enters(mask):
    with pytest.raises(ConfigError) as refused:
        build(with_attention_mask(mask))
    message = str(refused.value)
    assert "the logits at position 0 change with the token at position 1" in message
    assert f"it first enters at blocks/0/attn/heads (rope_attention with mask {mask})" in message


def test_a_loss_head_that_sees_its_own_target_is_refused():
    """A second head predicting the token two ahead through attention that hides only the next position:
    position t sees t + 2, the very token it is asked for."""
    document = copy.deepcopy(TINY_GRAPH)
    document["groups"]["peek"] = {
        "params": {"d": None, "heads": None}, "inputs": {"x": "stream[d]"}, "outputs": {},
        "nodes": [{"id": "q", "op": "linear", "params": {"out": "d"}}, {"id": "kv", "op": "embedding"},
                  {"id": "attend", "op": "attention", "params": {"mask": "gap", "gap": 1}},
                  {"id": "out", "op": "logits"}, {"id": "loss", "op": "cross_entropy", "params": {"offset": 2}}],
        "edges": [{"from": "x", "to": "q.x"}, {"from": "q.out", "to": "attend.q"}, {"from": "kv.out", "to": "attend.k"},
                  {"from": "kv.out", "to": "attend.v"}, {"from": "attend.out", "to": "out.x"},
                  {"from": "out.out", "to": "loss.logits"}],
    }
    document["groups"]["peek"]["inputs"]["tokens"] = "token_ids"
    document["groups"]["peek"]["edges"].append({"from": "tokens", "to": "kv.ids"})
    document["nodes"].append({"id": "peeker", "group": "peek"})
    document["edges"] += [{"from": "blocks.x", "to": "peeker.x"}, {"from": "tokens", "to": "peeker.tokens"}]
    with pytest.raises(ConfigError) as refused:
        build(document)
    message = str(refused.value)
    assert "the loss peeker/loss reads at position" in message and "its target" in message
    assert "first enters at peeker/attend (attention with mask gap)" in message


def shifted(by: int, offset: int, main_reads_it: bool = False) -> dict:
    """An embedding shifted `by` positions ahead (the graph op `shift`) under a loss with `offset`, beside the
    main head, which reads the plain embedding, or with `main_reads_it` the shifted one."""
    main_source = "shift.out" if main_reads_it else "emb.out"
    wires = [("tokens", "emb.ids"), ("emb.out", "shift.x"), (main_source, "head.x"), ("head.out", "logits"),
             ("head.out", "loss.logits"), ("shift.out", "ahead.x"), ("ahead.out", "far.logits")]
    return {"microgpt_graph": 1,
            "nodes": [{"id": "emb", "op": "embedding", "params": {"width": 4}},
                      {"id": "shift", "op": "shift", "params": {"by": by}}, {"id": "head", "op": "logits"},
                      {"id": "loss", "op": "cross_entropy"}, {"id": "ahead", "op": "logits"},
                      {"id": "far", "op": "cross_entropy", "params": {"offset": offset}}],
            "edges": [{"from": a, "to": b} for a, b in wires]}


def test_main_logits_that_read_a_shifted_stream_are_refused_at_the_shift():
    with pytest.raises(ConfigError) as refused:
        build(shifted(1, 2, main_reads_it=True))
    message = str(refused.value)
    assert "the logits at position 0 change with the token at position 1" in message
    assert "it first enters at shift (shift)" in message


@pytest.mark.parametrize("by", [1, 2, 3])
def test_a_loss_may_read_a_stream_shifted_by_less_than_its_offset(by):
    assert build(shifted(by, by + 1)).n_params > 0


@pytest.mark.parametrize(("by", "offset"), [(1, 1), (2, 2), (3, 2)])
def test_a_loss_reading_a_stream_shifted_by_its_offset_or_more_is_refused(by, offset):
    with pytest.raises(ConfigError) as refused:
        build(shifted(by, offset))
    message = str(refused.value)
    assert "the logits that the loss far reads at position" in message and f"(offset {offset})" in message
    assert "it first enters at shift (shift)" in message


def test_training_a_leaking_graph_stops_before_anything_is_written(tmp_path):
    (tmp_path / "text.txt").write_text("abcdefghijk " * 200)
    (tmp_path / "leak.json").write_text(json.dumps(with_attention_mask("full")))
    result = subprocess.run([sys.executable, "-m", "microgpt", "train", "text.txt", "--graph", "leak.json",
                             "--model", "ck", "--steps", "5", "--seq-len", "9"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "the graph sees the future" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "ck").exists()
