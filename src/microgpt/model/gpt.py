"""The GPT model: embedding, pre-LayerNorm blocks, final LayerNorm, untied head.

Written once against the backend contract, so it runs unchanged on every
backend. `loss_and_backward` does the forward and backward pass over a batch
(one pass, or one per shard of it where the backend runs several streams at
once) and accumulates every parameter gradient; `logits` is the forward alone;
`next_token_logits` is the same forward over the newest tokens of one sequence,
reading and extending a KV cache (`microgpt.model.decode`).
"""

from __future__ import annotations

import math
from functools import partial

import numpy as np

from microgpt.backends.base import Backend
from microgpt.config import ModelConfig
from microgpt.model.attention import Attention
from microgpt.model.layers import FeedForward, LayerNorm, Linear, layer_norm_specs, linear_specs
from microgpt.model.params import Parameters, ParameterViews, ParamSpec
from microgpt.model.rope import RopeTables


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


def shard_count(backend: Backend, batch: int) -> int:
    """How many shards the model splits a batch of `batch` sequences into: one per backend stream, at most one
    per sequence (see GPT.loss_and_backward)."""
    return max(1, min(backend.streams, batch))


class Block:
    """x + Attn(LN1(x)), then x + FFN(LN2(x))."""

    def __init__(self, backend: Backend, params: ParameterViews, name: str, config: ModelConfig, rope: RopeTables):
        self.be = backend
        self.ln1 = LayerNorm(backend, params, f"{name}.ln1")
        self.attn = Attention(backend, params, f"{name}.attn", config.head_dims, rope)
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

    def backward(self, dout, saved, batch: int, seq_len: int):
        ln1_saved, attn_saved, ln2_saved, ff_saved = saved
        d_after_attn = self.ln2.backward(self.ff.backward(dout, ff_saved), ln2_saved)  # (B*T, d)
        self.be.add_(d_after_attn, dout)
        d_attn_input = self.attn.backward(d_after_attn, attn_saved, batch, seq_len)  # (B*T, d)
        dx = self.ln1.backward(d_attn_input, ln1_saved)  # (B*T, d)
        self.be.add_(dx, d_after_attn)
        return dx


