"""The loss of a text with nodes' outputs changed (`LoadedModel.loss(text, ablate=..., patch=...)`):

- `ablate=[path, ...]`: each output (or one head's columns, `path[i]`) zeroed (mode "zero") or replaced at every
  position by its mean over the text (mode "mean", from a first pass without changes);
- `patch={path: other_trace}`: each output taken from another text's trace, position by position (the traces
  of texts with the same number of tokens: the counterfactual of activation patching).

The loss is the mean -log p of each next token of the text, from the graph's logits (as eval's nll_rows). And
`score_heads` ranks every attention head by what the loss gains when it alone is ablated.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from microgpt.core.errors import ConfigError
from microgpt.use.evaluate import nll_rows
from microgpt.use.inspect.paths import Place, attention_paths, head_columns, node_paths, resolve
from microgpt.use.inspect.windows import Graph, Span

MODES = ("zero", "mean")


def _columns(place: Place) -> slice:
    return slice(None) if place.columns is None else slice(*place.columns)


def _set(place: Place, source: Callable[[Span, int], np.ndarray]):
    """An edit writing source(span, rows) into the place's columns."""
    def edit(rows: np.ndarray, span: Span) -> np.ndarray:
        rows[:, _columns(place)] = source(span, len(rows))
        return rows
    return edit


def edits_for(graph: Graph, ids: np.ndarray, ablate=(), mode: str = "zero", patch: dict | None = None) -> dict:
    """{node index: {port: [edit, ...]}} of the ablations and patches, checked (a ConfigError naming the first
    bad one)."""
    if mode not in MODES:
        raise ConfigError(f"mode {mode!r}: an ablation zeroes ('zero') or takes the mean over the text ('mean')")
    if isinstance(ablate, str):
        ablate = [ablate]
    places = [resolve(graph, path) for path in ablate]
    edits: dict[int, dict[str, list]] = {}

    def add(place: Place, edit) -> None:
        edits.setdefault(place.node, {}).setdefault(place.port, []).append(edit)

    if places and mode == "mean":
        clean, _ = graph.forward(ids, list({p.value for p in places}))
        for place in places:
            mean = clean[place.value][:, _columns(place)].mean(axis=0, dtype=np.float64)
            add(place, _set(place, lambda span, rows, mean=mean: mean))
    else:
        for place in places:
            add(place, _set(place, lambda span, rows: 0))
    for path, other in (patch or {}).items():
        place = resolve(graph, path)
        source = other[path]
        if len(other.ids) != len(ids):
            raise ConfigError(f"patch {path}: its trace has {len(other.ids)} tokens and the text {len(ids)}; patch "
                              "from the trace of a text of as many tokens")
        width = (place.columns[1] - place.columns[0]) if place.columns else graph.program.values[place.value].width
        if source.shape[1] != width:
            raise ConfigError(f"patch {path}: its trace's output is {source.shape[1]} wide, this model's {width}; "
                              "patch from a trace of the same model")
        add(place, _set(place, lambda span, rows, source=source: source[span.first : span.first + rows]))
    return edits


def text_loss(ids: np.ndarray, logits: np.ndarray) -> float:
    """Mean -log p of each next token: logits (N, vocab) against ids (N,)."""
    if len(ids) < 2:
        raise ConfigError("a loss needs at least 2 tokens (one to read, one to predict); give a longer text")
    return float(nll_rows(logits[:-1], ids[1:]).mean())


def ablated_loss(graph: Graph, text, ablate=(), mode: str = "zero", patch: dict | None = None) -> float:
    """The text's loss (nats per token) with these ablations and patches."""
    ids = graph.ids(text)
    edits = edits_for(graph, ids, ablate, mode, patch)
    values, _ = graph.forward(ids, [graph.program.logits], edits)
    return text_loss(ids, values[graph.program.logits])


@dataclass
class HeadAblation:
    """One head's ablation on a text: its path (`node[i]`), its layer (index among the attention nodes), head and
    width, the loss with it ablated and what that adds to the loss without."""

    path: str
    layer: int
    head: int
    width: int
    loss: float
    delta: float


def score_heads(graph: Graph, text, mode: str = "zero", on_head: Callable[[int, int], None] | None = None
                ) -> tuple[float, list[HeadAblation]]:
    """(the clean loss, every attention head's ablation, the most harmful first) on `text`; `on_head(done, total)`
    after each."""
    clean = ablated_loss(graph, text)
    heads = []
    for layer, name in enumerate(attention_paths(graph.program)):
        kernel = graph.passes.kernels[node_paths(graph.program)[name][0]]
        heads += [(layer, name, head, width) for head, (_, width) in enumerate(head_columns(kernel))]
    found = []
    for done, (layer, name, head, width) in enumerate(heads, 1):
        loss = ablated_loss(graph, text, [f"{name}[{head}]"], mode)
        found.append(HeadAblation(f"{name}[{head}]", layer, head, width, loss, loss - clean))
        if on_head is not None:
            on_head(done, len(heads))
    return clean, sorted(found, key=lambda h: -h.delta)
