"""The inspect figures, drawn headless with matplotlib (the `plot` extra): a grid of attention heatmaps, a
layer per row and a head per column; the logit lens as a heatmap of the loss at each stream point and
position, each cell naming the point's top token; and one node's activations (each position's norm, and a
histogram of its values). The tokens label the axes; a text longer than MAX_SHOWN
tokens is drawn for its first MAX_SHOWN. The CLI (`microgpt inspect`) and the studio draw these same figures.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from microgpt.core.errors import ConfigError
from microgpt.core.version import install_hint
from microgpt.use.inspect.attention import attention_node
from microgpt.use.inspect.paths import head_columns

MAX_SHOWN = 48  # positions drawn: past that a token's label is too small to read
INCH_PER_TOKEN = 0.11  # a heatmap cell, with room for its token label


def shown(token: str) -> str:
    """A token as an axis label: whitespace made visible, at most 8 characters."""
    text = token.replace("\n", "⏎").replace("\t", "⇥").replace(" ", "␣")
    return text if len(text) <= 8 else text[:7] + "…"


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise ConfigError(f"drawing a figure needs matplotlib: {install_hint('plot')}") from None
    matplotlib.use("Agg")
    from matplotlib import pyplot

    return pyplot


def save(fig, out: Path) -> None:
    """The figure into `out` (PNG, SVG or PDF by its suffix), written beside it and renamed into place."""
    out = Path(out)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        fig.savefig(tmp, format=out.suffix.lower().lstrip(".") or "png", dpi=110)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)


def attention_figure(trace, out: Path, layers: list[int] | None = None) -> Path:
    """A heatmap per head of each attention node (`layers`: their indices; all by default) into `out`."""
    plt = _pyplot()
    paths = trace.attention_paths()
    if not paths:
        raise ConfigError("this model has no attention node to draw")
    chosen = list(range(len(paths))) if layers is None else layers
    heads = {layer: len(head_widths(trace, layer)) for layer in chosen}
    n = min(len(trace.ids), MAX_SHOWN)
    labels = [shown(t) for t in trace.tokens[:n]]
    columns = max(heads.values())
    side = max(2.2, n * INCH_PER_TOKEN)
    fig, axes = plt.subplots(len(chosen), columns, figsize=(side * columns, side * len(chosen) + 0.6),
                             squeeze=False)
    for row, layer in enumerate(chosen):
        widths = head_widths(trace, layer)
        for head in range(columns):
            ax = axes[row][head]
            if head >= len(widths):
                ax.axis("off")
                continue
            ax.imshow(trace.attention(layer, head)[:n, :n], cmap="viridis", vmin=0, vmax=1)
            ax.set_title(f"{paths[layer]}[{head}] ({widths[head]} wide)", fontsize=8)
            ax.set_xticks(range(n), labels, fontsize=6, rotation=90)
            ax.set_yticks(range(n), labels, fontsize=6)
            ax.set_xlabel("attends to", fontsize=7)
    fig.suptitle("attention weights (row: the query's token, column: the key's)", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.4 / fig.get_figheight()))
    save(fig, out)
    plt.close(fig)
    return Path(out)


def activations_figure(trace, path: str, out: Path) -> Path:
    """Node `path`'s output over the text: the norm of each position's row, and a histogram of every value."""
    plt = _pyplot()
    values = trace[path].astype(np.float64)
    n = min(len(values), MAX_SHOWN)
    fig, (norms, spread) = plt.subplots(1, 2, figsize=(max(6.0, n * 0.16) + 4.0, 3.4),
                                        gridspec_kw={"width_ratios": [max(6.0, n * 0.16), 4.0]})
    norms.bar(range(n), np.linalg.norm(values[:n], axis=1), color="#4c72b0")
    norms.set_xticks(range(n), [shown(t) for t in trace.tokens[:n]], fontsize=7, rotation=90)
    norms.set_ylabel("norm of the position's row")
    norms.set_title(f"{path}: {values.shape[1]} wide", fontsize=10)
    spread.hist(values.reshape(-1), bins=50, color="#dd8452")
    spread.set_xlabel("value")
    spread.set_ylabel("count")
    spread.set_title(f"mean {values.mean():.3g}, std {values.std():.3g}", fontsize=9)
    fig.tight_layout()
    save(fig, out)
    plt.close(fig)
    return Path(out)


def head_widths(trace, layer: int) -> list[int]:
    """The widths of attention node `layer`'s heads."""
    return [width for _, width in head_columns(trace.graph.passes.kernels[attention_node(trace, layer)])]


def lens_figure(lens, out: Path) -> Path:
    """The logit lens as a heatmap: a row per stream point, a column per position, colour the loss of the true
    next token (nats), each cell the point's top token there."""
    plt = _pyplot()
    n = min(lens.loss.shape[1], MAX_SHOWN)
    tokens = lens.trace.tokens
    loss = lens.loss[:, :n]
    fig, ax = plt.subplots(figsize=(max(4.0, n * 0.42 + 2.5), len(lens.points) * 0.36 + 1.8))
    colours = plt.get_cmap("magma_r").with_extremes(bad="lightgrey")  # the last position: no next token to score
    image = ax.imshow(np.ma.masked_invalid(loss), cmap=colours, aspect="auto")
    for p in range(len(lens.points)):
        for t, token in enumerate(lens.top_tokens(p)[:n]):
            value = loss[p, t]
            ax.text(t, p, shown(token[0]), ha="center", va="center", fontsize=6,
                    color="white" if np.isfinite(value) and value > np.nanmax(loss) * 0.6 else "black")
    ax.set_xticks(range(n), [shown(t) for t in tokens[:n]], fontsize=7, rotation=90)
    ax.set_yticks(range(len(lens.points)), lens.points, fontsize=7)
    ax.set_xlabel("input token (each cell: the top prediction for the token after it)")
    fig.colorbar(image, ax=ax, label="loss of the true next token (nats)")
    ax.set_title(f"logit lens through {lens.head}", fontsize=10)
    fig.tight_layout()
    save(fig, out)
    plt.close(fig)
    return Path(out)
