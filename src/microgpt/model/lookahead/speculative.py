"""The lookahead model's speculative decoder: its heads draft, and one pass over the drafts checks them.

It keeps a KV ring per head group at every layer of the trunk and of the extra heads (model/kv_cache.py),
with room for the window (seq_len) and the K drafts, so that a pass can feed the next token and K drafted
ones at once. On a host backend (numpy, cpu) the extra heads run as one stack (draft_stack.py); on a GPU,
one after another. After a pass, `keep(m)` keeps the first m tokens fed and drops the rest by moving the position
back: their keys stay in slots that the next pass overwrites. `draft(token, count, pick)` then gives the heads'
drafts after the last token kept (pick None: each head's argmax, which hydra heads on the cpu backend draft in
one compiled call): mtp heads' all at once (`head_logits`), hydra heads' one after another, each
fed the tokens drafted before it (hydra_draft.py). The rule that decides m (and every token) is the sampler's
(use/speculative.py); this module only runs the model and keeps the positions.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from microgpt.model.attention import head_groups
from microgpt.model.kv_cache import KVRing
from microgpt.model.lookahead.draft_stack import DraftStack


class TrunkDecoder:
    """Per-layer K/V rings of the trunk, for one sequence, and its position: the passes and what they keep. A
    subclass drafts (`draft`), and runs its heads over the kept tokens it has not yet seen (`catch_up`)."""

    def __init__(self, model):
        config = model.config
        self.model = model
        self.window, self.drafts = config.seq_len, config.lookahead
        self.trunk_rings = self.rings(config.n_layers)  # [layer][group]
        self.position = 0  # position of the next token fed
        self._fed_at = 0  # where the last pass's tokens began
        self._states = None  # the trunk's last states (n, d) of the last pass, until the heads have run on them

    def rings(self, layers: int) -> list[list[KVRing]]:
        """A ring per head group at each of `layers` layers, with room for the window and the K drafts."""
        config, be = self.model.config, self.model.be
        return [[KVRing(be, g, config.seq_len + config.lookahead, config.seq_len) for g in head_groups(config.head_dims)]
                for _ in range(layers)]

    def prefill(self, token_ids) -> np.ndarray:
        """The main head's host logits (vocab,) for the token after a prompt (its last seq_len tokens); the heads
        run at `draft`."""
        token_ids = np.asarray(token_ids, dtype=np.int32).reshape(-1)[-self.window :]  # (n,)
        if self.position:
            raise RuntimeError("prefill needs an empty cache; make a new SpeculativeDecoder")
        if len(token_ids) == 0:
            raise ValueError("prefill needs a prompt of at least one token")
        return self.feed(token_ids)[-1]

    def feed(self, token_ids) -> np.ndarray:
        """Run up to K + 1 tokens at the next positions through the trunk and the main head in one pass: host
        logits (n, vocab), row i after token i. The heads run at `draft`, over the tokens kept."""
        model, be = self.model, self.model.be
        if self._states is not None:  # the last pass's kept tokens have not been through the heads yet
            self.catch_up()
        token_ids = np.asarray(token_ids, dtype=np.int32).reshape(-1)  # (n,)
        n, start = len(token_ids), self.position
        x, _ = model.blocks_forward(be.ids(token_ids), 1, n, self.trunk_rings, start)  # (n, d)
        h, _ = model.final_norm.forward(x)  # (n, d)
        main = be.to_host(model.head.forward(h))  # (n, vocab)
        self._states, self._fed_at, self.position = x, start, start + n
        return main

    def keep(self, count: int) -> None:
        """Keep the first `count` tokens of the last pass, and forget the rest."""
        if not 1 <= count <= self.position - self._fed_at:
            raise ValueError(f"the last pass fed {self.position - self._fed_at} tokens; cannot keep {count}")
        self.position = self._fed_at + count

    def kept_states(self):
        """The trunk's states (kept, d) of the last pass's kept tokens, taken once."""
        if self._states is None:
            raise RuntimeError("a draft follows a pass (feed or prefill), once")
        x, self._states = self._states[: self.position - self._fed_at], None  # (kept, d)
        return x


class SpeculativeDecoder(TrunkDecoder):
    """The trunk's rings and the mtp heads', which draft all at once from the trunk's state."""

    def __init__(self, model, stacked: bool | None = None):
        """`stacked`: the heads as one stack (draft_stack.py); by default on a host backend, not on a GPU."""
        super().__init__(model)
        config = model.config
        stacked = not model.be.on_gpu if stacked is None else stacked
        self.stack = DraftStack(model, config.seq_len + config.lookahead, config.seq_len) if stacked else None
        # otherwise the heads one by one, each with its rings: [head][layer][group]
        self.head_rings = None if stacked else [self.rings(config.head_layers) for _ in model.extra]

    def draft(self, token: int, count: int, pick: Callable[[np.ndarray], int] | None) -> tuple[list[int], np.ndarray]:
        """(count drafts, their heads' host logits (count, vocab)) for the tokens after `token`, the next one, which
        follows the last token kept: head k's draft is pick(head k's logits) (pick None: their argmax), the token k
        after `token`."""
        logits = self.head_logits()[:count]  # (count, vocab)
        if pick is None:
            return np.argmax(logits, axis=1).tolist(), logits
        return [pick(row) for row in logits], logits

    def catch_up(self) -> None:
        self.head_logits()

    def head_logits(self) -> np.ndarray:
        """The heads' host logits (K, vocab) after the last token kept of the last pass (head k's for the token
        k after the next), the heads' keys and values of every kept token joining their rings."""
        start, x = self._fed_at, self.kept_states()  # (kept, d)
        if self.stack is not None:
            return self.stack.forward(x, start)  # (K, vocab)
        return np.stack([self.model.be.to_host(head.forward(x, None, 1, x.shape[0], rings, start)[0])[-1]
                         for head, rings in zip(self.model.extra, self.head_rings)])  # (K, vocab)
