"""Every output head of a model, with where its target lies and what it must not see, for the leak tests.

A model's main head at position t predicts the token at t + 1 and sees nothing after t. A family with more
heads (model/lookahead) gives `heads(ids)`: one `HeadLogits` per head; `heads_of` asks for it, or gives the
main head alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class HeadLogits:
    name: str  # "main", "lookahead 1", ...
    offset: int  # at position t the head predicts the token at t + offset
    hidden: tuple[int, int | None]  # (first, last) offsets after t it must not see; last None: all of them
    logits: Any  # backend (B*T, vocab): row b*T + t is the head's prediction at position t of sequence b


def heads_of(model, ids: np.ndarray) -> list[HeadLogits]:
    """Every head's logits for host ids (B, T)."""
    if hasattr(model, "heads"):
        return model.heads(ids)
    return [HeadLogits("main", 1, (1, None), model.logits(ids))]
