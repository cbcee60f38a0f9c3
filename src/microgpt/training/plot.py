"""Loss-curve plots from runs' metrics logs (`<checkpoint>.metrics.jsonl`), drawn with matplotlib if installed.

matplotlib is the optional `plot` extra; `plot_available` says whether it
imports. Both plots draw headless (the Agg backend) into a PNG, SVG or PDF (by
the file's suffix), written whole and then renamed into place, so a viewer
never reads half a plot: `write_loss_plot` one run's raw training loss, its
moving average and its validation points, and under them the model's own
per-part figures where its family logs some (an ensemble's experts: one panel
per figure, one line per part); `write_runs_plot` several runs in one
figure, each as its validation curve (its smoothed training loss where it has
none), against step or seconds, in bits per character where every run's
checkpoint says how many characters its validation tokens stand for (so char,
bpe and tokenizer.json runs compare; run_list.bits_per_char), else in nats per
token (and the axis says when their tokenizers differ). The loss axis spans the lowest point to the
highest after each curve's first steps, whose loss (about ln(vocabulary))
would squeeze the range that matters; legends name runs by the shortest part
of their paths that tells them apart. A log an ensemble wrote with the old numbering (transformer experts
from 0, the prior's figure as prior_final_cos) is read in today's, the prior as expert 0 (`renumbered`).
"""

from __future__ import annotations

import json
import os
import re
import textwrap
from pathlib import Path

import numpy as np

from microgpt.core.user_files import bounded_lines, open_regular
from microgpt.core.version import install_hint
from microgpt.training.run_files import MAX_LOG_LINE, open_own
from microgpt.training.run_list import bits_per_char, validation_of

PLOT_HINT = f"note: no loss plot; {install_hint('plot')} for loss plots"
SMOOTH_STEPS = 50  # moving-average window, shortened for short runs
PLOT_FORMATS = (".png", ".svg", ".pdf")
PART_METRIC = re.compile(r"([a-z]+)(\d+)_(.+)")  # "expert2_write_norm": part "expert 2", figure "write_norm"
TITLE_WIDTH = 90  # characters per line of a plot's title (a family's description can be long)
EARLY_SHARE = 0.05  # the share of each curve's first points left out when choosing the top of the loss axis
OLD_NUMBERING = "expert0_router_weight"  # only an old log has it: the prior, expert 0 now, is never routed


def renumbered(record: dict) -> dict:
    """A metrics record in today's numbering: the prior is expert 0 and the transformer experts 1 to n. A record
    of a log written before (transformer experts 0 to n-1, `prior_final_cos`) is renamed; others are as they are."""
    if OLD_NUMBERING not in record:
        return record
    out = {}
    for key, value in record.items():
        match = PART_METRIC.fullmatch(key)
        if match and match.group(1) == "expert":
            key = f"expert{int(match.group(2)) + 1}_{match.group(3)}"
        elif key == "prior_final_cos":
            key = "expert0_final_cos"
        out[key] = value
    return out


def read_metrics(path: Path) -> list[dict]:
    """The log's records as one history: a record whose step is not past the last one (a resume from an
    earlier checkpoint, or a new run in the same place) replaces the records from that step on. The log is read
    a line at a time, a line past MAX_LOG_LINE left out (a damaged log, or one of zeros, is never held whole)."""
    records: list[dict] = []
    with open_regular(path) as f:
        for line in bounded_lines(f, MAX_LOG_LINE):
            try:
                record = json.loads(line.decode("utf-8", errors="replace"))  # a damaged byte: a dropped line
            except (ValueError, RecursionError):
                continue  # a line cut short by a kill mid-write
            if not isinstance(record, dict) or "step" not in record or "loss" not in record:
                continue
            while records and records[-1]["step"] >= record["step"]:
                records.pop()
            records.append(renumbered(record))
    return records


def plot_available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def moving_average(values: np.ndarray, window: int) -> np.ndarray:
    """Mean of each value and up to window - 1 before it (so the curve starts at the first step)."""
    sums = np.cumsum(np.concatenate([[0.0], values]))
    ends = np.arange(1, len(values) + 1)
    starts = np.maximum(0, ends - window)
    return (sums[ends] - sums[starts]) / (ends - starts)


def loss_limits(curves: list[np.ndarray]) -> tuple[float, float]:
    """(bottom, top) of the loss axis: the lowest value of any curve to the highest after each curve's first
    EARLY_SHARE of points (at least its first point, when it has more than one), with a margin of 5%."""
    low = min(float(np.min(c)) for c in curves)
    high = max(float(np.max(c[min(len(c) - 1, max(1, int(len(c) * EARLY_SHARE))):])) for c in curves)
    margin = 0.05 * (high - low) or 0.05 * abs(high) or 0.05
    return low - margin, high + margin


def short_labels(paths: list[Path]) -> list[str]:
    """Each run's name: its last path part (less `.metrics.jsonl`), with as many parent parts as it takes to tell
    it from the others."""
    parts = [Path(str(p).removesuffix(".metrics.jsonl").rstrip("/")).parts or (str(p),) for p in paths]
    depth = 1
    while depth < max(len(x) for x in parts) and len({x[-depth:] for x in parts}) < len(parts):
        depth += 1
    return ["/".join(x[-depth:]) for x in parts]


