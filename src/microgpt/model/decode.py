"""Incremental decoding with a key/value cache: each new token costs O(T), not a full forward pass.

`Decoder` holds, for every layer and head group, the keys (after RoPE) and the
values of the tokens seen so far, up to the model's seq_len positions, on the
backend. `prefill` runs a prompt through one batched forward that fills the
cache; `step` runs one new token through every block, attending to the cache.
Both use the model's own layer weights and only backend ops, so the decoder runs
unchanged on every backend.

The cache covers positions 0 .. seq_len - 1 and never slides: once a context
outgrows seq_len, the model sees only its last seq_len tokens, and every hidden
state of that cropped window (from the second layer on) depends on where the
window starts, so no cached key or value stays valid. The caller then runs full
forwards over the cropped window (see `microgpt.sample`).
"""

from __future__ import annotations

import math

import numpy as np

from microgpt.backends.base import Mat
from microgpt.model.attention import merge_heads, split_heads
from microgpt.model.gpt import GPT


class Decoder:
    """Per-layer K/V caches of up to seq_len positions for one sequence, and the forward over new tokens."""

    def __init__(self, model: GPT):
        self.model = model
        self.be = model.be
        self.capacity = model.config.seq_len
        self.length = 0  # tokens held in the cache
        # keys[layer][group] and values[layer][group]: each (heads in group, seq_len, head width)
        self.keys = [[self.be.zeros((g.count, self.capacity, g.width)) for g in b.attn.groups] for b in model.blocks]
        self.values = [[self.be.zeros((g.count, self.capacity, g.width)) for g in b.attn.groups] for b in model.blocks]

    def prefill(self, token_ids) -> Mat:
        """Fill an empty cache with a prompt in one batched forward; backend logits (1, vocab) for what follows it."""
        token_ids = np.asarray(token_ids, dtype=np.int32).reshape(-1)  # (n,)
        if self.length:
            raise RuntimeError(f"prefill needs an empty cache, but it holds {self.length} tokens; make a new Decoder")
        if not 1 <= len(token_ids) <= self.capacity:
            raise ValueError(f"a prompt of {len(token_ids)} tokens does not fit the cache (1..{self.capacity})")
        return self._forward(token_ids)

    def step(self, token_id: int) -> Mat:
        """Append one token at position `length`; backend logits (1, vocab) for the token after it."""
        if self.length >= self.capacity:
            raise ValueError(f"the cache is full ({self.capacity} positions, the model's seq_len)")
        return self._forward(np.array([token_id], dtype=np.int32))

    def _forward(self, token_ids: np.ndarray):
        """Run n new tokens (positions length .. length + n - 1) through the model; logits of the last one."""
        model, be = self.model, self.be
        start, n = self.length, len(token_ids)
        x = be.embedding_gather(model.tok_emb, be.ids(token_ids), n, model.config.d_model)  # (n, d)
        for layer, block in enumerate(model.blocks):
            a_in, _ = block.ln1.forward(x)
            mid = be.add(x, self._attention(layer, a_in, start))
            f_in, _ = block.ln2.forward(mid)
            f_out, _ = block.ff.forward(f_in)
            x = be.add(mid, f_out)  # (n, d)
        self.length = start + n
        h, _ = model.final_norm.forward(x[n - 1 :])  # (1, d): only the last token's prediction is wanted
        return model.head.forward(h)  # (1, vocab)

    def _attention(self, layer: int, x, start: int):
        """Attention output (n, d) of n new rows at positions start..; either start is 0 or n is 1."""
        be, attn = self.be, self.model.blocks[layer].attn
        n = x.shape[0]
        end = start + n
        q, k, v = attn.wq.forward(x), attn.wk.forward(x), attn.wv.forward(x)  # each (n, d)
        mixed = be.zeros(x.shape)  # (n, d): the heads' outputs side by side
        for g, key_cache, value_cache in zip(attn.groups, self.keys[layer], self.values[layer]):
            cos, sin = self.model.rope.tables(g.width, n, first_position=start)
            qg, kg, vg = split_heads(q, g), split_heads(k, g), split_heads(v, g)  # each (count*n, w)
            be.rope_apply(qg, cos, sin)
            be.rope_apply(kg, cos, sin)
            key_cache[:, start:end] = kg.reshape(g.count, n, g.width)
            value_cache[:, start:end] = vg.reshape(g.count, n, g.width)
            keys, values = key_cache[:, :end].copy(), value_cache[:, :end].copy()  # each (count, end, w)
            scores = be.bmm(qg.reshape(g.count, n, g.width), keys, False, True)  # (count, n, end)
            scale = 1.0 / math.sqrt(g.width)
            if start == 0:  # a prompt: (n, n) causal blocks, as in the full forward
                probs = be.fused_attn_softmax(scores.reshape(g.count * n, n), scale)  # (count*n, n)
            else:  # one new token sees every cached position
                probs = be.softmax_rows(be.scale(scores.reshape(g.count, end), scale))  # (count, end)
            out = be.bmm(probs.reshape(g.count, n, end), values)  # (count, n, w)
            merge_heads(mixed, out, g)
        return attn.wo.forward(mixed)
