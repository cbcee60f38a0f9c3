"""GPT's incremental decoding with a key/value cache: each new token costs O(T), not a full forward pass.

`Decoder` holds, for every layer and head group, a `KVRing` (model/kv_cache.py) of the keys (after
RoPE) and the values of the tokens seen so far, up to the model's seq_len
positions, on the backend. `prefill` runs a prompt through one batched forward
that fills the cache; `step` runs one new token through every block, attending
to the cache. Both are the model's own forward (`GPT.next_token_logits`, the
same attention code as training, through the backend's `causal_attention`);
this module only keeps the rings, their slots and the position counters.

Past seq_len the cache slides: it is a ring of seq_len slots, position p
writes slot p % seq_len, and each new token attends to itself and the
seq_len - 1 tokens before it, at every layer (sliding-window attention). Keys
keep the rotation of their absolute position; RoPE scores depend only on the
distance between positions, so the window's offset does not matter (and the
RoPE tables for a position past seq_len are made for that step alone, so memory
stays bounded by seq_len however many tokens are generated). The keys
and values are the ones computed when each token arrived, so for a model of
two or more layers this differs from re-running the model on the cropped last
seq_len tokens (there, every hidden state depends on where the window starts);
for one layer, and for any model while the context fits in seq_len, the two
agree. `generate(..., use_cache=False)` is the cropped re-run (model/decode.py's `Rerun`).
"""

from __future__ import annotations

import numpy as np

from microgpt.backends.base import Mat
from microgpt.model.attention import head_groups
from microgpt.model.kv_cache import KVRing


class Decoder:
    """Per-layer K/V rings of seq_len slots for one sequence, and its position counters."""

    def __init__(self, model):
        self.model = model
        self.capacity = model.config.seq_len
        self.position = 0  # position of the next token (the first token in the cache is position 0)
        self.consumed = 0  # context tokens accounted for, including those a long prompt had cropped
        groups = head_groups(model.config.head_dims)
        layers = range(model.config.n_layers)
        self.rings = [[KVRing(model.be, g, self.capacity) for g in groups] for _ in layers]  # [layer][group]

    @property
    def length(self) -> int:
        """Tokens the cache holds: every one so far, up to seq_len."""
        return min(self.position, self.capacity)

    def prefill(self, token_ids) -> Mat:
        """Fill an empty cache with a prompt's last seq_len tokens in one batched forward.

        Returns backend logits (1, vocab) for the token after the prompt.
        """
        token_ids = np.asarray(token_ids, dtype=np.int32).reshape(-1)  # (n,)
        if self.position:
            raise RuntimeError(f"prefill needs an empty cache, but it holds {self.length} tokens; make a new Decoder")
        if len(token_ids) == 0:
            raise ValueError("prefill needs a prompt of at least one token")
        self.consumed = len(token_ids)
        return self._forward(token_ids[-self.capacity :])

    def step(self, token_id: int) -> Mat:
        """Append one token at the next position; backend logits (1, vocab) for the token after it."""
        self.consumed += 1
        return self._forward(np.array([token_id], dtype=np.int32))  # (1,)

    def _forward(self, token_ids: np.ndarray) -> Mat:
        """Run n new tokens (positions position .. position + n - 1) through the model; logits (1, vocab)."""
        logits = self.model.next_token_logits(token_ids, self.rings, self.position)  # (1, vocab)
        self.position += len(token_ids)
        return logits
