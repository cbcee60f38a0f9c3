"""The GPT, in the order data flows: token embedding, pre-LayerNorm blocks, final LayerNorm, untied head, loss;
then the backward, the same steps in reverse.

    x = tok_emb[ids]                                         (B*T, d)
    for each block:  x = x + Attn(LN1(x));  x = x + FFN(LN2(x))
    h = LN_final(x)                                          (B*T, d)
    logits = h @ W_head + b                                  (B*T, vocab)
    loss = mean cross-entropy(logits, the next tokens)

Written once against the backend contract, so it runs unchanged on every backend. The block, its attention
and its feed-forward are model/layers.py's (the ensemble's experts and the lookahead's heads are built of the
same block); the heads' work (head groups, RoPE, the causal mask, a KV cache) is model/attention.py's `attend`,
and the RoPE tables are model/rope.py's.

The layers are bound to one set of parameter views: the weights they read and the gradient buffers they add
into (params.grad). `with_gradients` gives the same model adding into other buffers: the trainer runs each
thread's slice of a batch on one (model/thread_split.py). Besides training: `logits` (the forward alone),
`next_token_logits` (the same forward over the newest tokens of one sequence, reading and extending a KV cache,
decode.py), and `last_logits` (each sequence's last position, the last block over that row alone: what exact
evaluation scores).
"""

from __future__ import annotations

import copy
import math

import numpy as np

from microgpt.backends.base import Backend
from microgpt.core.errors import NonFiniteLoss
from microgpt.model.gpt.config import GPTConfig
from microgpt.model.gpt.decode import Decoder
from microgpt.model.layers import Block, LayerNorm, Linear, block_specs, layer_norm_specs, linear_specs
from microgpt.model.params import Parameters, ParameterViews, ParamSpec
from microgpt.model.rope import RopeTables


def param_specs(config: GPTConfig, prefix: str = "") -> list[ParamSpec]:
    """Every parameter, in checkpoint order, with its checkpoint shape and init, each name after `prefix`."""
    d = config.d_model
    specs = [ParamSpec(f"{prefix}tok_emb", (config.vocab_size, d), math.sqrt(1.0 / d))]
    for i in range(config.n_layers):
        specs += block_specs(f"{prefix}blocks.{i}", d, config.d_ff)
    specs += layer_norm_specs(f"{prefix}final_norm", d)
    specs += linear_specs(f"{prefix}head", d, config.vocab_size)
    return specs


