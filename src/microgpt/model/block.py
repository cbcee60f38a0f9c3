"""The pre-LayerNorm transformer block, a forward/backward pair shared by the families, and its parameters."""

from __future__ import annotations

from microgpt.backends.base import Backend
from microgpt.model.attention import Attention
from microgpt.model.layers import FeedForward, LayerNorm, layer_norm_specs
from microgpt.model.params import ParameterViews, ParamSpec
from microgpt.model.rope import RopeTables


def block_specs(name: str, d_model: int, d_ff: int) -> list[ParamSpec]:
    """A block's parameters, in checkpoint order."""
    return (layer_norm_specs(f"{name}.ln1", d_model) + Attention.specs(f"{name}.attn", d_model)
            + layer_norm_specs(f"{name}.ln2", d_model) + FeedForward.specs(f"{name}.ff", d_model, d_ff))


class Block:
    """x + Attn(LN1(x)), then x + FFN(LN2(x))."""

    def __init__(self, backend: Backend, params: ParameterViews, name: str, head_dims: tuple[int, ...],
                 rope: RopeTables):
        self.be = backend
        self.ln1 = LayerNorm(backend, params, f"{name}.ln1")
        self.attn = Attention(backend, params, f"{name}.attn", head_dims, rope)
        self.ln2 = LayerNorm(backend, params, f"{name}.ln2")
        self.ff = FeedForward(backend, params, f"{name}.ff")

    def forward(self, x, batch: int, seq_len: int, cache=None, start: int = 0):
        """(output (B*T, d), saved) for x (B*T, d); cache and start as in Attention.forward."""
        attn_input, ln1_saved = self.ln1.forward(x)  # (B*T, d)
        attn_output, attn_saved = self.attn.forward(attn_input, batch, seq_len, cache, start)  # (B*T, d)
        after_attn = self.be.add(x, attn_output)  # (B*T, d): the residual stream between the two halves
        ffn_input, ln2_saved = self.ln2.forward(after_attn)  # (B*T, d)
        ffn_output, ff_saved = self.ff.forward(ffn_input)  # (B*T, d)
        out = self.be.add(after_attn, ffn_output)  # (B*T, d)
        return out, (ln1_saved, attn_saved, ln2_saved, ff_saved)

    def forward_last(self, x, batch: int, seq_len: int):
        """Output (B, d) of each sequence's last row alone, for x (B*T, d) (forward only; Attention.forward_last)."""
        attn_input, _ = self.ln1.forward(x)  # (B*T, d): every row's keys and values are needed
        last = x.reshape(batch, seq_len, -1)[:, seq_len - 1].copy()  # (B, d)
        after_attn = self.be.add(last, self.attn.forward_last(attn_input, batch, seq_len))  # (B, d)
        ffn_output, _ = self.ff.forward(self.ln2.forward(after_attn)[0])  # (B, d)
        return self.be.add(after_attn, ffn_output)

    def backward(self, dout, saved, batch: int, seq_len: int):
        ln1_saved, attn_saved, ln2_saved, ff_saved = saved
        d_after_attn = self.ln2.backward(self.ff.backward(dout, ff_saved), ln2_saved)  # (B*T, d)
        self.be.add_(d_after_attn, dout)
        d_attn_input = self.attn.backward(d_after_attn, attn_saved, batch, seq_len)  # (B*T, d)
        dx = self.ln1.backward(d_attn_input, ln1_saved)  # (B*T, d)
        self.be.add_(dx, d_after_attn)
        return dx
