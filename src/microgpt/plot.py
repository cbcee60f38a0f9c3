"""Loss-curve PNGs from runs' metrics logs (`<checkpoint>.metrics.jsonl`), drawn with matplotlib if installed.

matplotlib is the optional `plot` extra; `plot_available` says whether it
imports. Both plots draw headless (the Agg backend): `write_loss_plot` one run's
raw training loss, its moving average and its validation points;
`write_runs_plot` several runs in one figure, each as its validation curve
(its smoothed training loss where it has none), against step or seconds.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

PLOT_HINT = "note: no loss plot; pip install 'microgpt[plot]' for loss plots"
SMOOTH_STEPS = 50  # moving-average window, shortened for short runs


def read_metrics(path: Path) -> list[dict]:
    """The log's records as one history: a record whose step is not past the last one (a resume from an
    earlier checkpoint, or a new run in the same place) replaces the records from that step on."""
    records: list[dict] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by a kill mid-write
        if not isinstance(record, dict) or "step" not in record or "loss" not in record:
            continue
        while records and records[-1]["step"] >= record["step"]:
            records.pop()
        records.append(record)
    return records


def metrics_path(run: Path) -> Path:
    """A run's metrics log, from its checkpoint directory or the log itself."""
    return run if run.name.endswith(".metrics.jsonl") else run.with_name(run.name + ".metrics.jsonl")


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


def write_loss_plot(metrics: Path, out: Path, title: str) -> Path | None:
    """Draw the loss curves of `metrics` into the PNG `out`; None when the log has no steps."""
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
    fig, ax = plt.subplots(figsize=(8, 5), dpi=100)
    try:
        ax.plot(steps, losses, color="tab:blue", alpha=0.3, linewidth=0.8, label="training loss")
        ax.plot(steps, moving_average(losses, window), color="tab:blue", linewidth=2,
                label=f"training loss, mean of {window} steps")
        if val:
            val_steps, val_losses = zip(*val)
            ax.plot(val_steps, val_losses, "o-", color="tab:orange", markersize=4, label="validation loss")
        ax.set_xlabel("step")
        ax.set_ylabel("loss (nats per character)")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(out)
    finally:
        plt.close(fig)
    return out


def write_runs_plot(runs: dict[str, Path], out: Path, title: str, x: str = "step") -> Path | None:
    """Each run's (label -> metrics log) curve in one PNG `out`, against "step" or "time" (seconds); None when no
    log has any steps."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    histories = {label: read_metrics(path) for label, path in runs.items()}
    histories = {label: records for label, records in histories.items() if records}
    if not histories:
        return None
    fig, ax = plt.subplots(figsize=(9, 5.5), dpi=100)
    try:
        kinds = set()
        for label, records in histories.items():
            val = [r for r in records if r.get("val_loss") is not None]
            if val:
                xs, ys, kind = [r[x] for r in val], [r["val_loss"] for r in val], "validation"
            else:
                losses = np.array([r["loss"] for r in records], dtype=float)
                xs, kind = [r[x] for r in records], "training, smoothed"
                ys = moving_average(losses, max(1, min(SMOOTH_STEPS, len(losses) // 10)))
            kinds.add(kind)
            ax.plot(xs, ys, "-" if kind != "validation" or len(xs) > 30 else "o-", markersize=3,
                    label=f"{label} ({kind})" if len(histories) > 1 else label)
        ax.set_xlabel("step" if x == "step" else "seconds")
        ax.set_ylabel(f"{' / '.join(sorted(kinds))} loss (nats per character)")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
        fig.tight_layout()
        fig.savefig(out)
    finally:
        plt.close(fig)
    return out