class GPT:
    """The whole model: its parameters, its layers, and the passes through them."""

    specs = staticmethod(param_specs)  # a model that extends GPT (model/lookahead) adds its parameters here

    def __init__(self, config: GPTConfig, backend: Backend, seed: int = 42):
        self.config, self.be = config, backend
        self.params = Parameters(backend, self.specs(config))
        self.params.initialize(seed)
        self.rope = RopeTables(backend, config.seq_len)
        self.bind(self.params)

    def bind(self, views: ParameterViews) -> None:
        """Make the layers over the weights of views.value, adding their gradients into views.gradient."""
        be, config = self.be, self.config
        self.tok_emb, self.d_tok_emb = views.value["tok_emb"], views.gradient["tok_emb"]  # each (vocab, d)
        self.blocks = [Block(be, views, f"blocks.{i}", config.head_dims, self.rope) for i in range(config.n_layers)]
        self.final_norm = LayerNorm(be, views, "final_norm")
        self.head = Linear(be, views, "head")

    def with_gradients(self, views: ParameterViews) -> GPT:
        """This model over the same weights, adding its gradients into views.gradient (a thread's slice of a
        batch, model/thread_split.py)."""
        bound = copy.copy(self)
        bound.bind(views)
        return bound

    @property
    def n_params(self) -> int:
        return self.params.total

    # The forward: embedding, blocks, final LayerNorm, head, loss.

    def blocks_forward(self, ids, batch: int, seq_len: int, caches=None, start: int = 0, last_block: bool = True):
        """The last block's output (B*T, d) for device ids (B*T,), and what each block saved (without
        last_block: the output of the one before it, the embedding for a single block).

        caches: None, or one KV cache per layer; it and start are as in layers.Attention.forward.
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

    def loss(self, windows: np.ndarray) -> float:
        """Mean next-token loss of windows (B, T+1), forward only."""
        batch, seq_len, inputs, targets = self.upload_windows(windows)
        logits, _ = self.forward(inputs, batch, seq_len)  # (B*T, vocab)
        loss, _ = self.be.fused_softmax_ce_grad(logits, targets)
        return loss

    def loss_and_backward(self, windows: np.ndarray) -> tuple[float, dict[str, float]]:
        """(mean next-token loss of windows (B, T+1), no metrics), in one pass; adds every parameter gradient
        into the bound gradient buffers (params.grad)."""
        batch, seq_len, inputs, targets = self.upload_windows(windows)
        logits, saved = self.forward(inputs, batch, seq_len)  # (B*T, vocab)
        loss, dlogits = self.be.fused_softmax_ce_grad(logits, targets)  # dlogits (B*T, vocab)
        self.backward(dlogits, saved)
        return loss, {}

    # The backward: head, final LayerNorm, blocks in reverse, embedding.

    def backward(self, dlogits, saved) -> None:
        """Every parameter gradient from dlogits (B*T, vocab), the gradient of forward's logits, added into the
        bound gradient buffers."""
        ids, batch, seq_len, h, norm_saved, block_saved = saved
        dh = self.head.backward(dlogits, h)  # (B*T, d)
        dx = self.final_norm.backward(dh, norm_saved)  # (B*T, d)
        self.blocks_backward(dx, ids, batch, seq_len, block_saved)

    def blocks_backward(self, dx, ids, batch: int, seq_len: int, block_saved) -> None:
        """Every block's and the embedding's gradients from dx (B*T, d), the gradient of blocks_forward's output."""
        for block, block_state in zip(reversed(self.blocks), reversed(block_saved)):
            dx = block.backward(dx, block_state, batch, seq_len)  # (B*T, d)
        self.be.embedding_scatter_add(dx, ids, self.d_tok_emb, batch * seq_len, self.config.d_model)

    # The inputs.

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

    # The forward's other uses: logits, exact evaluation, decoding.

    def logits(self, ids: np.ndarray):
        """Forward only: backend logits (B*T, vocab) for host ids (B, T)."""
        batch, seq_len = self.check_ids(ids)
        logits, _ = self.forward(self.be.ids(ids.reshape(-1)), batch, seq_len)  # (B*T, vocab)
        return logits

    def last_logits(self, ids: np.ndarray) -> np.ndarray:
        """Host logits (B, vocab) of the last position of each of host ids (B, T), forward only: what exact
        evaluation scores. The blocks before the last run every row; the last block, the final LayerNorm and
        the head run the last rows alone (layers.Block.forward_last)."""
        batch, seq_len = self.check_ids(ids)
        x, _ = self.blocks_forward(self.be.ids(ids.reshape(-1)), batch, seq_len, last_block=False)  # (B*T, d)
        h, _ = self.final_norm.forward(self.blocks[-1].forward_last(x, batch, seq_len))  # (B, d)
        return self.be.to_host(self.head.forward(h))  # (B, vocab)

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
        x, _ = self.blocks_forward(self.be.ids(token_ids), 1, n, caches, start)  # (n, d)
        h, _ = self.final_norm.forward(x[n - 1 :])  # (1, d): only the last token's prediction is wanted
        return self.head.forward(h)  # (1, vocab)

    def decoder(self) -> Decoder:
        """A KV-cached decoder for one sequence (decode.py)."""
        return Decoder(self)

    # The reference's optimiser, for a model used without the trainer (training/ runs the real one).

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
