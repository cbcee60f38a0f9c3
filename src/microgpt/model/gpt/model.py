"""The GPT model: embedding, pre-LayerNorm blocks, final LayerNorm, untied head.

Written once against the backend contract, so it runs unchanged on every
backend. `Layers` are the passes bound to one set of gradient buffers:
`forward` to the logits, `backward` from their gradient (so a model that mixes
logits before its loss can use it), and `loss_and_backward` with the fused
softmax cross-entropy between them. `GPT` runs them over a batch (one pass, or
one per shard of it where the backend runs several streams at once,
model/shards.py); `logits` is the forward alone; `next_token_logits` is the
same forward over the newest tokens of one sequence, reading and extending a
KV cache (decode.py); `last_logits` the last position's logits of each sequence, the last block over that
row alone (what exact evaluation scores).
"""

from __future__ import annotations

import math
from functools import partial

import numpy as np

from microgpt.backends.base import Backend
from microgpt.core.errors import NonFiniteLoss
from microgpt.model.block import Block, block_specs
from microgpt.model.gpt.config import GPTConfig
from microgpt.model.gpt.decode import Decoder
from microgpt.model.layers import LayerNorm, Linear, layer_norm_specs, linear_specs
from microgpt.model.params import Parameters, ParameterViews, ParamSpec
from microgpt.model.rope import RopeTables
from microgpt.model.shards import Sharded, shard_count


def param_specs(config: GPTConfig, prefix: str = "") -> list[ParamSpec]:
    """Every parameter, in checkpoint order, with its checkpoint shape and init, each name after `prefix`."""
    d = config.d_model
    specs = [ParamSpec(f"{prefix}tok_emb", (config.vocab_size, d), math.sqrt(1.0 / d))]
    for i in range(config.n_layers):
        specs += block_specs(f"{prefix}blocks.{i}", d, config.d_ff)
    specs += layer_norm_specs(f"{prefix}final_norm", d)
    specs += linear_specs(f"{prefix}head", d, config.vocab_size)
    return specs


class Layers:
    """The model's layers bound to one set of gradient buffers, and the passes through them.

    They read the weights of `views.value` and add their gradients into `views.gradient`: a GPT's own
    layers add into params.grad; when a batch is split over the backend's streams, each shard runs on a
    Layers of its own over the same weights, adding into its row of the shard gradient buffer
    (model/shards.py). `prefix` is the one its param_specs were made with.
    """

    def __init__(self, backend: Backend, config: GPTConfig, rope: RopeTables, views: ParameterViews,
                 prefix: str = ""):
        self.be, self.config = backend, config
        self.tok_emb = views.value[f"{prefix}tok_emb"]
        self.d_tok_emb = views.gradient[f"{prefix}tok_emb"]
        self.blocks = [Block(backend, views, f"{prefix}blocks.{i}", config.head_dims, rope)
                       for i in range(config.n_layers)]
        self.final_norm = LayerNorm(backend, views, f"{prefix}final_norm")
        self.head = Linear(backend, views, f"{prefix}head")

    def blocks_forward(self, ids, batch: int, seq_len: int, caches=None, start: int = 0, last_block: bool = True):
        """The last block's output (B*T, d) for device ids (B*T,), and what each block saved (without
        last_block: the output of the one before it, the embedding for a single block).

        caches: None, or one KV cache per layer; it and start are as in Attention.forward.
        """
        x = self.be.embedding_gather(self.tok_emb, ids, batch * seq_len, self.config.d_model)  # (B*T, d)
        block_saved = []
        for layer, block in enumerate(self.blocks if last_block else self.blocks[:-1]):
            cache = None if caches is None else caches[layer]
            x, saved = block.forward(x, batch, seq_len, cache, start)  # (B*T, d)
            block_saved.append(saved)
        return x, block_saved

    def forward(self, ids, batch: int, seq_len: int):
        """Logits (B*T, vocab) for device ids (B*T,), and what backward needs."""
        x, block_saved = self.blocks_forward(ids, batch, seq_len)  # (B*T, d)
        h, norm_saved = self.final_norm.forward(x)  # (B*T, d)
        logits = self.head.forward(h)  # (B*T, vocab)
        return logits, (ids, batch, seq_len, h, norm_saved, block_saved)

    def last_logits(self, ids, batch: int, seq_len: int):
        """Logits (B, vocab) of each sequence's last row for device ids (B*T,): the blocks before the last over
        every row, the last block, the final LayerNorm and the head over the last rows alone."""
        x, _ = self.blocks_forward(ids, batch, seq_len, last_block=False)  # (B*T, d)
        h, _ = self.final_norm.forward(self.blocks[-1].forward_last(x, batch, seq_len))  # (B, d)
        return self.head.forward(h)  # (B, vocab)

    def backward(self, dlogits, saved) -> None:
        """Every parameter gradient from dlogits (B*T, vocab), the gradient of forward's logits, added into
        this Layers' buffers."""
        ids, batch, seq_len, h, norm_saved, block_saved = saved
        dx = self.final_norm.backward(self.head.backward(dlogits, h), norm_saved)  # (B*T, d)
        self.blocks_backward(dx, ids, batch, seq_len, block_saved)

    def blocks_backward(self, dx, ids, batch: int, seq_len: int, block_saved) -> None:
        """Every block's and the embedding's gradients from dx (B*T, d), the gradient of blocks_forward's output."""
        for block, block_state in zip(reversed(self.blocks), reversed(block_saved)):
            dx = block.backward(dx, block_state, batch, seq_len)  # (B*T, d)
        self.be.embedding_scatter_add(dx, ids, self.d_tok_emb, batch * seq_len, self.config.d_model)

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

    def loss_and_backward(self, windows: np.ndarray) -> tuple[float, dict[str, float]]:
        """(mean next-token loss of windows (B, T+1), no metrics), in one pass; adds every gradient into this
        Layers' buffers."""
        batch, seq_len, inputs, targets = self.upload_windows(windows)
        logits, saved = self.forward(inputs, batch, seq_len)  # (B*T, vocab)
        loss, dlogits = self.be.fused_softmax_ce_grad(logits, targets)  # dlogits (B*T, vocab)
        self.backward(dlogits, saved)
        return loss, {}


