"""Routing you can see (issue 32): an ensemble's router weights per position sum to one and are the model's own
mixture, with the context it samples and scores with; `eval --routing` writes them, `plot --routing` draws
them, and a model without a router is one line that says what it has instead."""

from __future__ import annotations

import csv
import io

import numpy as np
import pytest

from extras import need
from microgpt.backends import get_backend
from microgpt.cli import main
from microgpt.core.errors import ConfigError
from microgpt.data.tokenizer import CharTokenizer
from microgpt.model.family import family
from microgpt.use.loaded import LoadedModel, load
from microgpt.use.routing import routing_of

TOKENIZER = CharTokenizer("0123456789+= \nab")
TEXT = "".join(f"{x} + {y} = {x + y}\n" for x in range(0, 40, 3) for y in range(0, 40, 7))
FLAGS = ["--seq-len", "16", "--batch-size", "4", "--backend", "numpy", "--threads", "1",
         "--val-tokens", "0", "--gen", "0", "--quiet"]


def tiny(prior: str, router: str):
    kind = family("ensemble")
    config = kind.Config(vocab_size=TOKENIZER.size, cooperative="d4n1,d2+2n1,d4n1", stream_dim=5, seq_len=8,
                         prior=prior, router=router)
    model = kind.build(config, get_backend("numpy", dtype=np.float64), TOKENIZER, 3)
    rng = np.random.default_rng(0)
    if prior in ("bigram", "trigram"):
        model.learn_from(rng.integers(0, TOKENIZER.size, 300))
    model.params.from_host({name: value + rng.normal(0, 0.3, value.shape) * spec.trainable  # off the zero init
                            for (name, value), spec in zip(model.params.to_host().items(),
                                                           model.params.specs.values())})
    return model


def mixture(model, window: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the model's logits (T, V), its experts' logits (n, T, V)) for one window (T,), from its own forward."""
    mixed, saved = model.passes.forward(window[None, :])
    return np.asarray(mixed), np.stack([np.asarray(logits) for logits in saved[2]])


@pytest.mark.parametrize("prior", ["none", "bigram", "calculator"])
@pytest.mark.parametrize("router", ["global", "context", "gated"])
@pytest.mark.parametrize("stride", [1, 3])
def test_the_routing_sums_to_one_and_is_the_models_own_mixture(prior, router, stride):
    """Every position of a text twice seq_len long: its weights mix the experts' logits into the model's logits in
    the window that position is scored in (its first seq_len positions: the text's first window; after them the
    window ending at it, or with a stride the window ending up to stride - 1 positions later). In float64 the
    sums are 1 and the mixtures the logits up to rounding (1e-15 measured, 1e-12 allowed)."""
    model = tiny(prior, router)
    ids = np.array(TOKENIZER.encode(TEXT[:19]))  # (19,): seq_len 8, so 11 positions past the first window
    routing = routing_of(model, TOKENIZER, ids, batch_size=4, stride=stride)
    assert routing.weights.shape == (19, 3) and routing.experts == ["expert 1", "expert 2", "expert 3"]
    np.testing.assert_allclose(routing.weights.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    assert np.all(routing.weights >= 0.2 / 3 - 1e-12)  # the router's floor: epsilon / n
    assert "".join(routing.tokens) == TEXT[:19]
    for p in range(19):
        end = max(p, 7) if p < 8 else min(8 + ((p - 8) // stride + 1) * stride, 19) - 1  # the window's last
        window, row = ids[end - 7 : end + 1], p - (end - 7)
        logits, experts = mixture(model, window)
        np.testing.assert_allclose(np.einsum("k,kv->v", routing.weights[p], experts[:, row]), logits[row],
                                   rtol=0, atol=1e-12)
    if prior == "none":
        assert not routing.prior.any()
    else:
        assert np.all((routing.prior > 0) & (routing.prior < 1))


def trained(workdir, name: str, flags: list[str]) -> LoadedModel:
    (workdir / "sums.txt").write_text(TEXT, encoding="utf-8")
    assert main(["train", "sums.txt", *FLAGS, "--steps", "3", "--model", name, *flags]) == 0
    return load(workdir / name, backend="numpy")


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_eval_writes_the_routing_as_csv_and_plot_draws_it(workdir, capsys):
    loaded = trained(workdir, "ens", ["--cooperative", "d8n1,d4n1", "--stream-dim", "8", "--prior", "bigram"])
    assert main(["eval", "ens", "sums.txt", "--routing", "r.csv", "--max-positions", "40", "--json",
                 "--backend", "numpy"]) == 0
    assert '"routing": "r.csv"' in capsys.readouterr().out
    rows = list(csv.DictReader(io.StringIO((workdir / "r.csv").read_text(encoding="utf-8"))))
    assert list(rows[0]) == ["position", "token", "expert0_prior_share", "expert1", "expert2", "dominant"]
    assert len(rows) == 16 + 40 and [r["token"] for r in rows[:3]] == list(TEXT[:3])
    expected = loaded.routing(TEXT[:56])
    for row, weights in zip(rows, expected.weights):
        assert [float(row["expert1"]), float(row["expert2"])] == pytest.approx(weights, abs=1e-5)  # 6 digits kept
        assert int(row["dominant"]) == int(np.argmax(weights)) + 1
    need("matplotlib")
    assert main(["plot", "ens", "--routing", "12 + 3 = 15\n4 + 4 =", "--out", "r.png"]) == 0
    assert (workdir / "r.png").stat().st_size > 1000


def test_routing_a_model_without_a_router_is_one_line(workdir, capsys):
    loaded = trained(workdir, "gpt", ["--d-model", "8", "--n-layers", "1", "--heads", "1"])
    with pytest.raises(ConfigError, match="is a gpt model: one head predicts each position and no router"):
        loaded.routing("12 + 3")
    capsys.readouterr()
    assert main(["eval", "gpt", "sums.txt", "--routing", "r.csv", "--backend", "numpy"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "logits(text)" in err and "--cooperative" in err
    assert not (workdir / "r.csv").exists()
    assert main(["plot", "gpt", "--routing", "12 + 3"]) == 2
    assert "no router mixes experts" in capsys.readouterr().err
    assert main(["eval", "gpt", "--prompts", "sums.txt", "--routing", "r.csv"]) == 2
    assert "--routing is for scoring a FILE" in capsys.readouterr().err