class Layers:
    """The model's layers bound to one set of gradient buffers, and the passes through them.

    They read the weights of `views.value` and add their gradients into `views.gradient`: a GPT's own
    layers add into params.grad; when a batch is split over the backend's streams, each shard runs on a
    Layers of its own over the same weights, adding into its row of the shard gradient buffer.
    """

    def __init__(self, backend: Backend, config: ModelConfig, rope: RopeTables, views: ParameterViews):
        self.be, self.config = backend, config
        self.tok_emb = views.value["tok_emb"]
        self.d_tok_emb = views.gradient["tok_emb"]
        self.blocks = [Block(backend, views, f"blocks.{i}", config, rope) for i in range(config.n_layers)]
        self.final_norm = LayerNorm(backend, views, "final_norm")
        self.head = Linear(backend, views, "head")

    def blocks_forward(self, ids, batch: int, seq_len: int, caches=None, start: int = 0):
        """The last block's output (B*T, d) for device ids (B*T,), and what each block saved.

        caches: None, or one KV cache per layer; it and start are as in Attention.forward.
        """
        x = self.be.embedding_gather(self.tok_emb, ids, batch * seq_len, self.config.d_model)  # (B*T, d)
        block_saved = []
        for layer, block in enumerate(self.blocks):
            cache = None if caches is None else caches[layer]
            x, saved = block.forward(x, batch, seq_len, cache, start)  # (B*T, d)
            block_saved.append(saved)
        return x, block_saved

    def forward(self, ids, batch: int, seq_len: int):
        """Logits (B*T, vocab) for device ids (B*T,), and what backward needs."""
        x, block_saved = self.blocks_forward(ids, batch, seq_len)  # (B*T, d)
        h, norm_saved = self.final_norm.forward(x)  # (B*T, d)
        logits = self.head.forward(h)  # (B*T, vocab)
        return logits, (h, norm_saved, block_saved)

    def check_ids(self, ids: np.ndarray) -> tuple[int, int]:
        if ids.ndim != 2:
            raise ValueError(f"token ids must be (batch, seq_len), got shape {ids.shape}")
        batch, seq_len = ids.shape
        if not 1 <= seq_len <= self.config.seq_len:
            raise ValueError(f"sequence length {seq_len} is outside 1..{self.config.seq_len} (the model's seq_len)")
        return batch, seq_len

    def upload_windows(self, windows: np.ndarray):
        """(batch, seq_len, inputs, targets) for windows (B, T+1): one upload, then slices on the device."""
        windows = np.asarray(windows)
        batch, seq_len = self.check_ids(windows[:, :-1])
        on_device = self.be.ids(windows)  # (B, T+1)
        return batch, seq_len, on_device[:, :-1].reshape(-1), on_device[:, 1:].reshape(-1)  # (B*T,) each

    def loss(self, windows: np.ndarray) -> float:
        """Mean next-token loss of windows (B, T+1), forward only."""
        batch, seq_len, inputs, targets = self.upload_windows(windows)
        logits, _ = self.forward(inputs, batch, seq_len)  # (B*T, vocab)
        loss, _ = self.be.fused_softmax_ce_grad(logits, targets)
        return loss

    def loss_and_backward(self, windows: np.ndarray) -> float:
        """Mean next-token loss of windows (B, T+1), in one pass; adds every gradient into this Layers' buffers."""
        batch, seq_len, inputs, targets = self.upload_windows(windows)
        logits, (h, norm_saved, block_saved) = self.forward(inputs, batch, seq_len)  # logits (B*T, vocab)
        loss, dlogits = self.be.fused_softmax_ce_grad(logits, targets)  # dlogits (B*T, vocab)
        dx = self.final_norm.backward(self.head.backward(dlogits, h), norm_saved)  # (B*T, d)
        for block, saved in zip(reversed(self.blocks), reversed(block_saved)):
            dx = block.backward(dx, saved, batch, seq_len)  # (B*T, d)
        self.be.embedding_scatter_add(dx, inputs, self.d_tok_emb, batch * seq_len, self.config.d_model)
        return loss


