"""A gap head's block: attention from the trunk's states to the tokens around a hidden gap, then a feed-forward.

The queries are the head's running state at each position t, which holds nothing after t (the trunk is causal
and these blocks add only what follows). The keys and values are the token embeddings themselves, one
position each, under the backend's `gap_attention` mask: a query at t sees the tokens at t and before, and at
t + gap + 1 and after. The embeddings mix no positions, so however many such blocks are stacked, the tokens at
t + 1 .. t + gap never reach position t: among them is the token the head predicts (t + 1).

    x + GapAttn(LN1(x), LN_m(memory)), then + FFN(LN2(.))
"""

from __future__ import annotations

from microgpt.backends.base import Backend
from microgpt.model.attention import attend, attend_backward, head_groups
from microgpt.model.params import ParameterViews, ParamSpec
from microgpt.model.rope import RopeTables
from microgpt.model.transformer import FeedForward, LayerNorm, Linear, layer_norm_specs, linear_specs


def gap_block_specs(name: str, d_model: int, d_ff: int) -> list[ParamSpec]:
    """A gap block's parameters, in checkpoint order."""
    attention = [s for p in ("wq", "wk", "wv", "wo") for s in linear_specs(f"{name}.attn.{p}", d_model, d_model)]
    return (layer_norm_specs(f"{name}.ln1", d_model) + layer_norm_specs(f"{name}.ln_memory", d_model) + attention
            + layer_norm_specs(f"{name}.ln2", d_model) + FeedForward.specs(f"{name}.ff", d_model, d_ff))


class GapAttention:
    """Multi-head attention of states (B*T, d) over a memory (B*T, d) under the gap mask, with RoPE on both."""

    def __init__(self, backend: Backend, params: ParameterViews, name: str, head_dims: tuple[int, ...],
                 rope: RopeTables, gap: int):
        self.be, self.rope, self.gap = backend, rope, gap
        self.wq, self.wk, self.wv, self.wo = (Linear(backend, params, f"{name}.{p}") for p in ("wq", "wk", "wv", "wo"))
        self.groups = head_groups(head_dims)

    def forward(self, x, memory, batch: int, seq_len: int):
        """(output (B*T, d), saved) for states x and memory, each (B*T, d)."""
        q, k, v = self.wq.forward(x), self.wk.forward(memory), self.wv.forward(memory)  # each (B*T, d)
        mixed, group_saved = attend(self.be, self.groups, q, k, v, batch, seq_len, self.rope, "gap",
                                    self.gap)  # (B*T, d): the heads' outputs side by side
        return self.wo.forward(mixed), (x, memory, mixed, group_saved)  # (B*T, d)

    def backward(self, dy, saved, batch: int, seq_len: int):
        """(dx, dmemory), each (B*T, d), for dy (B*T, d) and forward's `saved`."""
        x, memory, mixed, group_saved = saved
        dmixed = self.wo.backward(dy, mixed)  # (B*T, d)
        dq, dk, dv = attend_backward(self.be, self.groups, dmixed, group_saved, batch, seq_len, self.rope, "gap",
                                     self.gap)  # each (B*T, d)
        dx = self.wq.backward(dq, x)  # (B*T, d)
        dmemory = self.wk.backward(dk, memory)  # (B*T, d)
        self.be.add_(dmemory, self.wv.backward(dv, memory))
        return dx, dmemory


class GapBlock:
    """x + GapAttn(LN1(x), LN_m(memory)), then x + FFN(LN2(x))."""

    def __init__(self, backend: Backend, params: ParameterViews, name: str, head_dims: tuple[int, ...],
                 rope: RopeTables, gap: int):
        self.be = backend
        self.ln1 = LayerNorm(backend, params, f"{name}.ln1")
        self.ln_memory = LayerNorm(backend, params, f"{name}.ln_memory")
        self.attn = GapAttention(backend, params, f"{name}.attn", head_dims, rope, gap)
        self.ln2 = LayerNorm(backend, params, f"{name}.ln2")
        self.ff = FeedForward(backend, params, f"{name}.ff")

    def forward(self, x, memory, batch: int, seq_len: int):
        """(output (B*T, d), saved) for states x and memory, each (B*T, d)."""
        attn_input, ln1_saved = self.ln1.forward(x)  # (B*T, d)
        memory_input, memory_saved = self.ln_memory.forward(memory)  # (B*T, d)
        attn_output, attn_saved = self.attn.forward(attn_input, memory_input, batch, seq_len)  # (B*T, d)
        after_attn = self.be.add(x, attn_output)  # (B*T, d)
        ffn_input, ln2_saved = self.ln2.forward(after_attn)  # (B*T, d)
        ffn_output, ff_saved = self.ff.forward(ffn_input)  # (B*T, d)
        return self.be.add(after_attn, ffn_output), (ln1_saved, memory_saved, attn_saved, ln2_saved, ff_saved)

    def backward(self, dout, saved, batch: int, seq_len: int):
        """(dx, dmemory), each (B*T, d)."""
        ln1_saved, memory_saved, attn_saved, ln2_saved, ff_saved = saved
        d_after_attn = self.ln2.backward(self.ff.backward(dout, ff_saved), ln2_saved)  # (B*T, d)
        self.be.add_(d_after_attn, dout)
        d_attn_input, d_memory_input = self.attn.backward(d_after_attn, attn_saved, batch, seq_len)  # each (B*T, d)
        dx = self.ln1.backward(d_attn_input, ln1_saved)  # (B*T, d)
        self.be.add_(dx, d_after_attn)
        return dx, self.ln_memory.backward(d_memory_input, memory_saved)
