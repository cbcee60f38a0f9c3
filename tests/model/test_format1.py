"""Format-1 checkpoints (written before config.json named a family and a tokenizer) keep loading, sampling,
evaluating and resuming: tests/fixtures/format1 was written by that code (make_format1.py), and
format1-expected.json holds what that code read from it on the machine that made it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import microgpt
from microgpt.cli import main
from microgpt.model.checkpoint import FORMAT_VERSION, read_config

FIXTURES = Path(__file__).parents[1] / "fixtures"
EXPECTED = json.loads((FIXTURES / "format1-expected.json").read_text(encoding="utf-8"))
TEXT = (FIXTURES / "format1-corpus.txt").read_text(encoding="utf-8")


def test_it_reads_as_the_gpt_family_with_the_char_tokenizer():
    config = read_config(FIXTURES / "format1")
    assert config["format_version"] == 1 and config["family"] == "gpt"
    assert config["tokenizer"] == {"kind": "char", "vocab": "\n ,.Iabcdefghilmnoprstuwy"}
    assert config["model"] == {"vocab_size": 25, "d_model": 8, "n_layers": 2, "head_dims": [3, 5], "d_ff": 16,
                               "seq_len": 16}


def test_it_samples_and_scores_as_it_did():
    model = microgpt.load(FIXTURES / "format1", backend="numpy", threads=1)
    assert model.sample(60, prompt=EXPECTED["prompt"], temperature=0) == EXPECTED["greedy"]
    # On another CPU the BLAS kernels may round differently in the last bits; test_bit_identity.py asks for the
    # recorded bits on a machine like the recording's.
    assert model.evaluate(TEXT, stride=1).nll == pytest.approx(EXPECTED["nll"], rel=1e-6)  # the exact figure


def test_it_resumes_and_saves_as_format_2(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copytree(FIXTURES / "format1", tmp_path / "old")
    (tmp_path / "text.txt").write_text(TEXT, encoding="utf-8")
    assert main(["train", "text.txt", "--resume", "old", "--steps", "160", "--quiet", "--gen", "0",
                 "--backend", "numpy"]) == 0
    config = read_config(tmp_path / "old")
    assert config["format_version"] == FORMAT_VERSION == 2 and config["family"] == "gpt"
    assert json.loads((tmp_path / "old" / "train_state.json").read_text())["step"] == 160
    assert microgpt.load(tmp_path / "old", backend="numpy").sample(5, temperature=0)
