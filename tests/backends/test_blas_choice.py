"""The float32 BLAS chosen per machine (backends/blas.py): the verdict cached per machine (written, reused, a
damaged or unreadable cache ignored and written again, never a traceback), OpenBLAS unmeasured where MKL is
missing, MICROGPT_BLAS's override and its refusals, the summary line and results.jsonl naming the BLAS and the
precision, the same choice giving the same losses, and a resume keeping the checkpoint's BLAS. Nothing here
depends on which library is faster: the measurement is replaced where a test needs a verdict."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import microgpt
from microgpt.backends import BackendUnavailable, blas, get_backend, mkl_bf16
from microgpt.cli import main

NO_MKL = None if mkl_bf16.mkl_library_path() is not None else 'MKL is not installed (pip install -e ".[mkl]")'
needs_mkl = pytest.mark.skipif(NO_MKL is not None, reason=NO_MKL or "")
TEXT = "".join(f"{i} + {i % 7} = {i + i % 7}\nthe quick brown fox jumps over the lazy dog {i}\n" for i in range(100))
TINY = {"d_model": 32, "heads": "8,8,8,8", "n_layers": 2, "d_ff": 64, "seq_len": 32, "batch_size": 8,
        "backend": "cpu", "threads": 1, "gen": 0, "val_tokens": 0, "lr_schedule": "constant", "warmup": 0}


@pytest.fixture
def auto(monkeypatch, tmp_path):
    """MICROGPT_BLAS unset, the cache under tmp_path, MKL as if installed; returns the cache's path."""
    monkeypatch.delenv(blas.ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(mkl_bf16, "mkl_library_path", lambda: Path("libmkl_rt.so"))
    return tmp_path / "cache" / "microgpt" / "blas.json"


class Measure:
    """A measurement that says `verdict` and counts its calls."""

    def __init__(self, verdict: str):
        self.verdict, self.calls = verdict, 0

    def __call__(self) -> dict:
        self.calls += 1
        return {"blas": self.verdict}


def test_the_verdict_is_measured_once_then_read_from_the_cache(auto):
    measure = Measure("mkl")
    assert blas.choose(measure) == "mkl" and measure.calls == 1
    assert json.loads(auto.read_text())[blas.machine_key()] == {"blas": "mkl"}
    assert blas.choose(Measure("openblas")) == "mkl"  # read back, not measured again
    assert [p.name for p in auto.parent.iterdir()] == ["blas.json"]  # no temporary file left behind


def test_another_machines_verdict_is_kept_beside_this_ones(auto):
    auto.parent.mkdir(parents=True)
    auto.write_text(json.dumps({"another machine": {"blas": "openblas"}}))
    assert blas.choose(Measure("mkl")) == "mkl"
    assert json.loads(auto.read_text()) == {"another machine": {"blas": "openblas"},
                                            blas.machine_key(): {"blas": "mkl"}}


@pytest.mark.parametrize("damage", [b"{not json", b"\xff\xfe\x00", b"[1, 2]", b'{"KEY": {"blas": "atlas"}}',
                                    b'{"KEY": "mkl"}', b""])
def test_a_damaged_cache_is_ignored_and_written_again(auto, damage):
    auto.parent.mkdir(parents=True)
    auto.write_bytes(damage.replace(b"KEY", blas.machine_key().encode()))
    measure = Measure("openblas")
    assert blas.choose(measure) == "openblas" and measure.calls == 1
    assert json.loads(auto.read_text())[blas.machine_key()] == {"blas": "openblas"}


def test_an_unreadable_and_unwritable_cache_costs_a_measurement_each_start(auto):
    auto.mkdir(parents=True)  # a directory where the file goes: neither read nor replaced
    measure = Measure("mkl")
    assert blas.choose(measure) == "mkl" and blas.choose(measure) == "mkl" and measure.calls == 2
    assert auto.is_dir() and list(auto.parent.iterdir()) == [auto]  # no temporary file left behind


def test_without_mkl_openblas_is_taken_unmeasured(auto, monkeypatch):
    monkeypatch.setattr(mkl_bf16, "mkl_library_path", lambda: None)
    measure = Measure("mkl")
    assert blas.choose(measure) == "openblas" and measure.calls == 0 and not auto.exists()


@pytest.mark.parametrize("value", ["openblas", "mkl", "MKL"])
def test_microgpt_blas_overrides_the_measurement(auto, monkeypatch, value):
    monkeypatch.setenv(blas.ENV, value)
    measure = Measure("none")
    assert blas.choose(measure) == value.lower() and measure.calls == 0 and not auto.exists()


def test_microgpt_blas_refuses_what_it_cannot_do_in_one_line(auto, monkeypatch):
    monkeypatch.setenv(blas.ENV, "atlas")
    with pytest.raises(BackendUnavailable, match=r"^MICROGPT_BLAS='atlas' is not a BLAS microgpt knows; set it to "
                                                 r"openblas, mkl or auto"):
        blas.choose(Measure("mkl"))
    monkeypatch.setenv(blas.ENV, "mkl")
    monkeypatch.setattr(mkl_bf16, "mkl_library_path", lambda: None)
    with pytest.raises(BackendUnavailable, match=r"^MKL was asked for .* is not installed; .*pip install .*\[mkl\]"):
        blas.choose(Measure("mkl"))


def test_the_suite_multiplies_with_openblas():
    assert get_backend("cpu").blas == "openblas" and get_backend("numpy").blas is None


@pytest.fixture
def text_file(tmp_path):
    path = tmp_path / "text.txt"
    path.write_text(TEXT, encoding="utf-8")
    return path


def test_the_summary_line_and_results_name_the_blas_and_precision(text_file, tmp_path, capsys):
    assert main(["train", str(text_file), "--steps", "2", "--model", str(tmp_path / "ck"), "--quiet",
                 *(f"--{key.replace('_', '-')}={value}" for key, value in TINY.items())]) == 0
    finished = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("finished step 2"))
    assert finished.endswith("; products OpenBLAS fp32")
    record = json.loads((tmp_path / "results.jsonl").read_text().splitlines()[-1])
    assert (record["blas"], record["precision"]) == ("openblas", "fp32")
    assert json.loads((tmp_path / "ck" / "train_state.json").read_text())["blas"] == "openblas"