class GPT:
    """The whole model: its parameters, its layers, and the passes over them."""

    def __init__(self, config: GPTConfig, backend: Backend, seed: int = 42):
        self.config = config
        self.be = backend
        self.params = Parameters(backend, self.specs(config))
        self.params.initialize(seed)
        self.rope = RopeTables(backend, config.seq_len)
        self.passes = Sharded(self.params, self.bind)
        self.layers = self.passes.own  # the layers adding into params.grad

    specs = staticmethod(param_specs)  # a model that extends GPT (model/lookahead) adds its parameters here

    def bind(self, views: ParameterViews) -> Layers:
        """The model's layers over the weights and gradient buffers of `views` (model/shards.py)."""
        return Layers(self.be, self.config, self.rope, views)

    @property
    def n_params(self) -> int:
        return self.params.total

    def decoder(self) -> Decoder:
        """A KV-cached decoder for one sequence (decode.py)."""
        return Decoder(self)

    def next_token_logits(self, token_ids: np.ndarray, caches, start: int):
        """Backend logits (1, vocab) for the token after host token_ids (n,), the tokens at positions
        start .. start + n - 1 of one sequence whose earlier keys and values `caches` holds (one list of
        KV rings per layer, decode.py); their own keys and values are added to it.

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

    def last_logits(self, ids: np.ndarray) -> np.ndarray:
        """Host logits (B, vocab) of the last position of each of host ids (B, T), forward only: what exact
        evaluation scores. The last block runs only those rows (Layers.last_logits), and the sequences are
        split over the backend's streams as in `loss`."""
        batch, seq_len = self.layers.check_ids(ids)
        shards = np.array_split(ids, shard_count(self.be, batch))

        def shard_logits(shard: np.ndarray) -> np.ndarray:
            logits = self.layers.last_logits(self.be.ids(shard.reshape(-1)), len(shard), seq_len)  # (b, vocab)
            return self.be.to_host(logits)

        return np.concatenate(self.be.run_streams([partial(shard_logits, shard) for shard in shards]))  # (B, vocab)

    def loss(self, windows: np.ndarray) -> float:
        """Mean next-token loss of windows (B, T+1), forward only (its shards at once, as in loss_and_backward)."""
        return self.passes.loss(windows)

    def loss_and_backward(self, windows: np.ndarray) -> tuple[float, dict[str, float]]:
        """(mean next-token loss of windows (B, T+1), no metrics); adds every parameter gradient into params.grad
        (over a shard of the sequences per backend stream, model/shards.py)."""
        return self.passes.loss_and_backward(windows)

    def gradients(self, windows: np.ndarray) -> float:
        """Zero the gradients and take one forward/backward into params.grad; returns the loss.

        A NaN or infinite loss raises NonFiniteLoss, so no update follows and the weights stay as they were.
        """
        self.params.zero_grad()
        loss, _ = self.loss_and_backward(windows)
        if not math.isfinite(loss):
            raise NonFiniteLoss(loss, self.params.step + 1)
        return loss

    def train_step(self, windows: np.ndarray, lr: float) -> float:
        """`gradients`, then one Adam step at lr (the reference's optimiser); returns the loss (before the step)."""
        loss = self.gradients(windows)
        self.params.adam_step(lr)
        return loss
