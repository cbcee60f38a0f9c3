"""The GPT in one file, top-down in the order data flows: token embedding, pre-LayerNorm blocks, final LayerNorm,
untied head, loss; then the backward, the same steps in reverse. Below the GPT, the parts it is built of, each
where a reader first meets it: Block, then Attention, FeedForward, LayerNorm and Linear; last, its KV-cached
Decoder.

    x = tok_emb[ids]                                         (B*T, d)
    for each block:                                          Block
        x = x + Attn(LN1(x))                                 (B*T, d)   Attention: q, k, v (B*T, d) -> heads -> wo
        x = x + FFN(LN2(x))                                  (B*T, d)   FeedForward: (B*T, d_ff) hidden, ReLU
    h = LN_final(x)                                          (B*T, d)   LayerNorm
    logits = h @ W_head + b                                  (B*T, vocab)   Linear
    loss = mean cross-entropy(logits, the next tokens)

Written once against the backend contract, so it runs unchanged on every backend. Each layer is a
forward/backward pair bound to one set of parameter views (`ParameterViews`: the weights it reads, the gradient
buffers it adds into); `forward` returns its output and what backward needs, `backward` takes that, adds the
parameter gradients into their buffers and returns the gradient of its input. The heads' work (head groups,
RoPE, the causal mask, a KV cache) is model/attention.py's `attend`, called here as nanoGPT calls
scaled_dot_product_attention; the RoPE tables are model/rope.py's. The block and its layers are shared: the
ensemble's experts, the lookahead's heads and the graph's ops are built of them too; the gpt family
(model/gpt/) is this GPT with its settings.

`with_gradients` gives the same model adding into other buffers: the trainer runs each thread's slice of a batch
on one (model/thread_split.py). Besides training: `logits` (the forward alone), `next_token_logits` (the same
forward over the newest tokens of one sequence, reading and extending a KV cache, `Decoder`), and `last_logits`
(each sequence's last position, the last block over that row alone: what exact evaluation scores).
"""

from __future__ import annotations

import copy
import math

import numpy as np

from microgpt.backends.base import Backend, Mat
from microgpt.core.errors import NonFiniteLoss
from microgpt.model.attention import attend, attend_backward, head_groups, merge_heads, split_heads
from microgpt.model.decode import CachedDecoder
from microgpt.model.kv_cache import KVRing
from microgpt.model.params import Parameters, ParameterViews, ParamSpec
from microgpt.model.rope import RopeTables


def param_specs(config, prefix: str = "") -> list[ParamSpec]:
    """Every parameter of a GPTConfig's model (model/gpt/config.py), in checkpoint order, with its checkpoint
    shape and init, each name after `prefix`."""
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

    def __init__(self, config, backend: Backend, seed: int = 42):
        """config: a GPTConfig (model/gpt/config.py)."""
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
        the head run the last rows alone (Block.forward_last)."""
        batch, seq_len = self.check_ids(ids)
        x, _ = self.blocks_forward(self.be.ids(ids.reshape(-1)), batch, seq_len, last_block=False)  # (B*T, d)
        h, _ = self.final_norm.forward(self.blocks[-1].forward_last(x, batch, seq_len))  # (B, d)
        return self.be.to_host(self.head.forward(h))  # (B, vocab)

    def next_token_logits(self, token_ids: np.ndarray, caches, start: int):
        """Backend logits (1, vocab) for the token after host token_ids (n,), the tokens at positions
        start .. start + n - 1 of one sequence whose earlier keys and values `caches` holds (one list of
        KV rings per layer, `Decoder`); their own keys and values are added to it.

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
        """A KV-cached decoder for one sequence (`Decoder`, below)."""
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
        return self.be.add(after_attn, ffn_output)  # (B, d)

    def backward(self, dout, saved, batch: int, seq_len: int):
        ln1_saved, attn_saved, ln2_saved, ff_saved = saved
        d_after_attn = self.ln2.backward(self.ff.backward(dout, ff_saved), ln2_saved)  # (B*T, d)
        self.be.add_(d_after_attn, dout)
        d_attn_input = self.attn.backward(d_after_attn, attn_saved, batch, seq_len)  # (B*T, d)
        dx = self.ln1.backward(d_attn_input, ln1_saved)  # (B*T, d)
        self.be.add_(dx, d_after_attn)
        return dx