class GPT:
    """The whole model: its parameters, its layers, and the passes over them."""

    def __init__(self, config: ModelConfig, backend: Backend, seed: int = 42):
        self.config = config
        self.be = backend
        self.params = Parameters(backend, param_specs(config))
        self.params.initialize(seed)
        self.rope = RopeTables(backend, config.seq_len)
        self.layers = Layers(backend, config, self.rope, ParameterViews(self.params.value, self.params.gradient))
        self._shard_grads = None  # (shards, total): each shard's gradient when a batch is split, made on first use
        self._shard_layers: list[Layers] = []  # the layers that run the shards, adding into rows of _shard_grads

    @property
    def n_params(self) -> int:
        return self.params.total

    def next_token_logits(self, token_ids: np.ndarray, caches, start: int):
        """Backend logits (1, vocab) for the token after host token_ids (n,), the tokens at positions
        start .. start + n - 1 of one sequence whose earlier keys and values `caches` holds (one list of
        KV rings per layer, `microgpt.model.decode`); their own keys and values are added to it.

        Either start is 0 (a prompt of at most seq_len tokens) or n is 1 (one new token).
        """
        n = len(token_ids)
        if not (1 <= n <= self.config.seq_len and (start == 0 or n == 1)):
            raise ValueError(f"a cached forward takes a prompt of 1..{self.config.seq_len} tokens at position 0 "
                             f"or one token after it, got {n} tokens at position {start}")
        x, _ = self.layers.blocks_forward(self.be.ids(token_ids), 1, n, caches, start)  # (n, d)
        h, _ = self.layers.final_norm.forward(x[n - 1 :])  # (1, d): only the last token's prediction is wanted
        return self.layers.head.forward(h)  # (1, vocab)

    def logits(self, ids: np.ndarray):
        """Forward only: backend logits (B*T, vocab) for host ids (B, T)."""
        batch, seq_len = self.layers.check_ids(ids)
        logits, _ = self.layers.forward(self.be.ids(ids.reshape(-1)), batch, seq_len)  # (B*T, vocab)
        return logits

    def _shards(self, windows: np.ndarray) -> list[np.ndarray]:
        """windows (B, T+1) as contiguous shards of sequences, one per backend stream (at most B)."""
        count = shard_count(self.be, len(windows))
        return np.array_split(windows, count) if count > 1 else [windows]

    def _layers_for_shards(self, count: int) -> list[Layers]:
        """Layers for count shards, each adding into its row of _shard_grads (made for count rows when another
        count is asked for), zeroed here."""
        if self._shard_grads is None or self._shard_grads.shape[0] != count:
            self._shard_grads = self.be.zeros((count, self.params.total))  # (shards, total)
            self._shard_layers = [
                Layers(self.be, self.config, self.rope,
                       ParameterViews(self.params.value, self.params.gradient_views(self._shard_grads[i : i + 1])))
                for i in range(count)
            ]
        else:
            self.be.zero_(self._shard_grads)
        return self._shard_layers

    def loss(self, windows: np.ndarray) -> float:
        """Mean next-token loss of windows (B, T+1), forward only (its shards at once, as in loss_and_backward)."""
        windows = np.asarray(windows)
        shards = self._shards(windows)
        if len(shards) == 1:
            return self.layers.loss(windows)
        losses = self.be.run_streams([partial(self.layers.loss, shard) for shard in shards])
        return _weighted_mean(losses, shards)

    def loss_and_backward(self, windows: np.ndarray) -> float:
        """Mean next-token loss of windows (B, T+1); adds every parameter gradient into params.grad.

        On a backend with several streams (the cpu backend: one per thread) the batch is split into a shard
        of sequences per stream, and the shards run at once, each through layers that add its gradient into
        a buffer of its own. Their mean losses and gradients are then combined, weighted by their shares of
        the sequences, in shard order: the batch's mean, summed in another order than one pass would sum it
        (so the same seed and thread count give the same bits, another thread count agrees to rounding).
        """
        windows = np.asarray(windows)
        shards = self._shards(windows)
        if len(shards) == 1:
            return self.layers.loss_and_backward(windows)
        layers = self._layers_for_shards(len(shards))
        losses = self.be.run_streams([partial(shard_layers.loss_and_backward, shard)
                                      for shard_layers, shard in zip(layers, shards)])
        weights = [len(shard) / len(windows) for shard in shards]
        self.be.add_weighted_(self.params.grad, self._shard_grads, weights)
        return _weighted_mean(losses, shards)

    def gradients(self, windows: np.ndarray) -> float:
        """Zero the gradients and take one forward/backward into params.grad; returns the loss.

        A NaN or infinite loss raises NonFiniteLoss, so no update follows and the weights stay as they were.
        """
        self.params.zero_grad()
        loss = self.loss_and_backward(windows)
        if not math.isfinite(loss):
            raise NonFiniteLoss(loss, self.params.step + 1)
        return loss

    def train_step(self, windows: np.ndarray, lr: float) -> float:
        """`gradients`, then one Adam step at lr; returns the loss (before the step)."""
        loss = self.gradients(windows)
        self.params.adam_step(lr)
        return loss


def _weighted_mean(losses: list[float], shards: list[np.ndarray]) -> float:
    """The batch's mean loss from its shards' means, each weighted by its share of the sequences, in order."""
    total = sum(len(shard) for shard in shards)
    return sum(loss * (len(shard) / total) for loss, shard in zip(losses, shards))


class NonFiniteLoss(ArithmeticError):
    def __init__(self, loss: float, step: int):
        super().__init__(f"the loss became {loss} at step {step}; the weights are kept as they were before it")
        self.loss, self.step = loss, step
