"""The proof that the graph compiler is right: a family's graph (microgpt graph from-family) trains like the
family. For gpt the losses of 60 training steps through the real trainer (AdamW, warmup and cosine, gradient
clipping, validation) are the same bits on the numpy and the cpu backend, and the initial weights are the same
arrays under the same names; the ensemble's and lookahead's graphs are held to the family in
test_graph_ensemble.py and test_graph_lookahead.py. A 12-layer graph compiles well inside a second.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import microgpt
from microgpt.backends import get_backend
from microgpt.data.tokenizer import CharTokenizer
from microgpt.model.family import family
from microgpt.model.graph.from_family import document_for
from peak_memory import PeakMemory

SHAPES = [  # gpt shapes: awkward head widths, one layer, several
    {"d_model": 12, "n_layers": 2, "heads": "2,4,6", "d_ff": 20, "seq_len": 16},
    {"d_model": 16, "n_layers": 1, "heads": "4", "d_ff": 32, "seq_len": 8},
]


def losses(path) -> list[float]:
    return [json.loads(line)["loss"] for line in path.read_text().splitlines() if "loss" in json.loads(line)]


@pytest.mark.parametrize("backend", ["numpy", "cpu"])
@pytest.mark.parametrize("shape", SHAPES)
def test_a_gpt_graph_trains_bit_for_bit_like_gpt(tmp_path, backend, shape):
    text = "".join(np.random.default_rng(0).choice(list("abcdefgh ij\n"), size=6000))
    (tmp_path / "text.txt").write_text(text)
    common = {"steps": 60, "batch_size": 4, "backend": backend, "seed": 7, "eval_every": 20, "gen": 0,
              "threads": 2}
    microgpt.train(str(tmp_path / "text.txt"), model=str(tmp_path / "gpt"), family="gpt", **shape, **common)
    config = microgpt.load(str(tmp_path / "gpt")).model.config
    (tmp_path / "g.json").write_text(json.dumps(document_for("gpt", config)))
    microgpt.train(str(tmp_path / "text.txt"), model=str(tmp_path / "graph"), graph=str(tmp_path / "g.json"),
                   seq_len=shape["seq_len"], **common)
    gpt_losses, graph_losses = losses(tmp_path / "gpt.metrics.jsonl"), losses(tmp_path / "graph.metrics.jsonl")
    assert len(gpt_losses) == 60
    assert graph_losses == gpt_losses  # the same bits, not just close
    gpt_weights = microgpt.load(str(tmp_path / "gpt")).model.params.to_host()
    graph_weights = microgpt.load(str(tmp_path / "graph")).model.params.to_host()
    assert list(graph_weights) == list(gpt_weights)
    assert all(np.array_equal(graph_weights[name], gpt_weights[name]) for name in gpt_weights)


def test_the_same_seed_draws_the_same_initial_weights():
    gpt = family("gpt")
    config = gpt.Config(vocab_size=13, d_model=10, n_layers=3, head_dims=(1, 3, 6), d_ff=7, seq_len=5)
    graph = family("graph")
    graph_config = graph.Config(vocab_size=13, graph=document_for("gpt", config), seq_len=5)
    backend, tokenizer = get_backend("numpy"), CharTokenizer("abcdefghijklm")
    ours = graph.build(graph_config, backend, tokenizer, 11).params.to_host()
    theirs = gpt.build(config, backend, tokenizer, 11).params.to_host()
    assert list(ours) == list(theirs)
    assert all(np.array_equal(ours[name], theirs[name]) for name in theirs)


def test_a_12_layer_graph_compiles_without_making_its_weights():
    """Compiling is bookkeeping over the document: what it allocates is bounded (measured as memory, 0.5 MB here,
    not as time, which other jobs' load stretches), far below the 85M weights (340 MB) it describes."""
    config = family("gpt").Config(vocab_size=65, d_model=768, n_layers=12, head_dims=(64,) * 12, d_ff=3072, seq_len=256)
    document = document_for("gpt", config)
    with PeakMemory() as memory:
        program = family("graph").Config(vocab_size=65, graph=document, seq_len=256).program
    assert len(program.nodes) == 12 * 11 + 4  # per block: 2 norms, 5 linears, the fused attention and ReLU, 2 adds
    assert memory.bytes < 64 * 2**20, f"compiling held {memory.bytes:,} bytes at its peak"