class Attention:
    """Causal self-attention with RoPE: q, k, v projections, the heads (attention.attend), the output projection."""

    def __init__(self, backend: Backend, params: ParameterViews, name: str, head_dims: tuple[int, ...],
                 rope: RopeTables):
        self.be = backend
        self.wq, self.wk, self.wv, self.wo = (Linear(backend, params, f"{name}.{p}") for p in ("wq", "wk", "wv", "wo"))
        self.groups = head_groups(head_dims)
        self.rope = rope

    @staticmethod
    def specs(name: str, d_model: int) -> list[ParamSpec]:
        return [s for p in ("wq", "wk", "wv", "wo") for s in linear_specs(f"{name}.{p}", d_model, d_model)]

    def forward(self, x, batch: int, seq_len: int, cache=None, start: int = 0):
        """(output (B*T, d), saved) for x (B*T, d): B sequences of T rows at positions start .. start + T - 1,
        each row attending to the rows up to its own (through a KV cache, one ring per head group, where one is
        given; `attend` says how). `saved` is what `backward` needs (training only)."""
        q, k, v = self.wq.forward(x), self.wk.forward(x), self.wv.forward(x)  # each (B*T, d)
        mixed, group_saved = attend(self.be, self.groups, q, k, v, batch, seq_len, self.rope, start=start,
                                    caches=cache)  # (B*T, d): the heads' outputs side by side
        return self.wo.forward(mixed), (x, mixed, group_saved)  # (B*T, d)

    def forward_last(self, x, batch: int, seq_len: int):
        """Output (B, d) of each sequence's last row alone, for x (B*T, d) at positions 0 .. T - 1 (forward
        only): keys and values from every row, the query from the last, attending to all of them (the
        backend's window_attention over the sequence as a ring of T slots)."""
        be, T = self.be, seq_len
        last = x.reshape(batch, T, -1)[:, T - 1].copy()  # (B, d)
        q, k, v = self.wq.forward(last), self.wk.forward(x), self.wv.forward(x)  # (B, d), (B*T, d) x2
        mixed = be.zeros(last.shape)  # (B, d)
        for g in self.groups:
            n, w = g.count * batch, g.width
            cos, sin = self.rope.tables(w, T)  # each (T, w)
            q_heads, k_heads, v_heads = split_heads(q, g), split_heads(k, g), split_heads(v, g)  # (n, w), (n*T, w) x2
            be.rope_apply(q_heads, cos[T - 1 :], sin[T - 1 :])
            be.rope_apply(k_heads, cos, sin)
            out = be.window_attention(q_heads.reshape(n, 1, w), k_heads.reshape(n, T, w), v_heads.reshape(n, T, w),
                                      T - 1, T, 1.0 / math.sqrt(w))  # (n, 1, w)
            merge_heads(mixed, out, g)
        return self.wo.forward(mixed)  # (B, d)

    def backward(self, dy, saved, batch: int, seq_len: int):
        """dx (B*T, d) for dy (B*T, d) and forward's `saved` (a training forward: no cache, start 0)."""
        x, mixed, group_saved = saved
        dmixed = self.wo.backward(dy, mixed)  # (B*T, d)
        dq, dk, dv = attend_backward(self.be, self.groups, dmixed, group_saved, batch, seq_len, self.rope)  # each (B*T, d)
        dx = self.wq.backward(dq, x)  # (B*T, d)
        be = self.be
        be.add_(dx, self.wk.backward(dk, x))
        be.add_(dx, self.wv.backward(dv, x))
        return dx


class FeedForward:
    """Linear(d, d_ff) -> ReLU -> Linear(d_ff, d)."""

    def __init__(self, backend: Backend, params: ParameterViews, name: str):
        self.be = backend
        self.l1 = Linear(backend, params, f"{name}.l1")
        self.l2 = Linear(backend, params, f"{name}.l2")

    @staticmethod
    def specs(name: str, d_model: int, d_ff: int) -> list[ParamSpec]:
        return linear_specs(f"{name}.l1", d_model, d_ff) + linear_specs(f"{name}.l2", d_ff, d_model)

    def forward(self, x):
        pre_activation = self.be.matmul(x, self.l1.w)  # (rows, d_ff)
        hidden, mask = self.be.fused_bias_relu(pre_activation, self.l1.b)  # each (rows, d_ff)
        out = self.l2.forward(hidden)  # (rows, d_model)
        return out, (x, hidden, mask)

    def backward(self, dy, saved):
        x, hidden, mask = saved
        dhidden = self.l2.backward(dy, hidden)  # (rows, d_ff)
        dpre_activation = self.be.relu_backward(dhidden, mask)  # (rows, d_ff)
        dx = self.l1.backward(dpre_activation, x)  # (rows, d_model)
        return dx


