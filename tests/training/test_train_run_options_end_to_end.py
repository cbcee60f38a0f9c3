"""`microgpt train` with --config/--run, --compare, --max-memory, the results log and the loss plot, end to end."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from extras import need
from microgpt.cli import main
from microgpt.core.threads import available_cores

TINY = ["--d-model", "8", "--heads", "2", "--n-layers", "1", "--d-ff", "16", "--seq-len", "16", "--steps", "5",
        "--gen", "0", "--quiet"]
RUNS = """\
defaults: {steps: 5, seq_len: 16, lr: 0.01, batch_size: 2, gen: 0}
runs:
  small: {d_model: 8, heads: 2, n_layers: 1, d_ff: 16}
  odd: {heads: [1, 2, 5], n_layers: 1, d_ff: 16}
"""


@pytest.fixture
def workdir(workdir):
    """tests/conftest.py's, with runs.yaml."""
    (workdir / "runs.yaml").write_text(RUNS)
    return workdir


def results(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_a_named_run_trains_with_its_settings_and_logs_a_result(workdir):
    assert main(["train", "text.txt", "--config", "runs.yaml", "--run", "odd", "--quiet", "--backend", "numpy"]) == 0
    config = json.loads((workdir / "checkpoints" / "odd" / "config.json").read_text())
    assert (config["model"]["head_dims"], config["model"]["d_model"], config["model"]["seq_len"]) == ([1, 2, 5], 8, 16)
    [result] = results(workdir / "checkpoints" / "results.jsonl")
    assert result["run"] == "odd" and result["family"] == "gpt" and result["model"].startswith("gpt d1+2+5n1ff16:")
    assert (result["steps"], result["batch_size"], result["lr"], result["backend"]) == (5, 2, 0.01, "numpy")
    assert result["checkpoint"] == str(Path("checkpoints") / "odd")
    for key in ("time", "tokenizer", "parameters", "final_loss", "val_loss", "best_val_loss", "seconds",
                "tokens_per_sec", "machine"):
        assert key in result
    assert set(result["config"]) == {"vocab_size", "d_model", "n_layers", "head_dims", "d_ff", "seq_len"}


def test_precedence_defaults_then_file_then_checkpoint_then_flags(workdir):
    assert main(["train", "text.txt", "--config", "runs.yaml", "--run", "small", "--batch-size", "3", "--quiet"]) == 0
    # Resuming: the checkpoint's batch size (3) beats the file's (2); the flag --steps beats both.
    assert main(["train", "text.txt", "--config", "runs.yaml", "--run", "small", "--resume", "checkpoints/small",
                 "--steps", "7", "--quiet"]) == 0
    first, resumed = results(workdir / "checkpoints" / "results.jsonl")
    assert (first["batch_size"], first["lr"], first["steps"], first["config"]["seq_len"]) == (3, 0.01, 5, 16)
    assert (resumed["batch_size"], resumed["lr"], resumed["steps"], resumed["steps_run"]) == (3, 0.01, 7, 2)


def test_flags_override_the_shape_of_a_named_run(workdir, capsys):
    assert main(["train", "text.txt", "--config", "runs.yaml", "--run", "small", "--heads", "4", "--no-save"]) == 0
    assert "heads [2, 2, 2, 2]" in capsys.readouterr().out
    assert main(["train", "text.txt", "--config", "runs.yaml", "--run", "odd", "--d-model", "16", "--no-save"]) == 2
    assert "heads: 1,2,5 (run odd in runs.yaml) makes the width 8, not --d-model 16" in error_line(capsys)


@pytest.mark.parametrize("flags, expected", [
    (["--config", "runs.yaml"], "needs --run ID to pick a run; its runs are: small, odd"),
    (["--config", "runs.yaml", "--run", "big"], "--run big is not in runs.yaml; its runs are: small, odd"),
    (["--run", "small"], "--run small needs --config FILE"),
    (["--compare", "d4n1,d2x4"], "model spec 'd2x4' is not valid"),
    (["--compare", "d8n1", "--n-layers", "2"], "--n-layers 2 sets the model shape, but --compare takes it"),
    (["--compare", "d8n1", "--config", "runs.yaml", "--run", "small"], "d_model: 8 (run small in runs.yaml) sets"),
    (["--compare", "d8n1", "--resume", "ck"], "cannot --resume"),
    (["--preset", "reference", "--seq-len", "1024", "--batch-size", "64", "--max-memory", "64MiB"],
     "needs about 5.6 GiB (weights, gradients and Adam moments 1.6 MiB"),
])
def test_bad_combinations_are_one_clear_line(workdir, capsys, flags, expected):
    assert main(["train", "text.txt", "--quiet", *flags]) == 2
    assert expected in error_line(capsys)
    assert not (workdir / "checkpoints").exists()


def test_compare_trains_each_spec_on_the_same_batches(workdir, capsys):
    shared = ["--seq-len", "16", "--steps", "5", "--batch-size", "2", "--lr", "0.01", "--quiet"]
    assert main(["train", "text.txt", "--compare", "d2x4n1ff16,d8n1", "--val-tokens", "100", *shared]) == 0
    out = capsys.readouterr().out
    table = out[out.index("spec "):].splitlines()
    assert table[0].split() == ["spec", "parameters", "loss", "val", "loss", "time", "tokens/s"]
    assert [row.split()[0] for row in table[1:3]] == ["d2x4n1ff16", "d8n1"]
    base = workdir / "checkpoints" / "text-compare"
    assert (base / "d2x4n1ff16" / "config.json").exists() and (base / "d8n1" / "config.json").exists()
    logged = results(base / "results.jsonl")
    assert [(r["run"], r["config"]["d_ff"]) for r in logged] == [("d2x4n1ff16", 16), ("d8n1", 32)]  # 4 x d_model by default
    # Same data, seed and steps as a plain run of the same shape: the same final loss.
    assert main(["train", "text.txt", "--d-model", "8", "--heads", "2", "--n-layers", "1", "--d-ff", "16",
                 "--val-tokens", "100", "--model", "plain", *shared]) == 0
    assert results(workdir / "results.jsonl")[0]["final_loss"] == logged[0]["final_loss"]


def test_compare_with_a_model_dir_and_no_save(workdir):
    assert main(["train", "text.txt", "--compare", "d8n1", "--model", "runs/cmp", *TINY[8:]]) == 0
    assert (workdir / "runs" / "cmp" / "d8n1" / "config.json").exists()
    assert main(["train", "text.txt", "--compare", "d8n1,d2x4n1", "--no-save", *TINY[8:]]) == 0
    assert sorted(p.name for p in workdir.iterdir()) == ["runs", "runs.yaml", "text.txt"]


def test_compare_and_plain_runs_do_not_overwrite_each_other(workdir, capsys):
    assert main(["train", "text.txt", *TINY, "--model", "ck"]) == 0
    capsys.readouterr()
    assert main(["train", "text.txt", "--compare", "d8n1", "--model", "ck", *TINY[8:]]) == 2
    assert "ck is a checkpoint" in error_line(capsys)
    assert main(["train", "text.txt", "--compare", "d8n1", "--model", "cmp", *TINY[8:]]) == 0
    capsys.readouterr()
    assert main(["train", "text.txt", *TINY, "--model", "cmp"]) == 2
    assert "cmp exists and is not a microgpt checkpoint" in error_line(capsys)


def test_no_save_writes_no_results_and_no_plot(workdir):
    assert main(["train", "text.txt", *TINY, "--no-save"]) == 0
    assert sorted(p.name for p in workdir.iterdir()) == ["runs.yaml", "text.txt"]


def test_a_saved_run_draws_its_loss_plot(workdir, capsys):
    need("matplotlib")
    assert main(["train", "text.txt", *TINY, "--model", "ck"]) == 0
    assert (workdir / "ck.loss.png").read_bytes().startswith(b"\x89PNG")
    assert "loss plot: ck.loss.png" in capsys.readouterr().out


def test_without_matplotlib_one_hint_line_and_no_plot(workdir, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` raise ImportError
    assert main(["train", "text.txt", "--compare", "d8n1,d2x4n1", "--model", "cmp", *TINY[8:]]) == 0
    err = capsys.readouterr().err
    assert err.count('pip install -e ".[plot]"') == 1, err
    assert not list(workdir.glob("**/*.png"))
    assert len(results(workdir / "cmp" / "results.jsonl")) == 2


def test_compare_and_named_runs_draw_their_curves_together(workdir, capsys):
    need("matplotlib")
    assert main(["train", "text.txt", "--compare", "d8n1,d2x4n1", "--model", "cmp", "--val-tokens", "100",
                 *TINY[8:]]) == 0
    assert (workdir / "cmp" / "compare.png").read_bytes().startswith(b"\x89PNG")
    assert f"comparison plot: {Path('cmp') / 'compare.png'}" in capsys.readouterr().out
    for run_id in ("small", "odd"):
        assert main(["train", "text.txt", "--config", "runs.yaml", "--run", run_id, "--quiet"]) == 0
    assert (workdir / "checkpoints" / "runs.png").read_bytes().startswith(b"\x89PNG")
    assert f"runs of runs.yaml: {Path('checkpoints') / 'runs.png'}" in capsys.readouterr().out


@pytest.mark.parametrize("backend", ["cpu", "numpy"])
def test_threads_is_one_knob_the_model_line_reports(workdir, capsys, backend):
    loud = [arg for arg in TINY if arg != "--quiet"]  # the model line is a header, which --quiet leaves out
    assert main(["train", "text.txt", *loud, "--no-save", "--backend", backend, "--threads", "1"]) == 0
    assert f"backend {backend}, 1 thread" in capsys.readouterr().out
    too_many = str(available_cores() + 1)
    assert main(["train", "text.txt", *TINY, "--no-save", "--backend", backend, "--threads", too_many]) == 2
    assert "threads must be a whole number from 1 to" in error_line(capsys)


def test_plot_out_must_be_a_writable_png(workdir, capsys):
    assert main(["train", "text.txt", *TINY, "--model", "ck"]) == 0
    capsys.readouterr()
    assert main(["plot", "ck", "--out", "ck.metrics.jsonl"]) == 2
    assert "ending in .png" in error_line(capsys)
    assert main(["plot", "ck", "--out", str(workdir / "missing" / "x.png")]) == 2
    assert "cannot write" in error_line(capsys)
    assert main(["plot", "ck", "--out", "both.png"]) == 0
    assert (workdir / "both.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
