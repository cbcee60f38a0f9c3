"""A model family defined here alone trains, saves, resumes, samples and evaluates through the CLI.

`bigram` is this module: a family of a few lines (a table of next-token logits per token, plus a frozen
prior), registered for the test under registry.FAMILIES with its own setting, --table-std. Nothing in
microgpt outside the registry knows it, so every step below goes through the family protocol alone.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
import pytest

from microgpt.backends.numpy_backend import NumpyBackend
from microgpt.cli import main
from microgpt.core.checks import POSITIVE_NUMBER, whole
from microgpt.core.fields import check_fields, setting
from microgpt.core.registry import FAMILIES
from microgpt.model.decode import Rerun
from microgpt.model.params import Parameters, ParameterViews, ParamSpec
from microgpt.model.thread_split import ThreadSplit

# ---- the family ------------------------------------------------------------------------------------------


@dataclass
class Config:
    vocab_size: int
    seq_len: int = setting(64, "context length in tokens (characters with the char tokenizer)", whole(1),
                           metavar="T")
    table_std: float = setting(0.02, "the bigram table's initial spread", POSITIVE_NUMBER, metavar="X")

    def __post_init__(self) -> None:
        check_fields(self)


def param_specs(config: Config, prefix: str = "") -> list[ParamSpec]:
    return [ParamSpec(f"{prefix}table", (config.vocab_size, config.vocab_size), config.table_std, decay=True),
            ParamSpec(f"{prefix}prior", (config.vocab_size,), 0.5, trainable=False)]


class Passes:
    """logits[t] = table[ids[t]] + prior, bound to one set of gradient buffers."""

    def __init__(self, backend, config: Config, views: ParameterViews):
        self.be, self.v = backend, config.vocab_size
        self.table, self.prior = views.value["table"], views.value["prior"]
        self.d_table, self.d_prior = views.gradient["table"], views.gradient["prior"]

    def logits(self, ids, rows: int):
        logits = self.be.embedding_gather(self.table, ids, rows, self.v)  # (rows, vocab)
        self.be.bias_add(logits, self.prior)
        return logits

    def loss(self, windows):
        on_device = self.be.ids(np.asarray(windows))  # (B, T+1)
        rows = on_device[:, :-1].size
        loss, _ = self.be.fused_softmax_ce_grad(self.logits(on_device[:, :-1].reshape(-1), rows),
                                                on_device[:, 1:].reshape(-1))
        return loss

    def loss_and_backward(self, windows):
        on_device = self.be.ids(np.asarray(windows))  # (B, T+1)
        inputs, rows = on_device[:, :-1].reshape(-1), on_device[:, :-1].size
        loss, dlogits = self.be.fused_softmax_ce_grad(self.logits(inputs, rows), on_device[:, 1:].reshape(-1))
        self.be.embedding_scatter_add(dlogits, inputs, self.d_table, rows, self.v)
        self.be.add_(self.d_prior, self.be.sum_rows(dlogits))
        return loss, {"bigram_rows": float(rows)}


class Bigram:
    def __init__(self, config: Config, backend, seed: int):
        self.config, self.be = config, backend
        self.params = Parameters(backend, param_specs(config))
        self.params.initialize(seed)
        self.passes = self.with_gradients(self.params)
        self.n_params = self.params.total

    def with_gradients(self, views):
        return Passes(self.be, self.config, views)

    def loss(self, windows):
        return self.passes.loss(windows)

    def loss_and_backward(self, windows):
        return self.passes.loss_and_backward(windows)

    def logits(self, ids):
        ids = np.asarray(ids)
        return self.passes.logits(self.be.ids(ids.reshape(-1)), ids.size)  # (B*T, vocab)

    def decoder(self):
        return Rerun(self)


def build(config: Config, backend, tokenizer, seed: int) -> Bigram:
    return Bigram(config, backend, seed)


def memory_parts(config: Config, batch: int, backend) -> dict[str, int]:
    logits = batch * config.seq_len * config.vocab_size * np.dtype(backend.dtype).itemsize
    return {"activations": 2 * logits, "workspace": 2 * logits}


def describe(config: Config) -> str:
    return f"bigram: {config.vocab_size} x {config.vocab_size} table, seq_len {config.seq_len}"


# ---- the test ---------------------------------------------------------------------------------------------

TEXT = "the cat sat on the mat. the dog sat on the log. " * 40
TINY = ["--backend", "numpy", "--threads", "1", "--seq-len", "16", "--batch-size", "4", "--lr", "1e-2",
        "--val-tokens", "200", "--eval-every", "10"]


@pytest.fixture
def bigram(monkeypatch):
    monkeypatch.setitem(FAMILIES, "bigram", __name__)


def test_a_family_from_a_test_module_goes_through_every_command(bigram, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "text.txt").write_text(TEXT, encoding="utf-8")
    assert main(["train", "text.txt", "--family", "bigram", "--table-std", "0.1", "--steps", "30", "--model", "bg",
                 "--gen", "0", *TINY]) == 0
    out = capsys.readouterr().out
    vocab = len(set(TEXT))
    assert f"bigram: {vocab} x {vocab} table, seq_len 16" in out
    config = json.loads((tmp_path / "bg" / "config.json").read_text())
    assert config["family"] == "bigram" and config["model"] == {"vocab_size": vocab, "seq_len": 16, "table_std": 0.1}
    records = [json.loads(line) for line in (tmp_path / "bg.metrics.jsonl").read_text().splitlines()]
    assert all(r["bigram_rows"] == 64.0 for r in records)  # the family's own metric, merged by the trainer
    assert records[-1]["loss"] < records[0]["loss"] - 0.2  # it learns (from 2.57 to 2.30 in a seeded run)

    prior = _tensor(tmp_path / "bg", "prior")
    assert main(["train", "--resume", "bg", "--steps", "40", "--quiet", "--gen", "0"]) == 0
    assert json.loads((tmp_path / "bg" / "train_state.json").read_text())["step"] == 40
    np.testing.assert_array_equal(_tensor(tmp_path / "bg", "prior"), prior)  # frozen: never updated
    np.testing.assert_array_equal(prior, _fresh_prior(vocab))  # ... from its initial value

    capsys.readouterr()
    assert main(["sample", "bg", "--prompt", "the ", "--tokens", "30", "--temperature", "0", "--backend",
                 "numpy"]) == 0
    sampled = capsys.readouterr().out
    assert len(sampled.rstrip("\n")) == 30  # the continuation alone: sample prints no prompt

    assert main(["eval", "bg", "text.txt", "--json", "--backend", "numpy", "--max-positions", "300"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["positions"] == 300 and result["characters"] == 300 and 0 < result["nll"] < math.log(vocab)

    (tmp_path / "prompts.tsv").write_text(f"the \t{sampled[:4]}\n", encoding="utf-8")
    assert main(["eval", "bg", "--prompts", "prompts.tsv", "--json", "--backend", "numpy"]) == 0
    answered = json.loads(capsys.readouterr().out)
    # the text has no newline, so the greedy completion runs to the cap, seq_len tokens: what sample made
    assert answered["results"][0]["completion"] == sampled[:16] and answered["correct"] == 0


def test_the_trainer_splits_the_familys_batches_over_threads():
    """The family wires no threads: ThreadSplit (what the trainer runs) cuts the batch and sums the gradients."""
    class ThreeStreams(NumpyBackend):
        streams = 3  # three passes, run one after another

    config = Config(vocab_size=7, seq_len=5, table_std=0.5)
    windows = np.random.default_rng(0).integers(0, 7, size=(5, 6))  # (B, T+1): slices of 2, 2 and 1
    whole, split = Bigram(config, NumpyBackend(np.float64), 1), Bigram(config, ThreeStreams(np.float64), 1)
    want, _ = whole.loss_and_backward(windows)
    got, metrics = ThreadSplit(split).loss_and_backward(windows)
    assert got == pytest.approx(want, rel=1e-12)  # float64, the slices' means weighted by their sequences
    assert metrics == {"bigram_rows": pytest.approx((2 * 10 + 2 * 10 + 1 * 5) / 5)}  # each slice's, weighted
    np.testing.assert_allclose(split.params.grad, whole.params.grad, rtol=0, atol=1e-12)


def test_settings_of_another_family_are_refused(bigram, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "text.txt").write_text(TEXT, encoding="utf-8")
    assert main(["train", "text.txt", "--family", "bigram", "--d-model", "32", "--no-save", *TINY]) == 2
    assert "--d-model 32 does nothing here: the bigram family has no d_model" in capsys.readouterr().err
    assert main(["train", "text.txt", "--table-std", "0.1", "--no-save", *TINY]) == 2
    assert "--table-std 0.1 does nothing here: the gpt family has no table_std" in capsys.readouterr().err


def test_a_family_without_specs_refuses_compare(bigram, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "text.txt").write_text(TEXT, encoding="utf-8")
    assert main(["train", "text.txt", "--family", "bigram", "--compare", "d8n1", "--no-save", *TINY]) == 2
    assert "the bigram family has none" in capsys.readouterr().err


def _tensor(checkpoint, name: str) -> np.ndarray:
    from safetensors.numpy import load_file

    return load_file(str(checkpoint / "model.safetensors"))[name]


def _fresh_prior(vocab: int) -> np.ndarray:
    from microgpt.backends import get_backend

    params = Parameters(get_backend("numpy"), param_specs(Config(vocab, seq_len=16, table_std=0.1)))
    params.initialize(42)  # the run's seed
    return params.to_host()["prior"]
