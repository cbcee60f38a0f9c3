"""Bad graph documents, each answered with one clear line (no traceback) and exit status 2, with nothing
written: by `microgpt graph check`, by `microgpt train text.txt --graph BAD --model ck` (no checkpoint
directory appears) and by the graph family's config. Also `graph from-family --out`'s refusals, each before
anything is written."""

from __future__ import annotations

import copy
import itertools
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from error_lines import one_error_line
from folder_files import fake_checkpoint
from memory_limits import GIB, held_to
from microgpt.cli import main
from microgpt.core.errors import ConfigError
from microgpt.model.family import family
from microgpt.model.graph.causality import check_causality
from microgpt.model.graph.compile import compile_graph
from microgpt.model.graph.from_family import document_for
from microgpt.model.graph.library import library_groups
from peak_memory import PeakMemory

TEXT = "It was the best of times, it was the worst of times.\n" * 30
GPT = family("gpt").Config(vocab_size=65, d_model=12, n_layers=1, head_dims=(4, 4, 4), d_ff=24, seq_len=16)


def base() -> dict:
    """gpt's graph (tok_emb, blocks, final_norm, head, loss), edges 0-5: tokens -> tok_emb -> blocks ->
    final_norm -> head -> loss and logits."""
    return document_for("gpt", GPT)


def changed(change) -> dict:
    document = base()
    change(document)
    return document


def with_group(name: str, change) -> dict:
    """gpt's graph with a copy of the library group `name` in it, changed."""
    document = base()
    group = copy.deepcopy(library_groups()[name])
    change(group)
    document["groups"] = {name: group}
    return document


def node(group: dict, node_id: str) -> dict:
    return next(n for n in group["nodes"] if n["id"] == node_id)


def nested_groups(document: dict) -> None:
    """`outer` uses `inner`, listed after it."""
    layer = {"params": {"d": None}, "inputs": {"x": "stream[d]"}, "outputs": {"x": "stream[d]"}}
    document["groups"] = {
        "outer": {**layer, "nodes": [{"id": "in", "group": "inner"}],
                  "edges": [{"from": "x", "to": "in.x"}, {"from": "in.x", "to": "x"}]},
        "inner": {**layer, "nodes": [{"id": "ln", "op": "layer_norm"}],
                  "edges": [{"from": "x", "to": "ln.x"}, {"from": "ln.out", "to": "x"}]}}
    document["nodes"][1] = {"id": "blocks", "group": "outer"}


def groups_nested(document: dict, depth: int) -> None:
    """`blocks` uses g<depth - 1>, which uses g<depth - 2>, ... down to g0, which passes its input on."""
    layer = {"params": {"d": None}, "inputs": {"x": "stream[d]"}, "outputs": {"x": "stream[d]"}}
    document["groups"] = {"g0": {**layer, "nodes": [], "edges": [{"from": "x", "to": "x"}]}}
    for i in range(1, depth):
        document["groups"][f"g{i}"] = {**layer, "nodes": [{"id": "inner", "group": f"g{i - 1}"}],
                                       "edges": [{"from": "x", "to": "inner.x"}, {"from": "inner.x", "to": "x"}]}
    document["nodes"][1] = {"id": "blocks", "group": f"g{depth - 1}"}


def layer_norms(document: dict, thousands: int) -> None:
    """`blocks` is `thousands` x 1,000 LayerNorms in a row."""
    layer = {"params": {"d": None}, "inputs": {"x": "stream[d]"}, "outputs": {"x": "stream[d]"}}
    document["groups"] = {
        "norm": {**layer, "nodes": [{"id": "ln", "op": "layer_norm"}],
                 "edges": [{"from": "x", "to": "ln.x"}, {"from": "ln.out", "to": "x"}]},
        "tower": {**layer, "nodes": [{"id": "norms", "group": "norm", "repeat": 1000}],
                  "edges": [{"from": "x", "to": "norms.x"}, {"from": "norms.x", "to": "x"}]}}
    document["nodes"][1] = {"id": "blocks", "group": "tower", "repeat": thousands}


def scaled(by: float, count: int = 1) -> dict:
    """gpt's graph with `count` scale nodes by `by` between final_norm and head."""
    document = base()
    document["nodes"] += [{"id": f"s{i}", "op": "scale", "params": {"by": by}} for i in range(count)]
    chain = ["final_norm.out", *(f"s{i}" for i in range(count)), "head.x"]
    document["edges"][3:4] = [{"from": a if "." in a else f"{a}.out", "to": b if "." in b else f"{b}.x"}
                              for a, b in itertools.pairwise(chain)]
    return document


def mul_of_two_widths(document: dict) -> None:
    document["nodes"] += [{"id": "wide", "op": "embedding", "params": {"width": "2*d"}}, {"id": "m", "op": "mul"}]
    document["edges"] += [{"from": "tokens", "to": "wide.ids"}, {"from": "tok_emb.out", "to": "m.a"},
                          {"from": "wide.out", "to": "m.b"}]


