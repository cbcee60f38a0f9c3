"""Fine-tuning with --init-from: a new run from a checkpoint's weights, with a fresh optimiser, schedule and step,
written to its own checkpoint; characters the old vocabulary lacks get new rows, initialised as a new model's."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

import microgpt
from microgpt.backends import get_backend
from microgpt.cli import main
from microgpt.model.checkpoint import load_checkpoint
from microgpt.model.gpt import GPT
from microgpt.settings.training import TrainConfig
from microgpt.training.optim import learning_rate

OLD = "the cat sat on the mat. " * 40
NEW = "THE DOG SAT ON THE LOG! the dog sat. " * 40
TINY = ["--d-model", "16", "--heads", "2", "--n-layers", "1", "--d-ff", "32", "--seq-len", "16", "--gen", "0",
        "--quiet", "--backend", "numpy"]


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "old.txt").write_text(OLD)
    (tmp_path / "new.txt").write_text(NEW)
    assert main(["train", "old.txt", *TINY, "--steps", "30", "--model", "base"]) == 0
    return tmp_path


def weights(path):
    model, tokenizer, info = load_checkpoint(path, get_backend("numpy"), with_optimizer=True)
    return model, tokenizer.vocab, info


def test_fine_tuning_starts_from_the_weights_at_step_0_and_leaves_the_source(workdir, capsys):
    _base, base_vocab, _ = weights(workdir / "base")
    source_bytes = (workdir / "base" / "model.safetensors").read_bytes()
    capsys.readouterr()
    assert main(["train", "new.txt", "--init-from", "base", "--model", "tuned", "--steps", "5",
                 *[a for a in TINY if a != "--quiet"]]) == 0
    out = capsys.readouterr().out
    added = "".join(sorted(set(NEW) - set(OLD)))
    assert "note: fine-tuning base (step 30)" in out and f"{len(added)} new tokens ({added!r})" in out
    _tuned, vocab, info = weights(workdir / "tuned")
    assert vocab == base_vocab + added  # the old ids keep their characters; the new come after
    state = info["train_state"]
    assert state["step"] == 5 and state["init_from"] == str((workdir / "base").resolve())
    assert (workdir / "base" / "model.safetensors").read_bytes() == source_bytes
    log = [json.loads(line) for line in (workdir / "tuned.metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [1, 2, 3, 4, 5]
    assert [r["lr"] for r in log] == [learning_rate(TrainConfig(steps=5), t) for t in range(1, 6)]  # a new schedule


def test_the_carried_weights_are_the_source_and_new_rows_a_new_models(workdir):
    """Before any step: every old row as trained, every new row as a fresh model of the new size draws it."""
    base, base_vocab, _ = weights(workdir / "base")
    run, _ = microgpt.train("new.txt", init_from="base", steps=1, save=False, backend="numpy", seed=7, lr=1e-12,
                            d_model=16, heads="2", n_layers=1, d_ff=32, seq_len=16, grad_clip="off", warmup=0,
                            lr_schedule="constant", weight_decay=0.0)
    tuned = run.model.params.to_host()
    fresh = GPT(run.model.config, get_backend("numpy"), seed=7).params.to_host()
    old = base.params.to_host()
    v = len(base_vocab)
    tol = {"rtol": 0, "atol": 1e-9}  # one Adam step at lr 1e-12 moves a weight by at most about 1e-12
    np.testing.assert_allclose(tuned["tok_emb"][:v], old["tok_emb"], **tol)
    np.testing.assert_allclose(tuned["tok_emb"][v:], fresh["tok_emb"][v:], **tol)
    head = [name for name in old if name.startswith("head.")]
    for name in head:
        corner = tuple(slice(0, n) for n in old[name].shape)
        np.testing.assert_allclose(tuned[name][corner], old[name], **tol)
        new_part = (slice(None), slice(v, None)) if tuned[name].ndim == 2 else (slice(v, None),)  # the new columns
        assert tuned[name][new_part].size > 0
        np.testing.assert_allclose(tuned[name][new_part], fresh[name][new_part], **tol)
    for name in old:
        if old[name].shape == tuned[name].shape:
            np.testing.assert_allclose(tuned[name], old[name], **tol)


@pytest.mark.parametrize("flags, words", [
    (["--init-from", "checkpoints/new"], "would be replaced by this run's checkpoint (--model checkpoints/new"),
    (["--init-from", "base", "--resume", "base", "--model", "x"], "give one of them"),
    (["--init-from", "base", "--d-model", "32", "--model", "x"], "drop it to fine-tune this checkpoint"),
    (["--init-from", "nothing", "--model", "x"], "nothing"),
    (["--init-from", "base", "--compare", "d8n1", "--gen", "0"], "--compare trains new models and cannot --init-from"),
])
def test_fine_tuning_mistakes_are_one_line(workdir, capsys, flags, words):
    (workdir / "checkpoints").mkdir()
    shutil.copytree(workdir / "base", workdir / "checkpoints" / "new")  # where new.txt's run saves by default
    capsys.readouterr()
    assert main(["train", "new.txt", "--steps", "3", "--quiet", *flags]) == 2
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1, err
    assert not (workdir / "x").exists()


def test_fine_tuning_never_replaces_its_source_even_as_the_best(workdir, capsys):
    """--init-from ck-best --model ck would have replaced ck-best (the source) with this run's -best."""
    assert (workdir / "base-best" / "config.json").is_file()
    source = (workdir / "base-best" / "model.safetensors").read_bytes()
    capsys.readouterr()
    assert main(["train", "new.txt", "--init-from", "base-best", "--model", "base", "--steps", "3", *TINY]) == 2
    assert "would be replaced by this run's checkpoint" in capsys.readouterr().err
    assert (workdir / "base-best" / "model.safetensors").read_bytes() == source
