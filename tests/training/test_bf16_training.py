"""--precision bf16 learns as fp32 does: a tiny model trained on the numpy backend (the specification) at both
precisions; the same seed gives the same bf16 losses twice; the checkpoint records the precision and a resume
keeps it; sample and eval take it; the cpu backend without the processor feature or MKL refuses it in one line,
writing nothing; every family and the graph compute at bf16."""

from __future__ import annotations

import json

import numpy as np
import pytest

import microgpt
from family_shapes import VARIANTS, VOCAB
from microgpt.backends import BackendUnavailable, get_backend, mkl_bf16
from microgpt.cli import main
from microgpt.data.tokenizer import CharTokenizer
from microgpt.model.family import family

TEXT = "".join(f"{i} + {i % 7} = {i + i % 7}\nthe quick brown fox jumps over the lazy dog {i}\n" for i in range(200))
TINY = {"d_model": 32, "heads": "8,8,8,8", "n_layers": 2, "d_ff": 64, "seq_len": 32, "batch_size": 8,
        "backend": "numpy", "threads": 1, "gen": 0, "lr": 3e-3, "val_tokens": 0}
STEPS = 60
# bf16 keeps 8 significant bits of each product input (a relative error up to 2^-9 each, averaging out over the
# sums): the losses of a tiny model follow fp32's within 0.002 nats here, held to 0.02; a window of 10 steps smooths
# the batches' noise, which both runs share (same seed, same batches)
TRACKS_WITHIN = 0.02


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("bf16") / "text.txt"
    path.write_text(TEXT, encoding="utf-8")
    return path


def losses(text_file, **settings) -> np.ndarray:
    _, summary = microgpt.train(str(text_file), steps=STEPS, save=False, **{**TINY, **settings})
    return np.array(summary.losses)


def windows(curve: np.ndarray) -> np.ndarray:
    return curve.reshape(-1, 10).mean(axis=1)


@pytest.fixture(scope="module")
def curves(text_file):
    return losses(text_file, precision="fp32"), losses(text_file, precision="bf16")


def test_bf16_tracks_fp32_and_learns(curves):
    fp32, bf16 = curves
    assert len(fp32) == len(bf16) == STEPS
    assert not np.array_equal(fp32, bf16)  # the products really were rounded
    assert np.abs(windows(bf16) - windows(fp32)).max() < TRACKS_WITHIN
    assert windows(bf16)[-1] < windows(bf16)[0] - 1.0  # it learns: over a nat lower by the end


def test_same_seed_same_bf16_losses(text_file, curves):
    assert np.array_equal(losses(text_file, precision="bf16"), curves[1])


def test_the_checkpoint_records_bf16_and_a_resume_keeps_it(text_file, tmp_path, capsys):
    microgpt.train(str(text_file), steps=4, model=str(tmp_path / "ck"), **{**TINY, "precision": "bf16"})
    state = json.loads((tmp_path / "ck" / "train_state.json").read_text())
    assert state["train_config"]["precision"] == "bf16"
    run, _ = microgpt.train(str(text_file), resume=str(tmp_path / "ck"), steps=6, backend="numpy", threads=1, gen=0)
    assert run.model.be.precision == "bf16"
    capsys.readouterr()
    assert main(["train", str(text_file), "--resume", str(tmp_path / "ck"), "--steps", "7", "--precision", "fp32",
                 "--backend", "numpy", "--gen", "0", "--quiet"]) == 0
    assert "--precision fp32 overrides the checkpoint's bf16" in capsys.readouterr().out
    loaded = microgpt.load(tmp_path / "ck", backend="numpy", precision="bf16")
    assert loaded.model.be.precision == "bf16" and len(loaded.sample(5, seed=1)) == 5
    assert microgpt.load(tmp_path / "ck", backend="numpy").model.be.precision == "fp32"
    for command in (["sample", str(tmp_path / "ck"), "--tokens", "5"], ["eval", str(tmp_path / "ck"), str(text_file),
                                                                      "--max-positions", "40"]):
        assert main([*command, "--backend", "numpy", "--precision", "bf16"]) == 0


def test_cpu_without_the_feature_or_mkl_refuses_in_one_line(text_file, tmp_path, monkeypatch, capsys):
    for reason in (mkl_bf16.unavailable(flags={"avx2"}), mkl_bf16.unavailable(flags={"avx512_bf16"}, library=None)):
        monkeypatch.setattr(mkl_bf16, "unavailable", lambda reason=reason: reason)
        with pytest.raises(BackendUnavailable, match="--precision bf16 on the cpu backend"):
            microgpt.train(str(text_file), steps=2, model=str(tmp_path / "no"), **{**TINY, "backend": "cpu",
                                                                                  "precision": "bf16"})
        assert not (tmp_path / "no").exists()
        assert main(["train", str(text_file), "--steps", "2", "--backend", "cpu", "--precision", "bf16",
                     "--model", str(tmp_path / "no")]) != 0
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and reason in err and not (tmp_path / "no").exists()


@pytest.mark.parametrize(("name", "shape"), VARIANTS)
def test_every_family_and_the_graph_compute_at_bf16(name, shape):
    """The same weights at both precisions: the logits differ as rounding the products' inputs does, no more."""
    kind = family(name)
    config = kind.Config(vocab_size=VOCAB, **shape)
    ids = np.random.default_rng(0).integers(0, VOCAB, size=(3, config.seq_len))  # (B, T)
    logits = {}
    for precision in ("fp32", "bf16"):
        be = get_backend("numpy")
        be.use_precision(precision)
        model = kind.build(config, be, CharTokenizer("abcdefghijk"), 3)
        logits[precision] = be.to_host(model.logits(ids))
    assert not np.array_equal(logits["bf16"], logits["fp32"])
    assert np.abs(logits["bf16"] - logits["fp32"]).max() < 0.05 * max(1.0, np.abs(logits["fp32"]).max())