def yaml_bomb() -> str:
    lines = ["microgpt_graph: 1", 'a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    return "\n".join([*lines, "description: *a9", ""])


def edge(document: dict, index: int, source: str, target: str) -> None:
    document["edges"][index] = {"from": source, "to": target}


J = json.dumps
# (case, the file's contents: a document, text or bytes, words the one line must hold)
CASES = [
    ("cycle", changed(lambda d: d["edges"].append({"from": "final_norm.out", "to": "tok_emb.ids"})),
     "tok_emb -> blocks -> final_norm -> tok_emb form a cycle"),
    ("self_loop", changed(lambda d: d["edges"].append({"from": "final_norm.out", "to": "final_norm.x"})),
     "final_norm -> final_norm form a cycle"),
    ("edge_to_a_port_that_is_not", changed(lambda d: edge(d, 3, "final_norm.out", "head.nope")),
     "head: op logits has no input 'nope'"),
    ("edge_from_a_port_that_is_not", changed(lambda d: edge(d, 3, "final_norm.nope", "head.x")),
     "head.x: its edge comes from 'final_norm.nope'"),
    ("edge_to_a_node_that_is_not", changed(lambda d: edge(d, 3, "final_norm.out", "ghost.x")),
     "there is no node 'ghost'"),
    ("input_left_unwired", changed(lambda d: d["edges"].pop(3)), "head.x: nothing is wired to this input"),
    ("unknown_op", changed(lambda d: d["nodes"][2].update(op="layernorm")), "final_norm: unknown op 'layernorm'"),
    ("unknown_param", changed(lambda d: d["nodes"][3].update(params={"bais": False})),
     "head: op logits has no param 'bais'"),
    ("unknown_group_param", changed(lambda d: d["nodes"][1].update(params={"dd": 3})),
     "blocks: group transformer_block has no param 'dd'"),
    ("shape_clash_at_a_group_port", changed(lambda d: d["nodes"][0].update(params={"width": "2*d"})),
     "blocks/0.x: expects [T, d]=[T, 12], got [T, 24]"),
    ("shape_clash_at_a_primitive_port", changed(mul_of_two_widths), "m.b: expects [T, 12], got [T, 24]"),
    ("shape_clash_deep_in_a_group", with_group("attention", lambda g: node(g, "wq").update(params={"out": "2*d"})),
     "blocks/0/attn/rope_q: param heads [4, 4, 4] sums to 12, but the input is 24 wide"),
    ("logits_into_a_stream_port", changed(lambda d: (d["nodes"].append({"id": "x2", "op": "linear",
                                                                         "params": {"out": 8}}),
                                                      d["edges"].append({"from": "head.out", "to": "x2.x"}))),
     "x2.x: expects stream, got logits"),
    ("dims_binds_vocab", changed(lambda d: d["dims"].update(vocab=65)), "dims binds 'vocab', which the run binds"),
    ("dims_binds_T", changed(lambda d: d["dims"].update(T=16)), "dims binds 'T', which the run binds"),
    ("group_param_binds_T", with_group("feed_forward", lambda g: g["params"].update(T=4)),
     "group feed_forward: params binds 'T', which the run binds"),
    ("a_dimension_given_twice", J(base()).replace('"dims": {', '"dims": {"d": 8, '),
     "the key 'd' appears twice in one object"),
    ("a_yaml_key_given_twice", "microgpt_graph: 1\ndims: {d: 8, d: 9}\nnodes: []\nedges: []\n",
     "the key 'd' appears twice in one mapping"),
    ("unbound_name", changed(lambda d: d["dims"].update(d_ff="4*width")), "'4*width' names 'width', which is not bound"),
    ("group_used_before_it_is_defined", changed(nested_groups),
     "group 'outer' uses group 'inner', which is not defined before it"),
    ("unknown_group", changed(lambda d: d["nodes"][1].update(group="transformer_blok")),
     "blocks: unknown group 'transformer_blok'"),
    ("op_an_object", changed(lambda d: d["nodes"][2].update(op={"name": "layer_norm"})),
     "final_norm: op must be a name, got {'name': 'layer_norm'}"),
    ("group_a_list", changed(lambda d: d["nodes"][1].update(group=["transformer_block"])),
     "blocks: group must be a name, got ['transformer_block']"),
    ("groups_nested_3000_deep", changed(lambda d: groups_nested(d, 3000)), "groups nest deeper than 32"),
    ("more_primitives_than_the_limit", changed(lambda d: layer_norms(d, 21)), "more than 20,000 primitives"),
    ("scale_by_nan", scaled(float("nan")), "s0: param by must be a finite number from -1,000,000 to 1,000,000, got nan"),
    ("scale_by_infinity", scaled(float("inf")), "s0: param by must be a finite number from -1,000,000 to 1,000,000"),
    ("scale_by_1e308", scaled(1e308), "s0: param by must be a finite number from -1,000,000 to 1,000,000, got 1e+308"),
    ("loss_weight_nan", changed(lambda d: d["nodes"][4].update(params={"weight": float("nan")})),
     "loss: param weight must be a finite number"),
    ("init_1e300", changed(lambda d: d["nodes"][3].update(params={"init": 1e300})),
     "head: param init must be a finite number from 0 to 1,000,000"),
    ("heads_past_the_limit", changed(lambda d: d["dims"].update(heads=8192)), "more than 4,096"),
    ("newer_version", changed(lambda d: d.update(microgpt_graph=2)), "is graph format 2, written by a newer microgpt"),
    ("no_version", changed(lambda d: d.pop("microgpt_graph")), "has no 'microgpt_graph' key"),
    ("no_next_token_loss", changed(lambda d: (d["nodes"].pop(4), d["edges"].pop(4))),
     "the graph has no loss on its logits"),
    ("fifty_megabytes", J({"microgpt_graph": 1, "description": "x" * 50 * 1024**2}),
     "bytes; a graph document is at most 4,194,304"),
    ("nested_100000_lists", "[" * 100_000 + "]" * 100_000, "nests deeper than 64 levels"),
    ("nested_100000_objects", '{"a": ' * 100_000 + "1" + "}" * 100_000, "nests deeper than 64 levels"),
    ("nested_yaml", "x: " + "[" * 100_000 + "]" * 100_000 + "\n", "nests deeper than 64 levels"),
    ("yaml_bomb", yaml_bomb(), "once its YAML aliases (*name) are expanded"),
    ("a_list", "[1, 2, 3]", "is not a graph document: it holds list"),
    ("a_yaml_string", "just some words\n", "is not a graph document: it holds str"),
    ("broken_json", '{"microgpt_graph": 1, "nodes": [', "is not valid JSON"),
    ("not_utf8", '{"microgpt_graph": 1, "description": "café"}'.encode("latin-1"), "cannot be read as UTF-8 text"),
    ("missing", None, "No such file or directory"),
    ("a_directory", "DIR", "is not a file"),
]


def write_case(where: Path, name: str, contents) -> Path:
    path = where / f"{name}.json"
    if contents == "DIR":
        path.mkdir()
    elif isinstance(contents, bytes):
        path.write_bytes(contents)
    elif isinstance(contents, str):
        path.write_text(contents, encoding="utf-8")
    elif contents is not None:
        path.write_text(J(contents), encoding="utf-8")
    return path


@pytest.mark.parametrize(("name", "contents", "words"), CASES, ids=[case[0] for case in CASES])
def test_a_bad_document_is_one_line_and_exit_2_everywhere(name, contents, words, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "text.txt").write_text(TEXT)
    path = write_case(tmp_path, name, contents)
    before = sorted(p.name for p in tmp_path.iterdir())

    assert main(["graph", "check", str(path), "--seq-len", "16"]) == 2
    line = one_error_line(capsys)
    assert line.startswith("microgpt graph: error: ") and words in line, line

    assert main(["train", "text.txt", "--graph", str(path), "--model", "ck", "--seq-len", "16", "--steps", "2",
                 "--backend", "numpy", "--quiet"]) == 2
    line = one_error_line(capsys)
    assert line.startswith("microgpt train: error: ") and words in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no ck, ck-best, plot or log

    with pytest.raises(ConfigError, match="."):
        family("graph").Config(vocab_size=65, graph=str(path), seq_len=16)


def test_a_graph_that_sees_the_future_is_refused_naming_where(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "text.txt").write_text(TEXT)
    path = write_case(tmp_path, "full", with_group("attention", lambda g: node(g, "heads").update(
        params={"mask": "full"})))
    assert main(["graph", "check", str(path), "--seq-len", "16"]) == 2
    assert "it first enters at blocks/0/attn/heads (rope_attention with mask full)" in one_error_line(capsys)
    assert main(["train", "text.txt", "--graph", str(path), "--model", "ck", "--seq-len", "16", "--steps", "2",
                 "--backend", "numpy", "--quiet"]) == 2
    assert "the graph sees the future" in one_error_line(capsys)
    assert not (tmp_path / "ck").exists()


def test_the_causality_check_holds_one_value_at_a_time():
    """The check kept every value of the graph, and what each node saved for a backward it never runs: 199,000
    LayerNorms took 9.3 GB (and 366 s, a lookup in a tuple of every value at every node). Now each value is
    compared as it is made and freed as in training: 10,000 LayerNorms hold a few MB."""
    program = compile_graph(changed(lambda d: layer_norms(d, 10)), vocab=65, seq_len=16)
    with PeakMemory() as memory:
        assert check_causality(program, 16, None).startswith("sound")
    assert memory.bytes < 32 * 2**20, f"{memory.bytes / 2**20:.0f} MiB"


def test_values_that_overflow_are_refused_as_that_not_as_the_future(tmp_path, monkeypatch, capsys):
    """60 scales by a million, each allowed, overflow float64: the NaN that follows moved at every position, and
    the check said the graph sees the future, under multi-line RuntimeWarnings. Now one line naming the
    first node whose output is not finite."""
    monkeypatch.chdir(tmp_path)
    path = write_case(tmp_path, "overflow", scaled(1e6, 60))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert main(["graph", "check", str(path), "--seq-len", "16"]) == 2
    line = one_error_line(capsys)
    assert "its output is not finite (inf or nan) on the causality check's weights" in line, line
    assert "sees the future" not in line


@pytest.mark.parametrize("command", [
    ["graph", "check", "huge.json"], ["graph", "show", "huge.json"],
    ["graph", "from-family", "--d-model", str(2**29), "--heads", str(2**29)],
])
def test_half_a_billion_heads_are_refused_before_any_is_made(command, tmp_path):
    """2^29 heads of width 1 (or 2): their widths were a tuple of 2^29 at every rope and attention node (4 GiB
    each, minutes); now one line, in a process that cannot take 1 GiB."""
    (tmp_path / "huge.json").write_text(J(changed(lambda d: d["dims"].update(d=2**30, heads=2**29))))
    done = subprocess.run([sys.executable, "-m", "microgpt", *command], cwd=tmp_path, capture_output=True, check=False,
                          text=True, preexec_fn=held_to(GIB), timeout=120,
                          env={**os.environ, "OPENBLAS_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"})
    assert done.returncode == 2, done.stderr
    assert "536,870,912" in done.stderr and "more than 4,096" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_an_unknown_flag_of_a_graph_action_is_one_line(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["graph", "check", "g.json", "--seq-le", "16"])
    assert stop.value.code == 2
    assert "microgpt graph check: error: unrecognized arguments: --seq-le 16; did you mean --seq-len?" in \
        one_error_line(capsys)
    with pytest.raises(SystemExit) as stop:
        main(["graph", "--bogus", "check", "g.json"])
    assert stop.value.code == 2
    assert "microgpt graph: error: unrecognized arguments: --bogus" in one_error_line(capsys)


@pytest.mark.parametrize(("out", "words"), [
    ("folder", "is a directory"),
    ("taken.json", "exists; add --overwrite to replace it"),
    ("ck/g.json", "is inside the checkpoint"),
    ("missing/g.json", "cannot write in missing"),
])
def test_from_family_refuses_an_out_it_must_not_write(out, words, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "folder").mkdir()
    (tmp_path / "taken.json").write_text("mine")
    fake_checkpoint(tmp_path / "ck")
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    assert main(["graph", "from-family", "--d-model", "16", "--out", out]) == 2
    line = one_error_line(capsys)
    assert f"--out {out}" in line and words in line, line
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before
    assert (tmp_path / "taken.json").read_text() == "mine"


def test_from_family_overwrites_only_when_told(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "taken.json").write_text("mine")
    assert main(["graph", "from-family", "--d-model", "16", "--out", "taken.json", "--overwrite"]) == 0
    assert json.loads((tmp_path / "taken.json").read_text())["dims"]["d"] == 16
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken.json"]  # no temporary file left beside it


def test_from_family_refuses_a_bad_shape_and_writes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["graph", "from-family", "--d-model", "10", "--heads", "4", "--out", "g.json"]) == 2
    assert "--heads 4 does not divide --d-model 10" in one_error_line(capsys)
    assert main(["graph", "from-family", "--family", "graph", "--out", "g.json"]) == 2
    assert "is a graph already" in one_error_line(capsys)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(("flags", "words"), [
    (["--lookahead", "5000", "--seq-len", "6000"],
     "--lookahead: must be a whole number from 1 to 4096"),
    (["--cooperative", ",".join(["d1n1"] * 1001)], "--cooperative lists 1,001 specs; it takes at most 1,000"),
])
def test_from_family_refuses_a_count_of_parts_past_its_limit(flags, words, tmp_path, monkeypatch, capsys):
    """400,000 lookahead heads were a document of millions of nodes (gigabytes, in the studio); 150,000 experts took 196 s to
    lay out. Each is refused from its number."""
    monkeypatch.chdir(tmp_path)
    try:
        status = main(["graph", "from-family", *flags, "--out", "g.json"])
    except SystemExit as stop:  # a flag's value past its limit: argparse's exit
        status = stop.code
    assert status == 2
    assert words in one_error_line(capsys)
    assert not list(tmp_path.iterdir())
