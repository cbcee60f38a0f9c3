"""The ensemble's incremental decoding: a KV cache per expert and the router's running state.

While the context fits in seq_len, each new token runs once through every expert (its keys and values kept
in per-layer rings, model/kv_cache.py), the prior writes its row, and the router's feature is carried on (the
stream's running sum for `global`, the embeddings' running sum for `context`, the gated sum for `gated`):
O(T) per token, and the same logits as re-running the model on the whole context. Past seq_len the model is
what it was trained to be, a window of seq_len positions whose first is position 0 (the counter prior's
rows, the routers' sums start there), which a sliding cache cannot give; so from there on the decoder
re-runs the window of the last seq_len tokens for each token, as `sample --no-cache` does.
"""

from __future__ import annotations

import numpy as np

from microgpt.backends.base import Mat
from microgpt.model.attention import head_groups
from microgpt.model.decode import Rerun
from microgpt.model.kv_cache import KVRing


class EnsembleDecoder:
    """The ensemble's decoder for one sequence."""

    def __init__(self, model):
        self.model, self.passes, self.be = model, model.passes, model.be
        self.capacity = model.config.seq_len
        self.context: list[int] = []
        self.rings = [[[KVRing(self.be, group, self.capacity) for group in head_groups(spec.head_dims)]
                       for _ in range(spec.n_layers)] for spec in model.config.experts]  # [expert][layer][group]
        self.router_state = None  # the router's running feature, made by its first call
        self.rerun: Rerun | None = None  # past seq_len: the window re-run for every token

    @property
    def consumed(self) -> int:
        return len(self.context)

    def prefill(self, token_ids) -> Mat:
        """Backend logits (1, vocab) for the token after a prompt (host ids (n,), n >= 1)."""
        token_ids = [int(t) for t in np.asarray(token_ids).reshape(-1)]
        if self.context:
            raise RuntimeError(f"prefill needs an empty context, but it holds {len(self.context)} tokens")
        if not token_ids:
            raise ValueError("prefill needs a prompt of at least one token")
        if len(token_ids) > self.capacity:
            self.rerun = Rerun(self.model)
            self.context = token_ids
            return self.rerun.prefill(token_ids)
        self.context = token_ids
        return self._forward(token_ids, start=0)

    def step(self, token_id: int) -> Mat:
        """Append one token; backend logits (1, vocab) for the token after it."""
        self.context.append(int(token_id))
        if self.rerun is None and len(self.context) > self.capacity:
            self.rerun = Rerun(self.model)
            self.rerun.context = self.context[:-1]
        if self.rerun is not None:
            return self.rerun.step(token_id)
        return self._forward([int(token_id)], start=len(self.context) - 1)

    def _forward(self, new: list[int], start: int) -> Mat:
        """Run the new tokens (positions start .. start + n - 1) through the prior, the experts and the router."""
        be, passes, config = self.be, self.passes, self.model.config
        n = len(new)
        ids = be.ids(np.array(new, dtype=np.int32))  # (n,)
        stream = be.zeros((n, config.stream_dim))  # (n, B)
        if passes.prior_writes():
            prior_write, _ = passes.prior.write_rows(np.array(self.context, dtype=np.int64), start, ids,
                                                     on=passes.prior_on())
            stream = be.add(stream, prior_write)
            passes._narrow(stream)
        expert_logits = []
        for expert, rings in zip(passes.experts, self.rings):
            logits, write = expert.step(ids, stream, rings, start)
            stream = be.add(stream, write)
            passes._narrow(stream)
            expert_logits.append(logits)
        weights, self.router_state = passes.router.running(np.array(new), stream, self.router_state)  # (n, k)
        last = be.from_host(weights[-1:])  # (1, k): only the last token's prediction is wanted
        mixed = be.zeros((1, config.vocab_size))
        for k, logits in enumerate(expert_logits):
            be.add_(mixed, logits[n - 1 :] * last[:, k : k + 1])
        return mixed  # (1, V)
