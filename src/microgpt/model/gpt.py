"""The GPT model: embedding, pre-LayerNorm blocks, final LayerNorm, untied head.

Written once against the backend contract, so it runs unchanged on every
backend. `loss_and_backward` does one forward and backward pass over a batch
and accumulates every parameter gradient; `logits` is the forward alone.
"""

from __future__ import annotations

import math

import numpy as np

from microgpt.backends.base import Backend
from microgpt.config import ModelConfig
from microgpt.model.attention import Attention
from microgpt.model.layers import FeedForward, LayerNorm, Linear, layer_norm_specs, linear_specs
from microgpt.model.params import Parameters, ParamSpec
from microgpt.model.rope import rope_tables


def param_specs(config: ModelConfig) -> list[ParamSpec]:
    """Every parameter, in checkpoint order, with its checkpoint shape and init."""
    d = config.d_model
    specs = [ParamSpec("tok_emb", (config.vocab_size, d), math.sqrt(1.0 / d))]
    for i in range(config.n_layers):
        specs += layer_norm_specs(f"blocks.{i}.ln1", d)
        specs += Attention.specs(f"blocks.{i}.attn", d)
        specs += layer_norm_specs(f"blocks.{i}.ln2", d)
        specs += FeedForward.specs(f"blocks.{i}.ff", d, config.d_ff)
    specs += layer_norm_specs("final_norm", d)
    specs += linear_specs("head", d, config.vocab_size)
    return specs


class RopeTables:
    """cos/sin tables on the backend, one pair per head width, grown on demand."""

    def __init__(self, backend: Backend, n_positions: int):
        self.be = backend
        self.n_positions = n_positions
        self._tables: dict[int, tuple] = {}

    def tables(self, width: int, n_positions: int, first_position: int = 0):
        """(cos, sin), each (n_positions, width), for positions first_position onwards."""
        end = first_position + n_positions
        if width not in self._tables or self._tables[width][0].shape[0] < end:
            if end > self.n_positions:  # grow by doubling, so generating N tokens rebuilds O(log N) times
                self.n_positions = max(end, 2 * self.n_positions)
            cos, sin = rope_tables(width, self.n_positions)
            self._tables[width] = (self.be.from_host(cos), self.be.from_host(sin))
        cos, sin = self._tables[width]
        return cos[first_position:end], sin[first_position:end]


class Block:
    """x + Attn(LN1(x)), then x + FFN(LN2(x))."""

    def __init__(self, backend: Backend, params: Parameters, name: str, config: ModelConfig, rope: RopeTables):
        self.be = backend
        self.ln1 = LayerNorm(backend, params, f"{name}.ln1")
        self.attn = Attention(backend, params, f"{name}.attn", config.head_dims, rope)
        self.ln2 = LayerNorm(backend, params, f"{name}.ln2")
        self.ff = FeedForward(backend, params, f"{name}.ff")

    def forward(self, x, batch: int, seq_len: int):
        a_in, ln1_saved = self.ln1.forward(x)
        a_out, attn_saved = self.attn.forward(a_in, batch, seq_len)
        mid = self.be.add(x, a_out)
        f_in, ln2_saved = self.ln2.forward(mid)
        f_out, ff_saved = self.ff.forward(f_in)
        out = self.be.add(mid, f_out)
        return out, (ln1_saved, attn_saved, ln2_saved, ff_saved)

    def backward(self, dout, saved, batch: int, seq_len: int):
        ln1_saved, attn_saved, ln2_saved, ff_saved = saved
        dmid = self.ln2.backward(self.ff.backward(dout, ff_saved), ln2_saved)
        self.be.add_(dmid, dout)
        dx = self.ln1.backward(self.attn.backward(dmid, attn_saved, batch, seq_len), ln1_saved)
        self.be.add_(dx, dmid)
        return dx


