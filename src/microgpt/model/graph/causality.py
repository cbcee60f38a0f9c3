"""The check every graph passes before it trains: no output sees the future.

The logits at position t (the graph's output, which sampling and the main loss read) must not change when any
token after t changes, and the logits every other loss reads at t must not change when that loss's own
target (the token at t + offset) changes. The check perturbs one input position at a time and compares, on
a float64 copy of the model with noisy weights (so that no weight starting at zero, a router's say, hides a
path), the outputs before and after. A graph that leaks is refused with the first node, in forward order
among the leaking output's sources, whose output at t moved: where the future first enters (a GraphError
whose path is that node's).

In float64 a sound graph's outputs do not move at all (a masked key's probability is exactly 0, and rows
are computed independently), so the tolerance only absorbs rounding no sound path produces.

The float64 copy is bounded before it is made, from the document's own numbers: a graph whose copy would not
fit in this machine's memory is refused in one line naming its size, never allocated.
"""

from __future__ import annotations

import os

import numpy as np

from microgpt.core.checks import format_bytes
from microgpt.core.errors import ConfigError
from microgpt.model.graph.compile import GraphError
from microgpt.model.graph.model import PassContext, Passes, Shared
from microgpt.model.graph.program import Program
from microgpt.model.params import Parameters, ParameterViews
from microgpt.model.rope import RopeTables

CHECK_POSITIONS = 12  # window length checked: every position of it, each offset a loss reads within it
CHECK_SEQUENCES = 2
TOLERANCE = 1e-10  # float64: a sound output does not move; any path from the future moves it by far more
WEIGHT_NOISE = 0.3  # added to every weight of the copy checked
# Bytes of the copy per parameter: the float64 store's four rows (model/params.py: weights, gradients, Adam's
# two moments) and the noise drawn for the weights.
COPY_BYTES_PER_PARAMETER = 5 * 8


def check_causality(program: Program, seq_len: int, tokenizer, seed: int = 0) -> str:
    """A line saying what was checked, or a GraphError naming where the future first enters. The verdict is
    kept on the program, so a model built again from it (a validation copy, a reload) is not checked again."""
    if program.verdict is None:
        program.verdict = _check(program, seq_len, tokenizer, seed)
    return program.verdict


def _check(program: Program, seq_len: int, tokenizer, seed: int) -> str:
    from microgpt.backends import get_backend

    check_copy_fits(program)
    be = get_backend("numpy", dtype=np.float64)
    vocab, length = program.dims["vocab"], min(seq_len, CHECK_POSITIONS)
    params = Parameters(be, program.specs)
    params.initialize(seed)
    rng = np.random.default_rng(seed)
    params.data += rng.normal(0.0, WEIGHT_NOISE, params.data.shape)  # every weight at once, in the store's order
    passes = Passes(program, be, ParameterViews(params.value, params.gradient),
                    Shared(RopeTables(be, seq_len), tokenizer, lambda: 0))
    heads = [(program.logits, None)] + [(program.nodes[i].inputs["logits"][0], i) for i in program.losses[1:]]
    ids = rng.integers(0, vocab, size=(CHECK_SEQUENCES, length))  # (B, T)
    if vocab < 2:
        return "sound: nothing to check with a vocabulary of one token"
    variants = [ids]  # the window, then the window with the token at each position changed
    for position in range(length):
        changed = ids.copy()
        changed[:, position] = (ids[:, position] + rng.integers(1, vocab, size=CHECK_SEQUENCES)) % vocab
        variants.append(changed)
    # one forward of every variant side by side (a sequence's rows never read another sequence's), not one each
    moves = _moves(passes, program, np.concatenate(variants), length)
    for position in range(length):
        for vid, loss in heads:
            if loss is None:
                rows = list(range(position))  # every position before the changed one
            else:
                offset = program.nodes[loss].params["offset"]
                rows = [position - offset] if position - offset >= 0 else []
            moved = [t for t in rows if moves[vid][t, position]]
            if moved:
                message, entry = _refusal(program, moves, vid, loss, moved[0], position)
                raise GraphError(message, entry)
    others = len(heads) - 1
    also = f", and {others} other loss head{'s' if others != 1 else ''} never read{'s' if others == 1 else ''} " \
           f"its target" if others else ""
    return f"sound: the logits at t read nothing after t{also} (checked at {length} positions)"