def layer_norm_specs(name: str, d: int) -> list[ParamSpec]:
    """gamma 1, beta 0."""
    return [ParamSpec(f"{name}.gamma", (d,), 0.0, 1.0), ParamSpec(f"{name}.beta", (d,), 0.0)]


class LayerNorm:
    """(x - mean) / std * gamma + beta, over each row's d features."""

    def __init__(self, backend: Backend, params: ParameterViews, name: str):
        self.be = backend
        self.gamma, self.beta = params.value[f"{name}.gamma"], params.value[f"{name}.beta"]
        self.dgamma, self.dbeta = params.gradient[f"{name}.gamma"], params.gradient[f"{name}.beta"]

    def forward(self, x):
        out, norm, std_inv = self.be.layer_norm_forward(x, self.gamma, self.beta)  # (rows, d) x2, (rows, 1)
        return out, (norm, std_inv)

    def backward(self, dy, saved):
        norm, std_inv = saved
        dx, dgamma, dbeta = self.be.layer_norm_backward(dy, norm, std_inv, self.gamma)  # (rows, d), (1, d) x2
        self.be.add_(self.dgamma, dgamma)
        self.be.add_(self.dbeta, dbeta)
        return dx


def linear_specs(name: str, d_in: int, d_out: int) -> list[ParamSpec]:
    """Weights (d_in, d_out) ~ N(0, 2/d_in), which weight decay applies to; bias zero."""
    return [ParamSpec(f"{name}.w", (d_in, d_out), math.sqrt(2.0 / d_in), decay=True),
            ParamSpec(f"{name}.b", (d_out,), 0.0)]


class Linear:
    """y = x @ w + b."""

    def __init__(self, backend: Backend, params: ParameterViews, name: str):
        self.be = backend
        self.w, self.b = params.value[f"{name}.w"], params.value[f"{name}.b"]
        self.dw, self.db = params.gradient[f"{name}.w"], params.gradient[f"{name}.b"]

    def forward(self, x):
        y = self.be.matmul(x, self.w)  # (rows, d_out)
        self.be.bias_add(y, self.b)
        return y

    def backward(self, dy, x):
        """x is the forward input; returns dx."""
        self.be.matmul_into(x, dy, self.dw, transpose_a=True, accumulate=True)
        self.be.add_(self.db, self.be.sum_rows(dy))  # the column sums of dy: (1, d_out)
        dx = self.be.matmul(dy, self.w, transpose_b=True)  # (rows, d_in)
        return dx


class Decoder(CachedDecoder):
    """The GPT's incremental decoding with a key/value cache: each new token costs O(T), not a full forward pass.

    For every layer and head group, a `KVRing` (model/kv_cache.py) of the keys (after RoPE) and the values of the
    tokens seen so far, up to seq_len positions, on the backend. `prefill` runs a prompt through one batched
    forward that fills the cache; `step` runs one new token through every block, attending to the cache. Both are
    the model's own forward (`GPT.next_token_logits`, the same attention code as training); this class only keeps
    the rings (the position counters are model/decode.py's `CachedDecoder`).

    Past seq_len the cache slides: a ring of seq_len slots, position p writes slot p % seq_len, and each new token
    attends to itself and the seq_len - 1 tokens before it, at every layer (sliding-window attention). Keys keep
    the rotation of their absolute position; RoPE scores depend only on the distance between positions, so the
    window's offset does not matter (and the RoPE tables for a position past seq_len are made for that step
    alone, so memory stays bounded by seq_len however many tokens are generated). The keys and values are the
    ones computed when each token arrived, so for a model of two or more layers this differs from re-running the
    model on the cropped last seq_len tokens (there, every hidden state depends on where the window starts); for
    one layer, and for any model while the context fits in seq_len, the two agree. `generate(..., cache=False)`
    is the cropped re-run (model/decode.py's `Rerun`).
    """

    def __init__(self, model):
        super().__init__(model.config.seq_len)
        self.model = model
        groups = head_groups(model.config.head_dims)
        layers = range(model.config.n_layers)
        self.rings = [[KVRing(model.be, g, self.capacity) for g in groups] for _ in layers]  # [layer][group]

    def _forward(self, token_ids: np.ndarray, start: int) -> Mat:
        return self.model.next_token_logits(token_ids, self.rings, start)  # (1, vocab)

