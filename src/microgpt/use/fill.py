"""Gap heads you can use: fill the holes of a text from the context on both sides (`sample --fill`, `eval
--fill-rate`).

A hole is one token position (a character, for a char model), marked in the text by the mask character (`_`
by default). Holes are filled greedily, left to right, in two passes:
1. the main head guesses each hole from the text before it alone (the tokens after a hole never reach it);
2. where the model has gap heads (`--lookahead K --lookahead-mode gap`: head k predicts the token after t
   seeing t and before, and t + k + 1 and after), each hole p of a run of w holes (p .. p + w - 1 left to
   fill) is filled again by gap head w at p - 1, which sees the text before the run and after it (pass 1's
   guesses standing for holes further right). A run wider than K keeps pass 1's guesses for its first holes
   until K are left. Pass 2 reads a window of seq_len tokens with the run near its middle.
A model without gap heads (gpt, an ensemble, mtp heads) keeps pass 1, and `Filled.used` says so. `fill_rates`
masks a share of held-out tokens at random and scores both passes against the truth, a window at a time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from microgpt.core.errors import ConfigError, Named

DEFAULT_MASK = "_"


@dataclass(frozen=True)
class Filled:
    text: str  # the text with every hole filled
    holes: int
    by_gap_heads: int  # holes the gap heads filled (the others: the main head, from the left)
    used: str  # one line: what filled the holes

    @property
    def by_main_head(self) -> int:
        return self.holes - self.by_gap_heads


def gap_heads(model) -> dict[int, int]:
    """{gap width k: the head's index in model.heads(...)} of the model's gap heads (each predicting the next
    token with the k positions after t hidden and the ones after them seen); {} for a model without any."""
    if not hasattr(model, "heads"):
        return {}
    probe = np.zeros((1, min(2, model.config.seq_len)), dtype=np.int32)
    found = {}
    for i, head in enumerate(model.heads(probe)):
        first, last = head.hidden
        if head.offset == 1 and first == 1 and last is not None:
            found[last] = i
    return found


def predict(model, windows: np.ndarray, rows: np.ndarray, heads: np.ndarray, gaps: dict[int, int]) -> np.ndarray:
    """(B,) the most likely token of each window (B, L) at its row rows[b], by the main head where heads[b] is 0
    and by gap head heads[b] (a width in `gaps`) otherwise."""
    batch, length = windows.shape
    be = model.be
    if np.any(heads > 0):
        every = model.heads(windows)
        outputs = {0: every[0].logits, **{k: every[i].logits for k, i in gaps.items()}}
    else:
        outputs = {0: model.logits(windows)}
    chosen = np.zeros(batch, dtype=np.int64)
    for width, logits in outputs.items():
        picked = np.flatnonzero(heads == width)
        if len(picked):
            host = be.to_host(logits).reshape(batch, length, -1)  # (B, L, V)
            chosen[picked] = host[picked, rows[picked]].argmax(axis=1)
    return chosen


def run_widths(holes: np.ndarray) -> np.ndarray:
    """For a hole mask (n,), at each hole the number of holes from it to the end of its run (0 elsewhere)."""
    widths = np.zeros(len(holes), dtype=np.int64)
    for p in range(len(holes) - 1, -1, -1):
        if holes[p]:
            widths[p] = 1 + (widths[p + 1] if p + 1 < len(holes) else 0)
    return widths


def fill_ids(model, ids: np.ndarray, holes: np.ndarray, use_gaps: bool = True) -> tuple[np.ndarray, int]:
    """(ids with every hole filled, how many the gap heads filled) for one sequence of host ids (n,) and its hole
    mask (n,); the first position must not be a hole."""
    ids, holes = np.array(ids, dtype=np.int32), np.asarray(holes, dtype=bool)
    seq_len, n = model.config.seq_len, len(ids)
    length = min(seq_len, n)
    for p in np.flatnonzero(holes):  # pass 1: the main head, from the text before each hole
        start = max(0, p - seq_len)
        ids[p] = predict(model, ids[None, start:p], np.array([p - 1 - start]), np.zeros(1, np.int64), {})[0]
    gaps = gap_heads(model) if use_gaps else {}
    widths, by_gaps = run_widths(holes), 0
    for p in np.flatnonzero(holes):  # pass 2: the gap heads, from both sides
        if widths[p] not in gaps:
            continue
        before = max(1, (length - widths[p]) // 2)  # the run near the window's middle, p - 1 inside it
        start = min(max(0, p - before), n - length)
        ids[p] = predict(model, ids[None, start : start + length], np.array([p - 1 - start]),
                         np.array([widths[p]]), gaps)[0]
        by_gaps += 1
    return ids, by_gaps


def fill_text(model, tokenizer, text: str, mask: str = DEFAULT_MASK) -> Filled:
    """`text` with each `mask` character filled (one token each), and what filled them."""
    if len(mask) != 1:
        raise ConfigError(f"the mask must be one character, got {mask!r}")
    pieces = text.split(mask)
    if len(pieces) == 1:
        raise ConfigError(f"the text has no {mask!r} to fill; mark each character to fill with {mask!r} (or give "
                          "another mask character)")
    if not pieces[0]:
        raise ConfigError(f"the text starts with a hole ({mask!r}), which has nothing before it to be filled from; "
                          "give it some text before its first hole")
    ids, holes = [], []
    for i, piece in enumerate(pieces):
        encoded = [int(t) for t in tokenizer.encode(piece, source="the text")] if piece else []
        ids += encoded
        holes += [False] * len(encoded)
        if i < len(pieces) - 1:
            ids.append(0)  # a placeholder, never read: pass 1 fills it before anything reads it
            holes.append(True)
    filled, by_gaps = fill_ids(model, np.array(ids), np.array(holes))
    count = int(np.sum(holes))
    return Filled(tokenizer.decode(filled), count, by_gaps, used_line(model, count, by_gaps))


def used_line(model, holes: int, by_gaps: int) -> str:
    """What filled the holes, in one line."""
    gaps = gap_heads(model)
    if not gaps:
        return (f"filled {holes} hole{'s' if holes != 1 else ''} with the main head from the text before "
                f"{'each' if holes != 1 else 'it'} alone: this model has no gap heads (train with --lookahead K --lookahead-mode gap for heads that "
                "read the text after a hole too)")
    left = holes - by_gaps
    tail = (f"; {left} in runs wider than its {max(gaps)} gap heads reach kept the main head's guess from the left"
            if left else "")
    return f"filled {holes} hole{'s' if holes != 1 else ''}: {by_gaps} by the gap heads, from both sides{tail}"


@dataclass(frozen=True)
class FillRates:
    holes: int
    gap_right: int  # holes the fill (gap heads where it has them) got right
    left_right: int  # holes the main head's left-only guess got right
    by_gap_heads: int  # holes the gap heads filled

    @property
    def gap_accuracy(self) -> float:
        return self.gap_right / self.holes

    @property
    def left_accuracy(self) -> float:
        return self.left_right / self.holes


def fill_rates(model, tokens, rate: float, batch_size: int = 32, max_positions: int | None = None,
               seed: int = 0) -> FillRates:
    """Mask a share `rate` of the tokens (none at a window's first position) in consecutive windows of seq_len
    tokens, fill them, and count the holes the fill and the main head's left-only guess get right."""
    if not 0 < rate <= 1:
        raise ConfigError(Named("fill_rate", rate), " must be above 0 and at most 1 (a share of the tokens to hide)")
    seq_len = model.config.seq_len
    tokens = np.asarray(tokens[: len(tokens) if max_positions is None else max_positions], dtype=np.int32)
    count = len(tokens) // seq_len
    if count == 0:
        raise ConfigError(f"the text has {len(tokens)} tokens, fewer than one window of seq_len {seq_len}; give a "
                          "longer text")
    truth = tokens[: count * seq_len].reshape(count, seq_len)  # (W, T)
    holes = np.random.default_rng(seed).random(truth.shape) < rate  # (W, T)
    holes[:, 0] = False
    if not holes.any():
        raise ConfigError(Named("fill_rate", rate), f" hid none of the {truth.size} tokens; give a higher rate or a "
                          "longer text")
    gaps = gap_heads(model)
    left, fill, by_gaps = truth.copy(), truth.copy(), 0
    for i in range(0, count, batch_size):
        rows = slice(i, i + batch_size)
        left[rows] = fill_windows(model, truth[rows], holes[rows], {})
        fill[rows], used = fill_windows(model, left[rows], holes[rows], gaps, counted=True)
        by_gaps += used
    return FillRates(int(holes.sum()), int((fill == truth)[holes].sum()), int((left == truth)[holes].sum()), by_gaps)


def fill_windows(model, windows: np.ndarray, holes: np.ndarray, gaps: dict[int, int], counted: bool = False):
    """Windows (B, T) with their holes (B, T) filled left to right in place of a copy, a hole of each window per
    pass: by the main head where `gaps` is empty (pass 1), else by the gap heads where a run fits one (pass 2,
    reading the windows as pass 1 left them). With `counted`, also how many the gap heads filled."""
    windows = windows.copy()
    widths = np.stack([run_widths(row) for row in holes])  # (B, T)
    order = [np.flatnonzero(row if not gaps else np.isin(w, list(gaps)) & row) for row, w in zip(holes, widths)]
    for j in range(max((len(o) for o in order), default=0)):
        live = np.array([b for b, o in enumerate(order) if j < len(o)])
        positions = np.array([order[b][j] for b in live])
        heads = widths[live, positions] if gaps else np.zeros(len(live), np.int64)
        windows[live, positions] = predict(model, windows[live], positions - 1, heads, gaps)
    used = sum(len(o) for o in order) if gaps else 0
    return (windows, used) if counted else windows
