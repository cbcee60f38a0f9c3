"""Loss-curve PNGs from a run's metrics log (`<checkpoint>.metrics.jsonl`), drawn with matplotlib if installed.

matplotlib is the optional `plot` extra; `plot_available` says whether it
imports, and `write_loss_plot` draws headless (the Agg backend): the raw
training loss, its moving average, and the validation loss points.
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