@needs_mkl
def test_the_same_blas_gives_the_same_losses_and_a_resume_keeps_it(text_file, tmp_path, monkeypatch):
    monkeypatch.setenv(blas.ENV, "mkl")
    run, first = microgpt.train(str(text_file), steps=8, model=str(tmp_path / "mkl"), **TINY)
    assert run.model.be.blas == "mkl" and first.blas == "mkl"
    _, again = microgpt.train(str(text_file), steps=8, save=False, **TINY)
    assert np.array_equal(first.losses, again.losses)
    monkeypatch.setenv(blas.ENV, "openblas")
    _, other = microgpt.train(str(text_file), steps=8, save=False, **TINY)
    assert not np.array_equal(first.losses, other.losses)  # the choice is part of what makes the losses
    monkeypatch.setenv(blas.ENV, "mkl")
    microgpt.train(str(text_file), steps=4, model=str(tmp_path / "half"), **TINY)
    monkeypatch.delenv(blas.ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    blas.write_cache(blas.cache_path(), {blas.machine_key(): {"blas": "openblas"}})  # what a start would choose
    run, rest = microgpt.train(str(text_file), steps=8, resume=str(tmp_path / "half"), **TINY)
    assert run.model.be.blas == "mkl"  # the checkpoint's, not a measurement's
    assert np.array_equal(rest.losses, first.losses[4:])


def test_a_resume_names_a_blas_it_cannot_keep(text_file, tmp_path, monkeypatch):
    microgpt.train(str(text_file), steps=2, model=str(tmp_path / "ck"), **TINY)
    state_file = tmp_path / "ck" / "train_state.json"
    state_file.write_text(json.dumps({**json.loads(state_file.read_text()), "blas": "mkl"}))
    monkeypatch.setattr(mkl_bf16, "mkl_library_path", lambda: None)
    monkeypatch.delenv(blas.ENV)
    run, _ = microgpt.train(str(text_file), steps=3, resume=str(tmp_path / "ck"), **TINY)
    assert run.model.be.blas == "openblas"
    assert any(note.startswith("the checkpoint trained with MKL, which is not installed here, so OpenBLAS "
                               "multiplies: from here its losses differ") for note in run.notes)


@needs_mkl
def test_mkl_runs_in_the_calling_thread():
    """Each of the backend's streams calls MKL in its own thread: MKL's own threads would oversubscribe the cores
    (MKL keeps them where its threading layer is set after another call)."""
    out = np.empty((4, 4), dtype=np.float32)
    mkl_bf16.sgemm(np.ones((4, 4), dtype=np.float32), np.ones((4, 4), dtype=np.float32), out)
    assert mkl_bf16._library().MKL_Get_Max_Threads() == 1 and np.array_equal(out, np.full((4, 4), 4.0))
