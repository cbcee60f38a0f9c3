"""Incremental decoding with a key/value cache: each new token costs O(T), not a full forward pass.

`Decoder` holds, for every layer and head group, the keys (after RoPE) and the
values of the tokens seen so far, up to the model's seq_len positions, on the
backend. `prefill` runs a prompt through one batched forward that fills the
cache; `step` runs one new token through every block, attending to the cache.
Both use the model's own layer weights and only backend ops, so the decoder runs
unchanged on every backend.

Past seq_len the cache slides: it is a ring of seq_len slots, position p
writes slot p % seq_len, and each new token attends to itself and the
seq_len - 1 tokens before it, at every layer (sliding-window attention). Keys
keep the rotation of their absolute position; RoPE scores depend only on the
distance between positions, so the window's offset does not matter. The keys
and values are the ones computed when each token arrived, so for a model of
two or more layers this differs from re-running the model on the cropped last
seq_len tokens (there, every hidden state depends on where the window starts);
for one layer, and for any model while the context fits in seq_len, the two
agree. `generate(..., use_cache=False)` is the cropped re-run.
"""

from __future__ import annotations

import math

import numpy as np

from microgpt.backends.base import Mat
from microgpt.model.attention import merge_heads, split_heads
from microgpt.model.gpt import GPT


class Decoder:
    """Per-layer K/V rings of seq_len slots for one sequence, and the forward over new tokens."""

    def __init__(self, model: GPT):
        self.model = model
        self.be = model.be
        self.capacity = model.config.seq_len
        self.position = 0  # position of the next token (the first token in the cache is position 0)
        self.consumed = 0  # context tokens accounted for, including those a long prompt had cropped
        # keys[layer][group] and values[layer][group]: each (heads in group, seq_len, head width)
        self.keys = [[self.be.zeros((g.count, self.capacity, g.width)) for g in b.attn.groups] for b in model.blocks]
        self.values = [[self.be.zeros((g.count, self.capacity, g.width)) for g in b.attn.groups] for b in model.blocks]

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
        return self._forward(np.array([token_id], dtype=np.int32))

    def _forward(self, token_ids: np.ndarray):
        """Run n new tokens (positions position .. position + n - 1) through the model; logits of the last one."""
        model, be = self.model, self.be
        start, n = self.position, len(token_ids)
        x = be.embedding_gather(model.tok_emb, be.ids(token_ids), n, model.config.d_model)  # (n, d)
        for layer, block in enumerate(model.blocks):
            a_in, _ = block.ln1.forward(x)
            mid = be.add(x, self._attention(layer, a_in, start))
            f_in, _ = block.ln2.forward(mid)
            f_out, _ = block.ff.forward(f_in)
            x = be.add(mid, f_out)  # (n, d)
        self.position = start + n
        h, _ = model.final_norm.forward(x[n - 1 :])  # (1, d): only the last token's prediction is wanted
        return model.head.forward(h)  # (1, vocab)

    def _attention(self, layer: int, x, start: int):
        """Attention output (n, d) of n new rows at positions start..; either start is 0 (a prompt) or n is 1."""
        be, attn = self.be, self.model.blocks[layer].attn
        n = x.shape[0]
        slot = start % self.capacity  # where the new rows go in the ring
        held = min(start + n, self.capacity)  # slots in use after this call
        q, k, v = attn.wq.forward(x), attn.wk.forward(x), attn.wv.forward(x)  # each (n, d)
        mixed = be.zeros(x.shape)  # (n, d): the heads' outputs side by side
        for g, key_cache, value_cache in zip(attn.groups, self.keys[layer], self.values[layer]):
            cos, sin = self.model.rope.tables(g.width, n, first_position=start)
            qg, kg, vg = split_heads(q, g), split_heads(k, g), split_heads(v, g)  # each (count*n, w)
            be.rope_apply(qg, cos, sin)
            be.rope_apply(kg, cos, sin)
            key_cache[:, slot : slot + n] = kg.reshape(g.count, n, g.width)
            value_cache[:, slot : slot + n] = vg.reshape(g.count, n, g.width)
            keys, values = key_cache[:, :held].copy(), value_cache[:, :held].copy()  # each (count, held, w)
            scores = be.bmm(qg.reshape(g.count, n, g.width), keys, False, True)  # (count, n, held)
            scale = 1.0 / math.sqrt(g.width)
            if start == 0:  # a prompt: (n, n) causal blocks, as in the full forward
                probs = be.fused_attn_softmax(scores.reshape(g.count * n, n), scale)  # (count*n, n)
            else:  # one new token sees every slot: the ring holds exactly its window, in any order
                probs = be.softmax_rows(be.scale(scores.reshape(g.count, held), scale))  # (count, held)
            out = be.bmm(probs.reshape(g.count, n, held), values)  # (count, n, w)
            merge_heads(mixed, out, g)
        return attn.wo.forward(mixed)
