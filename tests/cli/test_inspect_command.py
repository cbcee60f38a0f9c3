"""`microgpt inspect MODEL [FILE]` on a trained checkpoint loaded by `microgpt.load`: it lists the paths the trace
takes, draws the attention grid and the logit lens, writes every head's ablation ranked, and answers a mistake in
one line, writing nothing."""

from __future__ import annotations

import csv

import numpy as np
import pytest

import microgpt
from microgpt.cli import main

HELD = "It was the worst of times, it was the best of times.\n" * 3  # the text whose loss the heads' ablation ranks


def test_a_loaded_checkpoints_trace_gives_its_logits(checkpoint):
    model = microgpt.load(str(checkpoint / "ck"), backend="numpy")
    trace = model.trace("It was the")
    np.testing.assert_array_equal(trace.logits, model.logits("It was the"))
    assert trace.tokens == list("It was the") and trace["blocks.1.attn.heads[2]"].shape == (10, 6)


def test_without_outputs_it_lists_the_paths(checkpoint, capsys):
    assert main(["inspect", str(checkpoint / "ck"), "--backend", "numpy"]) == 0
    out = capsys.readouterr().out
    assert "blocks.1.attn.heads" in out and "final_norm" in out and "head " in out
    assert "attention nodes" in out and "blocks.0.attn.heads, blocks.1.attn.heads" in out


def test_it_draws_both_figures_and_ranks_every_head(checkpoint, capsys):
    pytest.importorskip("matplotlib")
    out = checkpoint / "out"
    out.mkdir(exist_ok=True)
    (out / "held.txt").write_text(HELD)
    assert main(["inspect", str(checkpoint / "ck"), str(out / "held.txt"), "--backend", "numpy", "--text",
                 "It was the best", "--attention", str(out / "a.png"), "--logit-lens", str(out / "l.png"),
                 "--ablate-heads", str(out / "heads.csv"), "--mode", "mean"]) == 0
    for figure in ("a.png", "l.png"):
        assert (out / figure).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = list(csv.DictReader((out / "heads.csv").open()))
    assert sorted((r["path"], r["width"]) for r in rows) == sorted(
        (f"blocks.{layer}.attn.heads[{head}]", str(width)) for layer in range(2) for head, width in enumerate((2, 4, 6)))
    assert [float(r["delta"]) for r in rows] == sorted((float(r["delta"]) for r in rows), reverse=True)
    assert [r["rank"] for r in rows] == [str(i) for i in range(1, 7)]
    model = microgpt.load(str(checkpoint / "ck"), backend="numpy")
    top = rows[0]
    assert float(top["loss"]) == pytest.approx(model.loss(HELD, ablate=[top["path"]], mode="mean"), abs=1e-6)


def test_a_figure_without_a_text_is_one_line_and_writes_nothing(checkpoint, capsys, tmp_path):
    assert main(["inspect", str(checkpoint / "ck"), "--backend", "numpy", "--attention", str(tmp_path / "a.png")]) == 2
    err = capsys.readouterr().err
    assert "--attention needs a text: give FILE or --text TEXT" in err and err.count("\n") == 1
    assert not list(tmp_path.iterdir())


def test_an_unknown_mode_is_one_line(checkpoint, capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_:
        main(["inspect", str(checkpoint / "ck"), "--text", "It", "--ablate-heads", str(tmp_path / "x.csv"), "--mode",
              "mena"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "did you mean mean?" in err and err.count("\n") == 1
    assert not list(tmp_path.iterdir())


def test_a_nodes_activations_and_its_heads_alone(checkpoint, capsys, tmp_path):
    pytest.importorskip("matplotlib")
    assert main(["inspect", str(checkpoint / "ck"), "--backend", "numpy", "--text", "It was", "--node",
                 "blocks.1.attn.heads", "--activations", str(tmp_path / "n.png"), "--attention",
                 str(tmp_path / "a.png")]) == 0
    assert (tmp_path / "n.png").read_bytes()[:4] == b"\x89PNG" and (tmp_path / "a.png").read_bytes()[:4] == b"\x89PNG"
    assert "blocks.1.attn.heads over 6 tokens" in capsys.readouterr().out


@pytest.mark.parametrize(("argv", "said"), [
    (["--activations", "n.png"], "--activations draws one node's output: name it with --node PATH"),
    (["--node", "blocks.0.atn.heads", "--activations", "n.png"], "did you mean blocks.0.attn.heads"),
])
def test_a_node_mistake_is_one_line_and_writes_nothing(checkpoint, capsys, tmp_path, argv, said):
    argv = [str(tmp_path / a) if a.endswith(".png") else a for a in argv]
    assert main(["inspect", str(checkpoint / "ck"), "--backend", "numpy", "--text", "It", *argv]) == 2
    err = capsys.readouterr().err
    assert said in err and err.count("\n") == 1
    assert not list(tmp_path.iterdir())
