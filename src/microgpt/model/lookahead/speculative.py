"""The lookahead model's speculative decoder: its heads draft, and one pass over the drafts checks them.

It keeps a KV ring per head group at every layer of the trunk and of every extra head (model/kv_cache.py),
with room for the window (seq_len) and the K drafts, so that a pass can feed the next token and K drafted
ones at once. After a pass, `keep(m)` keeps the first m tokens fed and drops the rest by moving the position
back: their keys stay in slots that the next pass overwrites. The rule that decides m (and every token) is
the sampler's (use/speculative.py); this module only runs the model and keeps the positions.
"""

from __future__ import annotations

import numpy as np

from microgpt.model.attention import head_groups
from microgpt.model.kv_cache import KVRing


class SpeculativeDecoder:
    """Per-layer K/V rings for the trunk and each extra head, for one sequence, and its position."""

    def __init__(self, model):
        config = model.config
        self.model = model
        self.window, self.drafts = config.seq_len, config.lookahead
        groups = head_groups(config.head_dims)

        def rings(layers: int) -> list[list[KVRing]]:
            return [[KVRing(model.be, g, config.seq_len + config.lookahead, config.seq_len) for g in groups]
                    for _ in range(layers)]

        self.trunk_rings = rings(config.n_layers)  # [layer][group]
        self.head_rings = [rings(config.head_layers) for _ in model.layers.extra]  # [head][layer][group]
        self.position = 0  # position of the next token fed
        self._fed_at = 0  # where the last pass's tokens began

    def prefill(self, token_ids) -> tuple[np.ndarray, np.ndarray]:
        """(main (vocab,), drafts (K, vocab)) host logits after a prompt (its last seq_len tokens): the main
        head's for the next token, and head k's for the token k after that."""
        token_ids = np.asarray(token_ids, dtype=np.int32).reshape(-1)[-self.window :]  # (n,)
        if self.position:
            raise RuntimeError("prefill needs an empty cache; make a new SpeculativeDecoder")
        if len(token_ids) == 0:
            raise ValueError("prefill needs a prompt of at least one token")
        main, drafts = self.feed(token_ids)
        return main[-1], drafts[-1]

    def feed(self, token_ids) -> tuple[np.ndarray, np.ndarray]:
        """Run up to K + 1 tokens at the next positions in one pass: host logits (main (n, vocab), drafts
        (n, K, vocab)), row i after token i."""
        model, be = self.model, self.model.be
        layers = model.layers
        token_ids = np.asarray(token_ids, dtype=np.int32).reshape(-1)  # (n,)
        n, start = len(token_ids), self.position
        x, _ = layers.blocks_forward(be.ids(token_ids), 1, n, self.trunk_rings, start)  # (n, d)
        h, _ = layers.final_norm.forward(x)  # (n, d)
        main = be.to_host(layers.head.forward(h))  # (n, vocab)
        drafts = np.stack([be.to_host(head.forward(x, None, 1, n, rings, start)[0])
                           for head, rings in zip(layers.extra, self.head_rings)], axis=1)  # (n, K, vocab)
        self._fed_at, self.position = start, start + n
        return main, drafts

    def keep(self, count: int) -> None:
        """Keep the first `count` tokens of the last pass, and forget the rest."""
        if not 1 <= count <= self.position - self._fed_at:
            raise ValueError(f"the last pass fed {self.position - self._fed_at} tokens; cannot keep {count}")
        self.position = self._fed_at + count
