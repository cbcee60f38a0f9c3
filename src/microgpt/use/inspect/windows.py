"""A model's graph run over a text for inspection: the text's positions in windows of seq_len (each window read
from its own start, as training reads one), up to WINDOWS_PER_RUN windows a forward, with the outputs asked for
copied to the host as they are made and any node's output edited on its way to its readers.

A hand-written family runs as its graph (model/graph's of_family: the same kernels, the same bits), a graph
run as itself. An edit wraps the node's kernel in passes of the inspection's own, so the model's own passes are
never touched.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from microgpt.core.errors import ConfigError
from microgpt.model.family import family

WINDOWS_PER_RUN = 32  # windows of seq_len in one forward: a trace of 1,000 tokens at seq_len 64 is one


@dataclass
class Span:
    """Positions first .. first + rows - 1 of the text, run as one batch (`run`: the graph's Run)."""

    first: int
    run: object

    @property
    def rows(self) -> int:
        return self.run.rows


Edit = Callable[[np.ndarray, Span], np.ndarray]  # (host rows of a node's output, their span) -> the rows to use


class Graph:
    """A loaded model's graph, with passes of its own: `model`, `program`, `passes`, `be`, `tokenizer`."""

    def __init__(self, loaded):
        if loaded.family_name == "graph":
            self.model = loaded.model
        else:
            self.model = family("graph").of_family(loaded.family_name, loaded.model, loaded.tokenizer)
        self.program, self.be, self.tokenizer = self.model.program, self.model.be, loaded.tokenizer
        self.passes = self.model.with_gradients(self.model.params)
        self.seq_len = self.model.config.seq_len

    def ids(self, text) -> np.ndarray:
        """The token ids (N,) of a text (or of ids given as they are); a ConfigError for none."""
        ids = self.tokenizer.encode(text, source="the text") if isinstance(text, str) else np.asarray(text)
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if len(ids) == 0:
            raise ConfigError("the text has no tokens; give some text")
        return ids

    def spans(self, ids: np.ndarray) -> list[Span]:
        """The batches the positions of ids (N,) run in: whole windows of seq_len, WINDOWS_PER_RUN at a time, then
        the last part window alone."""
        seq_len, whole = self.seq_len, len(ids) // self.seq_len
        found = []
        for start in range(0, whole, WINDOWS_PER_RUN):
            count, first = min(WINDOWS_PER_RUN, whole - start), start * seq_len
            found.append(Span(first, self.passes.run_for(ids[first : first + count * seq_len].reshape(count, seq_len))))
        if len(ids) % seq_len:
            found.append(Span(whole * seq_len, self.passes.run_for(ids[whole * seq_len :].reshape(1, -1))))
        return found

    def forward(self, ids: np.ndarray, wanted: list[int], edits: dict[int, dict[str, list[Edit]]] | None = None
                ) -> tuple[dict[int, np.ndarray], list[Span]]:
        """({value id: host (N, width)} for each wanted value, the spans) of one pass over ids (N,), each node of
        `edits` (node index -> port -> edits, applied in order) having its outputs edited."""
        program, passes = self.program, self.passes
        order = program.needed(list(wanted))
        found: dict[int, list] = {vid: [] for vid in wanted}
        spans = self.spans(ids)
        current: list[Span] = []
        originals = {index: passes.kernels[index] for index in edits or {}}
        try:
            for index, by_port in (edits or {}).items():
                ports = list(program.nodes[index].outputs)
                passes.kernels[index] = _Edited(self.be, originals[index],
                                                [by_port.get(port, []) for port in ports], current)

            def watch(vid: int, value) -> None:
                if vid in found:
                    found[vid].append(self.be.to_host(value))

            for span in spans:
                current[:] = [span]
                passes.forward(span.run, order, watch=watch)
        finally:
            for index, kernel in originals.items():
                passes.kernels[index] = kernel
        return {vid: np.concatenate(parts) for vid, parts in found.items()}, spans


class _Edited:
    """A kernel whose outputs pass through edits (a list per output port) before its readers see them."""

    def __init__(self, be, kernel, edits: list[list[Edit]], current: list[Span]):
        self.be, self.kernel, self.edits, self.current = be, kernel, edits, current

    def forward(self, inputs, run):
        outputs, saved = self.kernel.forward(inputs, run)
        edited = []
        for value, edits in zip(outputs, self.edits):
            if edits:
                rows = np.array(self.be.to_host(value))  # a copy: the kernel's own output may be saved, or read-only
                for edit in edits:
                    rows = edit(rows, self.current[0])
                value = self.be.from_host(rows)
            edited.append(value)
        return edited, saved
