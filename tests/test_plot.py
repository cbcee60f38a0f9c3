"""Loss plots: reading the metrics log as one history, the moving average, the PNG, and the hint without matplotlib."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from microgpt.plot import PLOT_HINT, moving_average, plot_available, read_metrics, write_loss_plot


def write_metrics(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_a_step_that_goes_back_replaces_the_history_from_there(tmp_path):
    steps = [1, 2, 3, 4, 3, 4, 5]  # a resume from the checkpoint at step 2, after steps 3-4 were lost
    log = write_metrics(tmp_path / "m.jsonl", [{"step": s, "loss": float(i), "time": 0.1} for i, s in enumerate(steps)])
    with open(log, "a") as f:
        f.write('{"step": 6, "lo')  # a line cut short by a kill
    records = read_metrics(log)
    assert [(r["step"], r["loss"]) for r in records] == [(1, 0.0), (2, 1.0), (3, 4.0), (4, 5.0), (5, 6.0)]
    write_metrics(log, [{"step": 1, "loss": 5.0}, {"step": 2, "loss": 4.0}, {"step": 1, "loss": 9.0}])
    assert [r["loss"] for r in read_metrics(log)] == [9.0]  # a new run in the same place starts over


def test_moving_average_starts_at_the_first_step():
    np.testing.assert_allclose(moving_average(np.array([4.0, 2.0, 6.0, 0.0]), 2), [4.0, 3.0, 4.0, 3.0])
    np.testing.assert_allclose(moving_average(np.array([1.0, 2.0]), 1), [1.0, 2.0])


def test_the_plot_is_a_png(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (the optional 'plot' extra)")
    records = [{"step": s, "loss": 4.0 / s, "time": s * 0.1} for s in range(1, 101)]
    for r in records[9::10]:
        r["val_loss"] = r["loss"] + 0.1
    out = write_loss_plot(write_metrics(tmp_path / "m.jsonl", records), tmp_path / "m.loss.png", "a title")
    assert out == tmp_path / "m.loss.png"
    data = out.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 10_000
    assert write_loss_plot(write_metrics(tmp_path / "empty.jsonl", []), tmp_path / "empty.png", "t") is None
    assert not (tmp_path / "empty.png").exists()


def test_without_matplotlib_plotting_is_unavailable_and_the_hint_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` raise ImportError
    assert plot_available() is False
    assert "pip install 'microgpt[plot]'" in PLOT_HINT


def test_several_runs_in_one_png_against_step_or_time(tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (the optional 'plot' extra)")
    from microgpt.cli import main

    with_val = [{"step": s, "loss": 4.0 / s, "time": s * 0.1, **({"val_loss": 4.5 / s} if s % 10 == 0 else {})}
                for s in range(1, 101)]
    write_metrics(tmp_path / "a.metrics.jsonl", with_val)
    write_metrics(tmp_path / "b.metrics.jsonl", [{"step": s, "loss": 3.0 / s, "time": s * 0.2} for s in range(1, 51)])
    (tmp_path / "a").mkdir()  # a checkpoint directory: its log is beside it
    for axis in ("step", "time"):
        out = tmp_path / f"{axis}.png"
        assert main(["plot", str(tmp_path / "a"), str(tmp_path / "b.metrics.jsonl"), "--x", axis, "--out",
                     str(out)]) == 0
        assert out.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert f"plot: {tmp_path / 'time.png'}" in capsys.readouterr().out
    assert main(["plot", str(tmp_path / "missing")]) == 2
    assert "has no metrics log" in capsys.readouterr().err