class GPT:
    def __init__(self, config: ModelConfig, backend: Backend, seed: int = 42):
        self.config = config
        self.be = backend
        self.params = Parameters(backend, param_specs(config))
        self.params.initialize(seed)
        self.rope = RopeTables(backend, config.seq_len)
        self.tok_emb = self.params.value["tok_emb"]
        self.d_tok_emb = self.params.gradient["tok_emb"]
        self.blocks = [Block(backend, self.params, f"blocks.{i}", config, self.rope) for i in range(config.n_layers)]
        self.final_norm = LayerNorm(backend, self.params, "final_norm")
        self.head = Linear(backend, self.params, "head")

    @property
    def n_params(self) -> int:
        return self.params.total

    def _check_ids(self, ids: np.ndarray) -> tuple[int, int]:
        if ids.ndim != 2:
            raise ValueError(f"token ids must be (batch, seq_len), got shape {ids.shape}")
        batch, seq_len = ids.shape
        if not 1 <= seq_len <= self.config.seq_len:
            raise ValueError(f"sequence length {seq_len} is outside 1..{self.config.seq_len} (the model's seq_len)")
        return batch, seq_len

    def _forward(self, ids, batch: int, seq_len: int):
        """Logits (B*T, vocab) for device ids (B*T,), and what backward needs."""
        d = self.config.d_model
        x = self.be.embedding_gather(self.tok_emb, ids, batch * seq_len, d)  # (B*T, d)
        block_saved = []
        for block in self.blocks:
            x, saved = block.forward(x, batch, seq_len)
            block_saved.append(saved)
        h, norm_saved = self.final_norm.forward(x)
        logits = self.head.forward(h)  # (B*T, vocab)
        return logits, (h, norm_saved, block_saved)

    def logits(self, ids: np.ndarray):
        """Forward only: backend logits (B*T, vocab) for host ids (B, T)."""
        batch, seq_len = self._check_ids(ids)
        logits, _ = self._forward(self.be.ids(ids.reshape(-1)), batch, seq_len)
        return logits

    def _upload_windows(self, windows: np.ndarray):
        """(batch, seq_len, inputs, targets) for windows (B, T+1): one upload, then slices on the device."""
        windows = np.asarray(windows)
        batch, seq_len = self._check_ids(windows[:, :-1])
        on_device = self.be.ids(windows)  # (B, T+1)
        return batch, seq_len, on_device[:, :-1].reshape(-1), on_device[:, 1:].reshape(-1)  # (B*T,) each

    def loss(self, windows: np.ndarray) -> float:
        """Mean next-token loss of windows (B, T+1), forward only."""
        batch, seq_len, inputs, targets = self._upload_windows(windows)
        logits, _ = self._forward(inputs, batch, seq_len)
        loss, _ = self.be.fused_softmax_ce_grad(logits, targets)
        return loss

    def loss_and_backward(self, windows: np.ndarray) -> float:
        """Mean next-token loss of windows (B, T+1); adds every parameter gradient into params.grad."""
        batch, seq_len, inputs, targets = self._upload_windows(windows)
        logits, (h, norm_saved, block_saved) = self._forward(inputs, batch, seq_len)
        loss, dlogits = self.be.fused_softmax_ce_grad(logits, targets)
        dx = self.final_norm.backward(self.head.backward(dlogits, h), norm_saved)
        for block, saved in zip(reversed(self.blocks), reversed(block_saved)):
            dx = block.backward(dx, saved, batch, seq_len)
        self.be.embedding_scatter_add(dx, inputs, self.d_tok_emb, batch * seq_len, self.config.d_model)
        return loss

    def train_step(self, windows: np.ndarray, lr: float) -> float:
        """Zero the gradients, one forward/backward, one Adam step; returns the loss (before the step).

        A NaN or infinite loss raises NonFiniteLoss before the step, so the weights stay as they were.
        """
        self.params.zero_grad()
        loss = self.loss_and_backward(windows)
        if not math.isfinite(loss):
            raise NonFiniteLoss(loss, self.params.step + 1)
        self.params.adam_step(lr)
        return loss


class NonFiniteLoss(ArithmeticError):
    def __init__(self, loss: float, step: int):
        super().__init__(f"the loss became {loss} at step {step}; the weights are kept as they were before it")
        self.loss, self.step = loss, step
