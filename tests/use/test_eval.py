"""Evaluation: batched scoring against a one-window-at-a-time loop, the derived figures, and `microgpt eval`."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from microgpt.cli import main
from microgpt.core.errors import DataError
from microgpt.data.tokenizer import CharTokenizer
from microgpt.model.checkpoint import save_checkpoint
from microgpt.use.evaluate import evaluate
from tiny_gpt import VOCAB, tiny_model

TEXT = "abc def\nhag bad cafe\nbeef ghee\n" * 2  # 62 characters


def slow_nll(model, tokens, positions):
    """Mean -log p(tokens[t] | the seq_len tokens before t), one window per forward, for the first `positions` t."""
    seq_len = model.config.seq_len
    losses = []
    for t in range(seq_len, seq_len + positions):
        logits = model.be.to_host(model.logits(tokens[None, t - seq_len : t]))[-1].astype(np.float64)  # (vocab,)
        probs = np.exp(logits - logits.max())
        losses.append(-math.log(probs[tokens[t]] / probs.sum()))
    return math.fsum(losses) / positions


@pytest.mark.parametrize("batch_size", [1, 4, 7, 500])
def test_batched_evaluation_matches_one_window_at_a_time(backend_name, batch_size):
    model = tiny_model(backend_name, seed=5)
    tokens = CharTokenizer(VOCAB).encode(TEXT)
    result = evaluate(model, tokens, batch_size=batch_size, stride=1)
    assert result.positions == len(TEXT) - 6
    assert result.nll == pytest.approx(slow_nll(model, tokens, len(TEXT) - 6), rel=1e-5)
    assert result.perplexity == pytest.approx(math.exp(result.nll))
    assert result.bits_per_char == pytest.approx(result.nll / math.log(2))


def slow_strided_nll(model, tokens, stride):
    """The strided definition, one window per forward: window k scores positions seq_len + k * stride onwards
    (up to stride of them), reading the seq_len tokens that end at its last scored position."""
    seq_len, end = model.config.seq_len, len(tokens)
    losses = []
    for first in range(seq_len, end, stride):
        last = min(first + stride, end) - 1
        start = last - seq_len
        logits = model.be.to_host(model.logits(tokens[None, start : start + seq_len])).astype(np.float64)  # (T, V)
        for t in range(first, last + 1):
            row = logits[t - start - 1]
            losses.append(-math.log(np.exp(row - row.max())[tokens[t]] / np.exp(row - row.max()).sum()))
    assert len(losses) == end - seq_len  # every position once
    return math.fsum(losses) / len(losses)


@pytest.mark.parametrize("stride", [2, 4, 6])
def test_strided_evaluation_matches_its_definition(stride):
    model = tiny_model(seed=5)
    tokens = CharTokenizer(VOCAB).encode(TEXT)  # 56 positions: strides 4 and 6 leave a short last window
    result = evaluate(model, tokens, batch_size=3, stride=stride)
    assert result.positions == len(TEXT) - 6
    # float32 logits summed in a different order than the loop's: relative rounding ~1e-7, 1e-5 is a margin
    assert result.nll == pytest.approx(slow_strided_nll(model, tokens, stride), rel=1e-5)
    assert result.nll != pytest.approx(evaluate(model, tokens, stride=1).nll, rel=1e-4)  # shorter contexts: another figure


def token_by_token_nll(model, tokens, stride, positions=None):
    """The strided definition again, one forward per token: position t is scored in the window of seq_len tokens
    that ends at the last position of t's group (seq_len + k * stride onwards, stride of them, the last group
    cut at the text's end), from that window's row for t."""
    seq_len = model.config.seq_len
    end = len(tokens) if positions is None else seq_len + positions
    losses = []
    for t in range(seq_len, end):
        last = min(seq_len + ((t - seq_len) // stride + 1) * stride, end) - 1
        window = tokens[last - seq_len : last]  # row j predicts position last - seq_len + j + 1
        row = model.be.to_host(model.logits(window[None]))[t - (last - seq_len) - 1].astype(np.float64)  # (vocab,)
        losses.append(-math.log(np.exp(row - row.max())[tokens[t]] / np.exp(row - row.max()).sum()))
    return math.fsum(losses) / len(losses)


@pytest.mark.parametrize("batch_size", [1, 4, 500])
def test_the_default_scores_consecutive_windows_as_a_token_by_token_reference_does(backend_name, batch_size):
    model = tiny_model(backend_name, seed=5)
    tokens = CharTokenizer(VOCAB).encode(TEXT)  # 56 positions: windows of 6 leave a short last one
    result = evaluate(model, tokens, batch_size=batch_size)
    assert result.positions == len(TEXT) - 6
    # float32 logits summed in a different order than the loop's: relative rounding ~1e-7, 1e-5 is a margin
    assert result.nll == pytest.approx(token_by_token_nll(model, tokens, stride=6), rel=1e-5)
    assert result.nll == evaluate(model, tokens, batch_size=batch_size, stride=6).nll
    assert token_by_token_nll(model, tokens, stride=1) == pytest.approx(slow_nll(model, tokens, len(TEXT) - 6),
                                                                        rel=1e-9)  # the reference's exact figure


class Streams:
    """A backend that says it has `streams` streams and records how many tasks each run_streams call runs."""

    def __init__(self, backend, streams: int):
        self.backend, self.streams, self.runs = backend, streams, []

    def __getattr__(self, name):
        return getattr(self.backend, name)

    def run_streams(self, tasks):
        self.runs.append(len(tasks))
        return [task() for task in tasks]


def test_a_batch_of_windows_is_split_over_the_backends_streams():
    model = tiny_model(seed=5)
    tokens = CharTokenizer(VOCAB).encode(TEXT)
    whole = evaluate(model, tokens, batch_size=7, stride=3)
    model.be = Streams(model.be, 3)
    seen = []
    forward = model.logits
    model.logits = lambda ids: seen.append(len(ids)) or forward(ids)
    split = evaluate(model, tokens, batch_size=7, stride=3)  # 19 windows: batches of 7, 7 and 5
    assert model.be.runs == [3, 3, 3] and seen == [3, 2, 2, 3, 2, 2, 2, 2, 1]
    assert split.nll == pytest.approx(whole.nll, rel=1e-6)


def test_eval_help_says_what_the_stride_trades(capsys):
    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    for said in ("between seq_len - S + 1 and seq_len tokens of context", "1/S as many windows",
                 "seq_len (the default) costs a training step's forward",
                 "1 (exact: every token with its full seq_len of context) about seq_len times that"):
        assert said in help_text


def test_a_stride_beyond_seq_len_is_refused():
    with pytest.raises(DataError, match="--stride 7 must be between 1 and the model's seq_len 6"):
        evaluate(tiny_model(seed=5), CharTokenizer(VOCAB).encode(TEXT), stride=7)


def test_max_positions_scores_only_the_first_positions():
    model = tiny_model(seed=5)
    tokens = CharTokenizer(VOCAB).encode(TEXT)
    capped = evaluate(model, tokens, batch_size=4, max_positions=9, stride=1)
    assert capped.positions == 9
    assert capped.nll == pytest.approx(slow_nll(model, tokens, 9), rel=1e-5)
    assert capped.nll != pytest.approx(evaluate(model, tokens, stride=1).nll, rel=1e-3)
    assert evaluate(model, tokens, max_positions=10_000).positions == len(TEXT) - 6


def test_a_text_without_one_full_window_is_refused():
    model = tiny_model(seed=5)
    assert evaluate(model, CharTokenizer(VOCAB).encode("abcdefg")).positions == 1  # exactly seq_len + 1
    with pytest.raises(DataError, match="6 tokens, fewer than seq_len \\+ 1 = 7"):
        evaluate(model, CharTokenizer(VOCAB).encode("abcdef"))


@pytest.fixture
def checkpoint(tmp_path):
    model = tiny_model(seed=5)
    save_checkpoint(tmp_path / "ck", model, CharTokenizer(VOCAB), family_name="gpt")
    (tmp_path / "held_out.txt").write_text(TEXT, encoding="utf-8")
    return model, str(tmp_path / "ck"), str(tmp_path / "held_out.txt")


def test_cli_eval_json_is_one_parsable_line_with_the_figures(checkpoint, capsys):
    model, ck, text_file = checkpoint
    assert main(["eval", ck, text_file, "--json", "--max-positions", "20", "--batch-size", "3",
                 "--backend", "numpy"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1
    report = json.loads(lines[0])
    assert set(report) == {"model", "file", "positions", "characters", "stride", "nll", "perplexity", "bits_per_char",
                           "seconds"}
    assert (report["model"], report["file"], report["positions"], report["characters"]) == (ck, text_file, 20, 20)
    assert report["bits_per_char"] == pytest.approx(report["nll"] / math.log(2), rel=1e-12)  # a token is a character
    assert report["stride"] == 6  # the model's seq_len, the default
    assert report["nll"] == pytest.approx(token_by_token_nll(model, CharTokenizer(VOCAB).encode(TEXT), 6, 20), rel=1e-5)
    assert report["perplexity"] == pytest.approx(math.exp(report["nll"]))
    assert report["bits_per_char"] == pytest.approx(report["nll"] / math.log(2))
    assert report["seconds"] >= 0


def test_cli_eval_prints_a_readable_summary(checkpoint, capsys):
    _, ck, text_file = checkpoint
    assert main(["eval", ck, text_file, "--backend", "numpy"]) == 0
    out = capsys.readouterr().out
    for label in ("scored:          56 tokens (56 characters)", "NLL:", "perplexity:", "bits per char:", "time:"):
        assert label in out


@pytest.mark.parametrize("content, message", [
    ("abc def\nhag bQd\n", "has the character 'Q' (U+0051) at offset 13 (line 2), which is not in the model's vocabulary"),
    ("abcdef", "has 6 tokens, fewer than seq_len + 1 = 7"),
])
def test_cli_eval_unusable_text_is_one_clear_line(checkpoint, tmp_path, capsys, content, message):
    _, ck, _ = checkpoint
    bad = tmp_path / "bad.txt"
    bad.write_text(content, encoding="utf-8")
    assert main(["eval", ck, str(bad), "--backend", "numpy"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("microgpt eval: error: ") and message in lines[0]
    assert str(bad) in lines[0] and "Traceback" not in captured.err


def test_cli_eval_stride_reports_the_strided_figure(checkpoint, capsys):
    model, ck, text_file = checkpoint
    assert main(["eval", ck, text_file, "--json", "--stride", "4", "--backend", "numpy"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["stride"] == 4
    assert report["nll"] == evaluate(model, CharTokenizer(VOCAB).encode(TEXT), stride=4).nll
    assert main(["eval", ck, text_file, "--stride", "4", "--backend", "numpy"]) == 0
    assert "each with 3 to 6 before it (--stride 4; --stride 1 for the exact figure, slower)" in capsys.readouterr().out
    assert main(["eval", ck, text_file, "--json", "--stride", "1", "--backend", "numpy"]) == 0
    assert json.loads(capsys.readouterr().out)["nll"] == pytest.approx(slow_nll(model, CharTokenizer(VOCAB).encode(TEXT),
                                                                                len(TEXT) - 6), rel=1e-5)
