"""The Python API: `microgpt.load(DIR)` samples, scores and gives logits exactly as the CLI does, and
`microgpt.train(..., progress=True)` shows progress."""

from __future__ import annotations

import json

import numpy as np
import pytest

import microgpt
from microgpt.cli import main
from microgpt.core.errors import ConfigError
from tiny_corpus import TEXT

TINY = {"d_model": 12, "heads": "3", "n_layers": 1, "d_ff": 24, "seq_len": 16, "backend": "numpy"}


def test_load_samples_what_the_cli_prints(checkpoint, capsys):
    model = microgpt.load(checkpoint / "ck", backend="numpy")
    text = model.sample(40, prompt="It was", temperature=0.8, seed=3)
    assert len(text) == 40 and set(text) <= set(TEXT)
    assert main(["sample", str(checkpoint / "ck"), "--prompt", "It was", "--tokens", "40", "--seed", "3",
                 "--backend", "numpy"]) == 0
    assert capsys.readouterr().out == text + "\n"  # what follows the prompt, in both


def test_load_evaluates_what_the_cli_reports(checkpoint, capsys):
    model = microgpt.load(checkpoint / "ck", backend="numpy")
    held_out = TEXT[:300]
    (checkpoint / "held.txt").write_text(held_out)
    result = model.evaluate(held_out, stride=4)
    assert main(["eval", str(checkpoint / "ck"), str(checkpoint / "held.txt"), "--stride", "4", "--json",
                 "--backend", "numpy"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["nll"] == result.nll and report["positions"] == result.positions == 300 - 16


def test_logits_are_the_models_next_character_scores(checkpoint):
    model = microgpt.load(checkpoint / "ck", backend="numpy")
    row = model.logits("It was")
    assert row.shape == (6, model.tokenizer.size)
    batch = model.logits(np.stack([model.tokenizer.encode("It was"), model.tokenizer.encode("it was")]))
    assert batch.shape == (2, 6, model.tokenizer.size)
    # the same forward pass, one row of the batch; float32, and BLAS may block a 12-row product unlike a 6-row
    # one (OpenBLAS on AMD EPYC does, by ~1e-6), so only the last bits may differ
    np.testing.assert_allclose(batch[0], row, rtol=1e-5, atol=1e-6)
    greedy = model.sample(1, prompt="It was", temperature=0)
    assert greedy == model.tokenizer.vocab[int(np.argmax(row[-1]))]
    with pytest.raises(ValueError, match="seq_len 16"):
        model.logits("t" * 17)


def test_load_refuses_bad_settings_and_checkpoints_in_one_line(checkpoint):
    with pytest.raises(ConfigError, match="^backend must be one of .*, not 'tpu'") as refused:
        microgpt.load(checkpoint / "ck", backend="tpu")
    assert "--backend" not in str(refused.value)
    with pytest.raises(ValueError, match="not a microgpt checkpoint|no such|missing"):
        microgpt.load(checkpoint / "nothing")
    with pytest.raises(ValueError, match="raise max_memory") as refused:  # in Python's words, as train's
        microgpt.load(checkpoint / "ck", max_memory="1KiB")
    assert "--max-memory" not in str(refused.value)
    assert microgpt.load.__doc__.startswith("The checkpoint at `directory`")  # help(microgpt.load) still reads


def test_train_with_progress_prints_progress_to_stderr(tmp_path, capsys):
    (tmp_path / "text.txt").write_text(TEXT)
    microgpt.train(str(tmp_path / "text.txt"), steps=4, save=False, progress=True, **TINY)
    err = capsys.readouterr().err
    assert "step 1/4" in err and "step 4/4" in err
    microgpt.train(str(tmp_path / "text.txt"), steps=4, save=False, **TINY)
    assert capsys.readouterr().err == ""
