"""Gap heads you can use (issue 32): `sample --fill` fills every hole of a text a model trained on a repeating
pattern has learnt, with its gap heads reading both sides (and right where the text before a hole cannot
say); `eval --fill-rate` scores the fill against the main head's guess from the left, and `eval` every head
on its own; a model without gap heads fills from the left and says so in one line."""

from __future__ import annotations

import json
import random

import pytest

from microgpt.cli import main
from microgpt.use.loaded import load

SMALL = ["--d-model", "16", "--n-layers", "1", "--heads", "1", "--seq-len", "16", "--lr", "0.01", "--backend",
         "numpy", "--threads", "1", "--quiet", "--gen", "0", "--val-tokens", "0"]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Trained once for the module: gap heads and a plain GPT on a repeating pattern, gap heads on pairs."""
    root = tmp_path_factory.mktemp("fill")
    (root / "pattern.txt").write_text("abcdefgh" * 300, encoding="utf-8")
    rng = random.Random(0)
    (root / "pairs.txt").write_text("".join(rng.choice(["a1 ", "b2 "]) for _ in range(1500)), encoding="utf-8")
    for name, text, flags in (("gap", "pattern.txt", ["--lookahead", "2", "--lookahead-mode", "gap", "--steps", "150",
                                                      "--batch-size", "8"]),
                              ("gpt", "pattern.txt", ["--steps", "150", "--batch-size", "8"]),
                              ("pairs", "pairs.txt", ["--lookahead", "1", "--lookahead-mode", "gap", "--steps", "800",
                                                      "--batch-size", "16"])):
        assert main(["train", str(root / text), *SMALL, *flags, "--model", str(root / name)]) == 0
    return root


def test_the_gap_heads_fill_every_hole_of_a_repeating_pattern(models, capsys):
    filled = load(models / "gap", backend="numpy").fill("abcd_fgh_bcd__ghab__efgh_")
    assert filled.text == "abcdefgh" * 3 + "a" and filled.holes == 7
    assert filled.by_gap_heads == 7 and filled.used == "filled 7 holes: 7 by the gap heads, from both sides"
    assert main(["sample", str(models / "gap"), "--fill", "abcd#fgh", "--mask", "#", "--backend", "numpy"]) == 0
    out = capsys.readouterr()
    assert out.out == "abcdefgh\n" and out.err.strip() == "fill: filled 1 hole: 1 by the gap heads, from both sides"


def test_the_gap_heads_read_the_text_after_a_hole(models):
    """a or b is a coin toss from the left; the digit after it says which. The gap head gets each one right."""
    filled = load(models / "pairs", backend="numpy").fill("a1 b2 _2 _1 _1 _2 b2 _1 ")
    assert filled.text == "a1 b2 b2 a1 a1 b2 b2 a1 " and filled.by_gap_heads == 5


def test_fill_rates_and_every_heads_figures_in_eval(models, capsys):
    assert main(["eval", str(models / "pairs"), str(models / "pairs.txt"), "--fill-rate", "0.2", "--max-positions",
                 "2000", "--json", "--backend", "numpy"]) == 0
    result = json.loads(capsys.readouterr().out)
    fill = result["fill"]
    assert fill["rate"] == 0.2 and 300 < fill["holes"] < 500  # 20% of 2,000 tokens, at random
    assert fill["accuracy"] > fill["left_only_accuracy"] + 0.1  # the letters the left cannot know
    heads = {h["name"]: h for h in result["heads"]}
    assert set(heads) == {"main", "lookahead 1"} and heads["lookahead 1"]["hidden"] == [1, 1]
    assert heads["lookahead 1"]["top1"] > heads["main"]["top1"] + 0.1 and heads["main"]["positions"] == 2000
    assert main(["eval", str(models / "gap"), str(models / "pattern.txt"), "--max-positions", "200",
                 "--backend", "numpy"]) == 0
    out = capsys.readouterr().out
    assert "lookahead 2  t+1 (t+1..t+2 hidden)" in out and "top-1 1.000" in out


def test_a_model_without_gap_heads_fills_from_the_left_and_says_so(models, capsys):
    assert main(["sample", str(models / "gpt"), "--fill", "abcd_fgh", "--backend", "numpy"]) == 0
    out = capsys.readouterr()
    assert out.out == "abcdefgh\n"
    assert len(out.err.strip().splitlines()) == 1
    assert "with the main head from the text before it alone: this model has no gap heads" in out.err
    assert "--lookahead-mode gap" in out.err
    assert main(["eval", str(models / "gpt"), str(models / "pattern.txt"), "--fill-rate", "0.1", "--max-positions",
                 "200", "--backend", "numpy"]) == 0
    assert "by the main head from the text before alone (this model has no gap heads)" in capsys.readouterr().out


@pytest.mark.parametrize(("flags", "words"), [
    (["--fill", "_bcd"], "starts with a hole"),
    (["--fill", "abcd"], "has no '_' to fill"),
    (["--mask", "#"], "--mask marks the holes of --fill TEXT"),
    (["--fill", "ab_d", "--mask", "##"], "--mask must be one character"),
    (["--fill", "ab_d", "--temperature", "0.5"], "--temperature is for sampling, and --fill fills holes greedily"),
    (["--fill", "ab_d", "--speculative"], "--speculative is for sampling"),
])
def test_bad_fills_are_one_line(models, capsys, flags, words):
    assert main(["sample", str(models / "gap"), *flags, "--backend", "numpy"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err, err
