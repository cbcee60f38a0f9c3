"""Training end to end on the CPU: the loss falls, runs are deterministic, and a resume is bit-identical."""

from __future__ import annotations

import json

import numpy as np
import pytest

from microgpt.backends import get_backend
from microgpt.cli import main
from microgpt.data.batches import SequentialBatches
from microgpt.data.tokenizer import CharTokenizer
from microgpt.model.gpt import GPT, GPTConfig

TEXT = "the quick brown fox jumps over the lazy dog. " * 40
TINY = ["--d-model", "16", "--heads", "2", "--n-layers", "1", "--d-ff", "32", "--seq-len", "16", "--gen", "0", "--quiet"]


def train_losses(seed: int, steps: int) -> list[float]:
    tok = CharTokenizer.from_text(TEXT)
    model = GPT(GPTConfig(vocab_size=tok.size, d_model=16, head_dims=(8, 8), n_layers=1, d_ff=32, seq_len=16),
                get_backend("numpy"), seed=seed)
    batches = SequentialBatches(tok.encode(TEXT), 16, batch_size=4)
    return [model.train_step(batches.next(), 3e-3) for _ in range(steps)]


def test_training_loss_falls_clearly():
    losses = train_losses(seed=0, steps=150)
    # A uniform guess over the 28-character vocabulary costs ln 28 = 3.33 nats; this text is highly
    # repetitive, so 150 Adam steps must get well under half of that.
    assert losses[0] > 3.0
    assert np.mean(losses[-10:]) < 1.5


def test_same_seed_gives_identical_losses_and_another_seed_does_not():
    assert train_losses(seed=5, steps=20) == train_losses(seed=5, steps=20)
    assert train_losses(seed=5, steps=20) != train_losses(seed=6, steps=20)


def metrics_losses(path) -> list[float]:
    return [json.loads(line)["loss"] for line in path.read_text().splitlines()]


@pytest.mark.parametrize("walk", [["--no-random-batches"], ["--random-batches"]], ids=["sequential", "random"])
def test_resume_gives_bit_identical_losses(tmp_path, monkeypatch, walk):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "text.txt").write_text(TEXT)
    common = ["train", "text.txt", *TINY, "--preset", "reference", "--batch-size", "2", "--lr", "3e-3", *walk]
    assert main([*common, "--steps", "200", "--model", "one"]) == 0
    assert main([*common, "--steps", "100", "--model", "two"]) == 0
    assert main(["train", "text.txt", "--resume", "two", "--steps", "200", "--gen", "0", "--quiet"]) == 0
    one, two = metrics_losses(tmp_path / "one.metrics.jsonl"), metrics_losses(tmp_path / "two.metrics.jsonl")
    assert len(one) == len(two) == 200
    assert one == two  # bit-identical: the same floats, not merely close


def test_resume_without_the_file_finds_the_corpus_from_another_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "text.txt").write_text(TEXT)
    assert main(["train", "text.txt", *TINY, "--steps", "3", "--model", "ck"]) == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert main(["train", "--resume", str(tmp_path / "ck"), "--steps", "6", "--gen", "0", "--quiet"]) == 0
    assert len(metrics_losses(tmp_path / "ck.metrics.jsonl")) == 6


def test_train_from_python_in_one_call(tmp_path):
    """microgpt.train: the README's three lines, with the CLI's settings by their YAML keys."""
    import microgpt

    corpus = tmp_path / "t.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog. " * 40)
    run, summary = microgpt.train(corpus, steps=4, d_model=16, heads="2", n_layers=1, d_ff=32, seq_len=16,
                                  backend="numpy", model=str(tmp_path / "ck"))
    assert summary.steps == 4 and len(summary.losses) == 4 and summary.checkpoint == tmp_path / "ck"
    assert (tmp_path / "ck" / "config.json").exists() and (tmp_path / "results.jsonl").exists()
    assert run.model.config.head_dims == (8, 8)
    text = run.sample(10)
    assert len(text) == 10 and set(text) <= set(run.tokenizer.vocab)


def test_a_resume_on_another_backend_says_so(tmp_path, monkeypatch, capsys):
    """`auto` may pick another backend than the one a run trained on; the resume says what that costs."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "text.txt").write_text(TEXT)
    assert main(["train", "text.txt", *TINY, "--steps", "3", "--model", "ck", "--backend", "numpy"]) == 0
    capsys.readouterr()
    assert main(["train", "--resume", "ck", "--steps", "5", "--backend", "numpy", "--gen", "0"]) == 0
    assert "resuming on the" not in capsys.readouterr().out
    assert main(["train", "--resume", "ck", "--steps", "7", "--backend", "cpu", "--gen", "0"]) == 0
    assert "resuming on the cpu backend, and ck trained on numpy" in capsys.readouterr().out
