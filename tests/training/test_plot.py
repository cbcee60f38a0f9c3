"""Loss plots: reading the metrics log as one history, the moving average, the loss axis, the legends, PNG, SVG
and PDF, `--follow`, and the hint without matplotlib."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from extras import need
from microgpt.cli import main
from microgpt.training.plot import (
    PLOT_HINT,
    loss_limits,
    moving_average,
    part_figures,
    plot_available,
    read_metrics,
    short_labels,
    write_loss_plot,
)
from waiting import wait_for


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
    need("matplotlib")
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
    assert 'pip install -e ".[plot]"' in PLOT_HINT and "microgpt[" not in PLOT_HINT


def test_several_runs_in_one_png_against_step_or_time(tmp_path, capsys):
    need("matplotlib")
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


def test_the_loss_axis_leaves_out_the_first_steps_but_shows_every_low():
    curve = np.array([5.3, 3.0, 2.5, 2.2, 2.1, 2.0, 1.9, 1.8, 1.75, 1.7] * 1)
    low, high = loss_limits([curve, np.array([1.6, 1.9])])
    assert low < 1.6 and 3.0 < high < 5.3  # the first point (5.3) is left out of the top, the lowest is shown
    flat_low, flat_high = loss_limits([np.array([2.0, 2.0])])
    assert flat_low < 2.0 < flat_high


@pytest.mark.parametrize("paths, labels", [
    (["runs/a", "runs/b.metrics.jsonl"], ["a", "b"]),
    (["x/small", "y/small", "y/large/"], ["x/small", "y/small", "y/large"]),
    (["/abs/path/to/ck"], ["ck"]),
])
def test_legends_name_runs_by_the_shortest_telling_part_of_their_path(paths, labels):
    assert short_labels([Path(p) for p in paths]) == labels


@pytest.mark.parametrize("suffix, magic", [(".svg", b"<?xml"), (".pdf", b"%PDF"), (".png", b"\x89PNG")])
def test_plot_writes_svg_pdf_and_png(tmp_path, suffix, magic):
    need("matplotlib")
    from microgpt.cli import main

    write_metrics(tmp_path / "a.metrics.jsonl", [{"step": s, "loss": 4.0 / s, "time": s} for s in range(1, 30)])
    out = tmp_path / f"runs{suffix}"
    assert main(["plot", str(tmp_path / "a"), "--out", str(out)]) == 0
    assert out.read_bytes().startswith(magic)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary file left


def test_plot_refuses_another_format_in_one_line(tmp_path, capsys):
    need("matplotlib")
    from microgpt.cli import main

    write_metrics(tmp_path / "a.metrics.jsonl", [{"step": 1, "loss": 4.0}])
    assert main(["plot", str(tmp_path / "a"), "--out", str(tmp_path / "x.jpg")]) == 2
    assert "ending in .png, .svg, .pdf" in capsys.readouterr().err


def test_follow_redraws_as_the_log_grows_and_stops_on_ctrl_c(tmp_path):
    need("matplotlib")
    log = write_metrics(tmp_path / "a.metrics.jsonl", [{"step": s, "loss": 4.0 / s} for s in range(1, 5)])
    out = tmp_path / "live.png"
    proc = subprocess.Popen([sys.executable, "-m", "microgpt", "plot", str(tmp_path / "a"), "--follow", "--interval",
                             "0.1", "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = wait_for(lambda: out.exists() and out.stat().st_mtime_ns, "the plot drawn")
        with log.open("a") as f:
            f.write(json.dumps({"step": 5, "loss": 0.5}) + "\n")
        wait_for(lambda: out.stat().st_mtime_ns != first, "the plot drawn again")
    finally:
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0 and "Traceback" not in stderr, stderr
    assert "redrawn as the log grows" in stdout


def test_a_familys_per_part_figures_get_panels_of_their_own(tmp_path, capsys):
    records = [{"step": s, "loss": 4.0 / s, "expert0_write_norm": 1.0 + s, "expert1_write_norm": 2.0,
                "expert0_router_weight": 0.5, "expert1_router_weight": 0.5, "prior_final_cos": 0.1}
               for s in range(1, 51)]
    figures = part_figures(records)
    assert set(figures) == {"write_norm", "router_weight"} and set(figures["write_norm"]) == {"expert 0", "expert 1"}
    assert figures["write_norm"]["expert 0"][:2] == [2.0, 3.0]
    need("matplotlib")
    log = write_metrics(tmp_path / "e.metrics.jsonl", records)
    plain = write_loss_plot(write_metrics(tmp_path / "g.jsonl", [{"step": s, "loss": 4.0 / s} for s in range(1, 51)]),
                            tmp_path / "g.png", "t")
    assert main(["plot", str(log), "--detail", "--out", str(tmp_path / "e.png")]) == 0
    from matplotlib import image

    assert image.imread(tmp_path / "e.png").shape[0] > image.imread(plain).shape[0]  # the panels under the loss
    assert main(["plot", str(log), str(log), "--detail"]) == 2
    assert "--detail draws one run, and 2 were given" in capsys.readouterr().err


def test_the_summary_tables_the_parts_figures():
    from microgpt.cli.train_report import metrics_table

    lines = metrics_table({"expert0_write_norm": 1.5, "expert0_router_weight": 0.25, "expert1_write_norm": 2.5,
                           "expert1_router_weight": 0.75, "prior_final_cos": 0.125})
    assert lines[0].split() == ["write", "norm", "router", "weight"]
    assert lines[1].split() == ["expert", "0", "1.5", "0.25"] and lines[2].split() == ["expert", "1", "2.5", "0.75"]
    assert lines[3] == "prior final cos: 0.125" and metrics_table({}) == []


def test_runs_of_different_tokenizers_are_drawn_in_bits_per_character(tmp_path, monkeypatch):
    """`plot` drew nats per token for a char and a bpe run on one axis (issue 53 item 2): each run's curve is in
    bits per character of its held-out text (runs' figure), and without that record the axis says the
    tokenizers differ."""
    need("matplotlib")
    from microgpt.training import plot
    from microgpt.training.run_list import bits_per_char, validation_of

    (tmp_path / "text.txt").write_text("It was the best of times, it was the worst of times.\n" * 30)
    tiny = ["--d-model", "12", "--heads", "3", "--n-layers", "1", "--d-ff", "24", "--seq-len", "16", "--quiet",
            "--backend", "numpy", "--threads", "1", "--gen", "0", "--steps", "4", "--eval-every", "2"]
    for kind in ("char", "bpe"):
        assert main(["train", str(tmp_path / "text.txt"), *tiny, "--tokenizer", kind, "--model",
                     str(tmp_path / kind)]) == 0
    drawn = []
    monkeypatch.setattr(plot, "_save", lambda fig, out: drawn.append(
        (fig.axes[0].get_ylabel(), {line.get_label(): list(line.get_ydata()) for line in fig.axes[0].lines})))
    runs = [str(tmp_path / kind) for kind in ("char", "bpe")]
    assert main(["plot", *runs, "--out", str(tmp_path / "p.png")]) == 0
    label, curves = drawn[-1]
    assert label == "validation loss (bits per character)"
    for kind in ("char", "bpe"):
        val = [r["val_loss"] for r in read_metrics(tmp_path / f"{kind}.metrics.jsonl") if "val_loss" in r]
        text = validation_of(tmp_path / kind)
        assert curves[f"{kind} (validation)"] == [bits_per_char(loss, text) for loss in val]
    state_file = tmp_path / "bpe" / "train_state.json"
    state = json.loads(state_file.read_text())
    del state["validation_text"]  # a bpe run trained before runs recorded its characters
    state_file.write_text(json.dumps(state))
    assert main(["plot", *runs, "--out", str(tmp_path / "p.png")]) == 0
    assert drawn[-1][0] == "validation loss (nats per token: the tokenizers differ, so not comparable)"