def _save(fig, out: Path) -> None:
    """The figure into `out` (its format from the suffix), written beside it first and renamed into place."""
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        with open_own(tmp, "w", binary=True) as f:  # never through a link planted at the temporary name
            fig.savefig(f, format=out.suffix.lower().lstrip(".") or "png")
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)


def write_loss_plot(metrics: Path, out: Path, title: str) -> Path | None:
    """Draw the loss curves of `metrics` into `out` (PNG, SVG or PDF); None when the log has no steps."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    records = read_metrics(metrics)
    if not records:
        return None
    steps = np.array([r["step"] for r in records])
    losses = np.array([r["loss"] for r in records], dtype=float)
    window = max(1, min(SMOOTH_STEPS, len(losses) // 10))
    val = [(r["step"], r["val_loss"]) for r in records if r.get("val_loss") is not None]
    figures = part_figures(records)  # figure -> part -> values per step
    if figures:
        fig, grid = plt.subplots(2, len(figures), figsize=(max(8, 4 * len(figures)), 8), dpi=100, squeeze=False,
                                 gridspec_kw={"height_ratios": [3, 2]})
        gs = grid[0, 0].get_gridspec()
        for cell in grid[0]:
            cell.remove()
        ax = fig.add_subplot(gs[0, :])
        for cell, (name, parts) in zip(grid[1], figures.items()):
            for part, values in parts.items():
                cell.plot(steps, moving_average(np.array(values, dtype=float), window), label=part)
            cell.set_title(name.replace("_", " "), fontsize=10)
            cell.set_xlabel("step")
            cell.grid(True, alpha=0.3)
            cell.legend(fontsize=8)
    else:
        fig, ax = plt.subplots(figsize=(8, 5), dpi=100)
    try:
        smoothed = moving_average(losses, window)
        ax.plot(steps, losses, color="tab:blue", alpha=0.3, linewidth=0.8, label="training loss")
        ax.plot(steps, smoothed, color="tab:blue", linewidth=2, label=f"training loss, mean of {window} steps")
        curves = [smoothed]
        if val:
            val_steps, val_losses = zip(*val)
            ax.plot(val_steps, val_losses, "o-", color="tab:orange", markersize=4, label="validation loss")
            curves.append(np.array(val_losses, dtype=float))
        ax.set_ylim(*loss_limits(curves))
        ax.set_xlabel("step")
        ax.set_ylabel("loss (nats per token)")
        ax.set_title("\n".join(textwrap.wrap(title, TITLE_WIDTH)), fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend()
        fig.tight_layout()
        _save(fig, out)
    finally:
        plt.close(fig)
    return out


def part_figures(records: list[dict]) -> dict[str, dict[str, list[float]]]:
    """The per-part figures a family logs at every step ("expert0_write_norm"...): figure -> part -> values."""
    figures: dict[str, dict[str, list[float]]] = {}
    for key in records[0]:
        match = PART_METRIC.fullmatch(key)
        if match and all(key in r for r in records):
            part = f"{match.group(1)} {match.group(2)}"
            figures.setdefault(match.group(3), {})[part] = [r[key] for r in records]
    return figures


def write_runs_plot(runs: dict[str, Path], out: Path, title: str, x: str = "step") -> Path | None:
    """Each run's (label -> metrics log) curve in one plot `out`, against "step" or "time" (seconds); None when no
    log has any steps."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    histories = {label: read_metrics(path) for label, path in runs.items()}
    histories = {label: records for label, records in histories.items() if records}
    if not histories:
        return None
    texts = {label: validation_of(Path(str(runs[label]).removesuffix(".metrics.jsonl"))) for label in histories}
    per_char = all(text["val_characters"] for text in texts.values())
    unit = "bits per character" if per_char else "nats per token" + (
        ": the tokenizers differ, so not comparable" if len({t["tokenizer"] for t in texts.values()}) > 1
        else "")
    fig, ax = plt.subplots(figsize=(9, 5.5), dpi=100)
    try:
        kinds, curves = set(), []
        for label, records in histories.items():
            val = [r for r in records if r.get("val_loss") is not None]
            if val:
                xs, ys, kind = [r[x] for r in val], [r["val_loss"] for r in val], "validation"
            else:
                losses = np.array([r["loss"] for r in records], dtype=float)
                xs, kind = [r[x] for r in records], "training, smoothed"
                ys = moving_average(losses, max(1, min(SMOOTH_STEPS, len(losses) // 10)))
            kinds.add(kind)
            if per_char:
                ys = [bits_per_char(y, texts[label]) for y in ys]
            curves.append(np.asarray(ys, dtype=float))
            ax.plot(xs, ys, "-" if kind != "validation" or len(xs) > 30 else "o-", markersize=3,
                    label=f"{label} ({kind})" if len(histories) > 1 else label)
        ax.set_ylim(*loss_limits(curves))
        ax.set_xlabel("step" if x == "step" else "seconds")
        ax.set_ylabel(f"{' / '.join(sorted(kinds))} loss ({unit})")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
        fig.tight_layout()
        _save(fig, out)
    finally:
        plt.close(fig)
    return out
