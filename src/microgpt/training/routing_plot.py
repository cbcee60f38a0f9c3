"""An ensemble's routing of a text as a heatmap (`microgpt plot DIR --routing TEXT`), drawn with matplotlib.

Tokens run along x (each labelled with its text: a space as "␣", a newline as "↵"), the transformer experts
1 to n along y, each cell the router weight that expert gets at that position (0 to 1; a column sums to 1).
Where the model has a prior, a strip above holds expert 0's share of the writes into the stream there. The
plot is written whole and then renamed into place, as the loss plots are (plot.py).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np

from microgpt.training.plot import TITLE_WIDTH, _save

MAX_ROUTED_TOKENS = 400  # past this a heatmap's columns are too thin to read; route less text
INCHES_PER_TOKEN = 0.22


def token_label(text: str) -> str:
    """A token's text as an axis label: whitespace made visible, long tokens cut."""
    shown = text.replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥")
    return shown if len(shown) <= 8 else shown[:7] + "…"


def write_routing_plot(routing, out: Path, title: str) -> Path:
    """Draw `routing` (use/routing.py's Routing) into `out` (PNG, SVG or PDF)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    positions, experts = routing.weights.shape
    has_prior = routing.prior_kind != "none"
    width = min(60.0, max(7.0, 2.5 + INCHES_PER_TOKEN * positions))
    rows = [0.5] if has_prior else []
    fig, axes = plt.subplots(len(rows) + 1, 1, figsize=(width, 1.6 + 0.45 * (experts + len(rows))), dpi=100,
                             squeeze=False, sharex=True, layout="constrained",
                             gridspec_kw={"height_ratios": [*rows, max(1, experts)]})
    try:
        ax = axes[-1, 0]
        image = ax.imshow(routing.weights.T, aspect="auto", cmap="viridis", vmin=0.0, vmax=1.0,
                          interpolation="nearest")
        ax.set_yticks(np.arange(experts), routing.experts)
        ax.set_xticks(np.arange(positions), [token_label(t) for t in routing.tokens], fontsize=8,
                      fontfamily="monospace")
        ax.set_xlabel("token (its weights mix the experts' predictions of the next)", fontsize=9)
        fig.colorbar(image, ax=axes[:, 0].tolist(), label="weight (expert 0: its share)", fraction=0.03, pad=0.01)
        if has_prior:
            strip = axes[0, 0]
            strip.imshow(routing.prior[None, :], aspect="auto", cmap="viridis", vmin=0.0, vmax=1.0,
                         interpolation="nearest")
            strip.set_yticks([0], [f"expert 0\n{routing.prior_kind}"], fontsize=8)
        axes[0, 0].set_title("\n".join(textwrap.wrap(title, TITLE_WIDTH)), fontsize=10)
        _save(fig, out)
    finally:
        plt.close(fig)
    return out