def check_copy_fits(program: Program) -> None:
    """A ConfigError naming the graph's parameters and its largest where the check's float64 copy of them
    would be more than this machine's memory (counted from the specs: nothing is allocated)."""
    total, memory = sum(spec.size for spec in program.specs), machine_memory()
    if memory is None or total * COPY_BYTES_PER_PARAMETER <= memory:
        return
    largest = max(program.specs, key=lambda spec: spec.size)
    raise ConfigError(
        f"the causality check holds a float64 copy of the graph's {total:,} parameters ({largest.name} is "
        f"{' x '.join(f'{n:,}' for n in largest.shape)}), {COPY_BYTES_PER_PARAMETER} bytes each, more than this "
        f"machine's {format_bytes(memory)} of memory; use smaller dims")


def machine_memory() -> int | None:
    """Bytes of this machine's physical memory, or None where the system does not say."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _moves(passes: Passes, program: Program, ids: np.ndarray, length: int) -> dict:
    """Each value's moves, taken as the forward makes it, which then frees it as usual: kept, the values
    themselves would be every node's at once, memory growing with the graph rather than held to one node's
    (what a check costs at the primitive limit: docs/benchmarks.md, Graphs)."""
    moves = {}

    def watch(vid: int, value) -> None:
        value = np.asarray(value)
        if not np.isfinite(value).all():
            node = next(node for node in program.nodes if vid in node.outputs.values())
            raise GraphError(f"{node.where}: its output is not finite (inf or nan) on the causality check's weights "
                             "(the model's initial weights with noise): its numbers overflow; scale by less, or "
                             "give smaller initial weights", node.path)
        moves[vid] = _moved(value, length)

    run = PassContext(*ids.shape, ids)
    with np.errstate(all="ignore"):  # an overflow is the refusal above, not a warning
        passes.forward(run, program.needed([vid for vid in program.values if vid != program.tokens]), watch=watch)
    return moves


def _moved(value: np.ndarray, length: int) -> np.ndarray:
    """(length, length) bool, [t, p]: whether the value at position t moved, in any sequence, when the token at
    p changed (by more than TOLERANCE times its size at t, at least 1). The value's rows are the variants'."""
    value = value.reshape(length + 1, CHECK_SEQUENCES, length, -1)  # (variants, sequences, t, features)
    before, after = value[0], value[1:]
    scale = np.maximum(1.0, np.abs(before).max(axis=(0, 2)))  # (t,)
    close = np.abs(after - before) <= TOLERANCE * scale[:, None]  # (p, sequences, t, features)
    return ~close.all(axis=(1, 3)).T


def _refusal(program: Program, moves: dict, vid: int, loss: int | None, t: int, position: int) -> tuple[str, tuple]:
    """(the refusal's line, the path of the node where the future first enters)."""
    sources = set(program.needed([vid]))
    entry = next(program.nodes[i] for i in sorted(sources)
                 if any(moves[v][t, position] for v in program.nodes[i].outputs.values()))
    what = entry.op.name + (f" with mask {entry.params['mask']}" if "mask" in entry.params else "")
    if loss is None:
        seen = f"the logits at position {t} change with the token at position {position}, after it"
        rule = "a model's output at t may read only the tokens up to t"
    else:
        offset = program.nodes[loss].params["offset"]
        seen = (f"the logits that the loss {program.nodes[loss].where} reads at position {t} change with its "
                f"target, the token at position {position} (offset {offset})")
        rule = "a loss head must not see the token it predicts"
    return f"the graph sees the future: {seen}; it first enters at {entry.where} ({what}); {rule}", entry.path
