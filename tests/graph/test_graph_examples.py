"""The graph examples and commands: each document of examples/graphs/ passes `microgpt graph check` and trains
(its loss falls over 30 steps); `graph from-family`, `show` and `ops` print what they say; and docs/graphs.md
holds to the code: its table of primitives is ops.OPS's, every `microgpt graph` line in the docs parses, and
every example is described there."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

import microgpt
from microgpt.cli import build_parser, main
from microgpt.cli.graph_show import docs_block
from microgpt.model.family import family, n_params
from microgpt.model.graph.from_family import document_for

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples" / "graphs").glob("*.json"))
GRAPHS_DOC = ROOT / "docs" / "graphs.md"
TEXT = "It was the best of times, it was the worst of times.\n" * 30
STEPS, SEQ_LEN = 30, 8


def test_the_three_examples_are_there():
    assert {path.stem for path in EXAMPLES} == {"parallel_block", "two_experts", "gpt_bigram"}


@pytest.mark.parametrize("path", EXAMPLES, ids=[path.stem for path in EXAMPLES])
def test_each_example_passes_graph_check(path, capsys):
    assert main(["graph", "check", str(path), "--seq-len", str(SEQ_LEN)]) == 0
    out = capsys.readouterr().out
    assert "causality: sound" in out and "parameters: " in out and "memory per step: about " in out
    assert f"T {SEQ_LEN} (--seq-len)" in out and "vocab 65 (--vocab)" in out


@pytest.mark.parametrize("path", EXAMPLES, ids=[path.stem for path in EXAMPLES])
def test_each_example_trains_and_its_loss_falls(path, tmp_path):
    (tmp_path / "text.txt").write_text(TEXT)
    _, summary = microgpt.train(str(tmp_path / "text.txt"), graph=str(path), seq_len=SEQ_LEN, steps=STEPS,
                                batch_size=8, val_tokens=0, warmup=3, backend="numpy", save=False, gen=0)
    assert len(summary.losses) == STEPS
    first, last = summary.losses[0], sum(summary.losses[-5:]) / 5
    assert last < 0.7 * first, summary.losses


def test_from_family_prints_the_familys_document_and_check_passes_it(tmp_path, capsys):
    flags = ["--d-model", "16", "--n-layers", "2", "--heads", "4", "--d-ff", "32", "--seq-len", "16"]
    assert main(["graph", "from-family", *flags]) == 0
    printed = json.loads(capsys.readouterr().out)
    config = family("gpt").Config(vocab_size=65, d_model=16, n_layers=2, head_dims=(4, 4, 4, 4), d_ff=32, seq_len=16)
    assert printed == document_for("gpt", config)
    out = tmp_path / "gpt.json"
    assert main(["graph", "from-family", *flags, "--out", str(out)]) == 0
    assert str(out) in capsys.readouterr().out
    assert json.loads(out.read_text()) == printed
    assert main(["graph", "check", str(out), "--seq-len", "16"]) == 0
    assert f"parameters: {n_params(family('gpt'), config):,}" in capsys.readouterr().out


def test_from_family_writes_the_lookahead_graph_and_refuses_another_familys_flag(tmp_path, capsys):
    out = tmp_path / "la.json"
    assert main(["graph", "from-family", "--lookahead", "2", "--d-model", "16", "--d-ff", "32", "--n-layers", "1",
                 "--seq-len", "16", "--out", str(out)]) == 0
    assert main(["graph", "check", str(out), "--seq-len", "16"]) == 0
    assert "2 other loss heads" in capsys.readouterr().out
    assert main(["graph", "from-family", "--family", "gpt", "--lookahead", "2"]) == 2
    assert "the gpt family has no lookahead" in capsys.readouterr().err


def test_show_prints_the_group_tree_with_shapes_and_counts(capsys):
    path = ROOT / "examples" / "graphs" / "parallel_block.json"
    assert main(["graph", "show", str(path), "--seq-len", str(SEQ_LEN)]) == 0
    lines = capsys.readouterr().out.splitlines()
    config = family("graph").Config(vocab_size=65, graph=str(path), seq_len=SEQ_LEN)
    assert lines[0].startswith(f"{path}: {n_params(family('graph'), config):,} parameters")
    blocks = [line for line in lines if "group parallel_block" in line]
    assert [line.split()[0] for line in blocks] == ["blocks/0", "blocks/1", "blocks/2", "blocks/3"]
    top = [line for line in lines[1:] if re.match(r"  \S", line)]  # the top level: two spaces, then a name
    counts = [int(m.group(1).replace(",", "")) for m in (re.search(r"([\d,]+) parameters$", line) for line in top) if m]
    assert sum(counts) == n_params(family("graph"), config)  # the top level's counts add up to the whole
    assert any(line.strip().startswith("heads  rope_attention -> out: stream [T, 64]") for line in lines)


def test_ops_lists_every_primitive(capsys):
    from microgpt.model.graph.ops import OPS

    assert main(["graph", "ops"]) == 0
    out = capsys.readouterr().out
    for op in OPS.values():
        assert f"\n{op.name}(" in f"\n{out}" and op.doc in out


def test_the_docs_table_of_primitives_is_the_code():
    """`python -m microgpt.cli.graph_show --write docs/graphs.md` mends it."""
    assert docs_block() in GRAPHS_DOC.read_text(encoding="utf-8")


def graph_command_lines() -> list[list[str]]:
    found = []
    for doc in (ROOT / "README.md", GRAPHS_DOC):
        for block in re.findall(r"```(?:bash|sh)\n(.*?)```", doc.read_text(encoding="utf-8"), re.DOTALL):
            for line in block.replace("\\\n", " ").splitlines():
                words = shlex.split(line, comments=True)
                if words[:2] == ["microgpt", "graph"]:
                    found.append(words[1:])
    return found


def test_every_graph_command_in_the_docs_parses():
    lines = graph_command_lines()
    assert {words[1] for words in lines} == {"check", "show", "from-family", "ops"}
    for words in lines:
        assert build_parser()[0].parse_args(words).command == "graph"


def test_every_example_is_described_in_the_docs():
    text = GRAPHS_DOC.read_text(encoding="utf-8")
    for path in EXAMPLES:
        assert f"`{path.name}`" in text
