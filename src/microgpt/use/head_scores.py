"""Every head of a model scored on a held-out text: its loss, and how often its top guess is the true token.

For a model with several heads (the lookahead family's: `heads(ids)`, main first), each head at position t
predicts the token at t + offset. The text is read as training reads it, in consecutive windows of seq_len
tokens and the next one, each head scored at the positions whose target lies inside the window (seq_len -
offset + 1 of them; a gap head sees what the window holds after its gap). The main head's row is the same
reading, so the heads compare with it; `eval`'s own NLL, from seq_len tokens of context at every position,
is the main head's exact figure.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from microgpt.core.errors import DataError
from microgpt.use.evaluate import nll_rows


@dataclass(frozen=True)
class HeadScore:
    name: str  # "main", "lookahead 1", ...
    offset: int  # it predicts the token at t + offset
    hidden: tuple[int, int | None]  # the offsets after t it does not see
    positions: int  # predictions scored
    nll: float  # mean negative log-likelihood, nats per token
    top1: float  # the share of positions where its most likely token is the true one

    @property
    def target(self) -> str:
        """Where its target lies, and what it does not see: "t+2", "t+1 (t+1..t+3 hidden)"."""
        first, last = self.hidden
        if last is None:
            return f"t+{self.offset}"
        return f"t+{self.offset} ({'t+' + str(first) if first == last else f't+{first}..t+{last}'} hidden)"

    def as_json(self) -> dict:
        return {"name": self.name, "offset": self.offset, "hidden": list(self.hidden), "positions": self.positions,
                "nll": self.nll, "top1": self.top1}


def score_heads(model, tokens, batch_size: int = 32, max_positions: int | None = None) -> list[HeadScore]:
    """Each head's HeadScore on tokens (n,), for a model with `heads`; [] for one without."""
    if not hasattr(model, "heads"):
        return []
    seq_len = model.config.seq_len
    end = len(tokens) if max_positions is None else min(len(tokens), seq_len + max_positions)
    starts = np.arange(0, end - seq_len, seq_len)  # each window: tokens[s : s + seq_len + 1]
    if len(starts) == 0:
        raise DataError(f"the text has {end} tokens, fewer than seq_len + 1 = {seq_len + 1}; give a longer text")
    totals: dict[int, list] = {}
    for i in range(0, len(starts), batch_size):
        spans = np.stack([np.asarray(tokens[s : s + seq_len + 1], dtype=np.int32) for s in starts[i : i + batch_size]])
        for k, head in enumerate(model.heads(spans[:, :seq_len])):
            counted = seq_len - head.offset + 1  # rows t with t + offset <= seq_len
            logits = model.be.to_host(head.logits).reshape(len(spans), seq_len, -1)[:, :counted]  # (B, c, V)
            targets = spans[:, head.offset : head.offset + counted].reshape(-1)  # (B*c,)
            rows = logits.reshape(len(targets), -1)
            entry = totals.setdefault(k, [head, 0.0, 0, 0])
            entry[1] += float(nll_rows(rows, targets).sum())
            entry[2] += int((rows.argmax(axis=1) == targets).sum())
            entry[3] += len(targets)
    return [HeadScore(head.name, head.offset, tuple(head.hidden), count, total / count, right / count)
            for head, total, right, count in totals.values()]
