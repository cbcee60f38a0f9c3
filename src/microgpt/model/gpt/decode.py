"""GPT's incremental decoding with a key/value cache: each new token costs O(T), not a full forward pass.

`Decoder` holds, for every layer and head group, a `KVRing` (model/kv_cache.py) of the keys (after
RoPE) and the values of the tokens seen so far, up to the model's seq_len
positions, on the backend. `prefill` runs a prompt through one batched forward
that fills the cache; `step` runs one new token through every block, attending
to the cache. Both are the model's own forward (`GPT.next_token_logits`, the
same attention code as training, through the backend's `causal_attention`);
this module only keeps the rings (the position counters are model/decode.py's `CachedDecoder`).

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
from microgpt.model.decode import CachedDecoder
from microgpt.model.kv_cache import KVRing


class Decoder(CachedDecoder):
    """Per-layer K/V rings of seq_len slots for one sequence."""

    def __init__(self, model):
        super().__init__(model.config.seq_len)
        self.model = model
        groups = head_groups(model.config.head_dims)
        layers = range(model.config.n_layers)
        self.rings = [[KVRing(model.be, g, self.capacity) for g in groups] for _ in layers]  # [layer][group]

    def _forward(self, token_ids: np.ndarray, start: int) -> Mat:
        return self.model.next_token_logits(token_ids, self.rings, start)  # (1, vocab)
