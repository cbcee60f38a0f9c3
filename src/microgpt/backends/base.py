"""The backend contract, in two parts: what training needs, and the rest of the reference's API.

`Backend` is what the model, trainer and tools call: plumbing to move data in
and out (`zeros`, `from_host`, `to_host`, `ids`, `zero_`, `sum_rows`), the
products (`matmul`, `matmul_into`, the 3-D batched `bmm`), and the row,
element-wise, embedding and optimiser ops of docs/ops.md (`add_` and `scale_`
are the in-place twins of `add!` and `scale!` there). A new backend implements
its abstract methods and can train. The fused ops, `causal_attention` and
`gap_attention` (ours: attention that hides the positions right after each
query, for fill-in-the-middle heads) and `window_attention` (ours: new queries
against a KV cache's ring, each over its own window) have default implementations built from
the separate ones, to be fused later (`attention_memory` says what a backend's
attention keeps, for the memory estimate);
`adamw_step` (ours, not the reference's: the optimiser of training/optim.py beyond the
reference's Adam) has a default that computes on the host. `streams`,
`run_streams` and `add_weighted_` (also ours) let a backend run the threads' slices
of a batch at once (the cpu backend, one per thread); by default there is one stream.
The classmethod `start(threads)` makes a ready backend for a run, and `on_gpu`
says whether it computes on a GPU, so a caller needs no backend's name.

`ReferenceAPI` holds the operations of the reference's CuBLASBackend that
nothing here calls (`release`, `transpose`, the list-based `batched_matmul` and
its `stack`, the single-block `causal_mask`). The numpy and cuda backends keep
them so code written against the reference API runs on them; a new backend may
leave them out. The reference's raw device memory and cuBLAS handle
(`device_ops`) live on the cuda backend alone.

A "Mat" is the backend's native 2-D array (numpy.ndarray, cupy.ndarray).
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from microgpt.backends.adamw import adamw_update
from microgpt.backends.bf16 import check_precision
from microgpt.backends.constants import MASKED_SCORE
from microgpt.core.errors import DataError

Mat = Any  # the backend's native array type

# Copy kinds of the reference's gpu_upload / gpu_download.
HostToDevice = 1
DeviceToHost = 2
DeviceToDevice = 3


class BackendUnavailable(RuntimeError):
    """A backend cannot be used here (a missing package or device); the message says which and how to fix it."""


def check_token_ids(ids, rows: int) -> None:
    """A DataError naming the first of `ids` (host integers) that is no row of a (rows, ...) table: a token id
    outside the model's vocabulary, which the embedding and loss ops refuse rather than index with."""
    ids = np.asarray(ids)
    outside = (ids < 0) | (ids >= rows)
    if outside.any():
        raise DataError(f"token id {ids[outside][0]} is outside the model's vocabulary of {rows} (ids 0 to "
                        f"{rows - 1}): it was not made by the model's tokenizer; encode the text with that tokenizer")


class Backend(abc.ABC):
    """What training needs. Subclasses set `name` and `dtype` and implement every abstract method."""

    name: str = "abstract"
    dtype: np.dtype
    on_gpu: bool = False  # computes on a GPU: with several processes, each first takes its own

    precision: str = "fp32"  # of the matrix products' inputs (backends/bf16.py); set by `use_precision`
    blas: str | None = None  # the library of the float32 products where a backend chooses one (backends/blas.py)

    def keep_blas(self, name: str | None) -> str | None:
        """On a resume: multiply with `name`, the BLAS the checkpoint trained with (None: it recorded none),
        where this backend can; a note saying why not where it cannot, else None. This default has no choice."""
        return None

    def use_precision(self, precision: str) -> None:
        """Round the inputs of every matrix product (matmul, matmul_into, bmm and the attention products) to
        `precision`, accumulating in float32; everything else stays float32. This default has fp32 only and
        refuses another in one line (BackendUnavailable); a backend that has bf16 overrides it."""
        if check_precision(precision) != "fp32":
            raise BackendUnavailable(f"--precision {precision} on the {self.name} backend is not built yet; train at "
                                     f"--precision fp32 here, or at {precision} with --backend cpu or numpy")
        self.precision = precision

    @classmethod
    def start(cls, threads: int | None = None) -> Backend:
        """A ready backend with its defaults, for a run. `threads` is for a backend that computes on the CPU
        (its BLAS and kernel threads; None: `microgpt.core.threads.default_threads()`); this default ignores it."""
        return cls()

    # ---- plumbing -------------------------------------------------------------------------

    @abc.abstractmethod
    def zeros(self, shape: tuple[int, ...]) -> Mat:
        """New zero-filled array of the backend's dtype."""

    @abc.abstractmethod
    def from_host(self, array: np.ndarray) -> Mat:
        """Copy a host (NumPy) array into a new native array of the backend's dtype."""

    @abc.abstractmethod
    def to_host(self, a: Mat) -> np.ndarray:
        """Copy a native array back to a new NumPy array."""

    @abc.abstractmethod
    def ids(self, token_ids: np.ndarray) -> Any:
        """Token ids (any integer array) in the form the embedding and loss ops take (int32, on the device)."""

    @abc.abstractmethod
    def zero_(self, a: Mat) -> None:
        """In place: a[...] = 0."""

    @abc.abstractmethod
    def sum_rows(self, x: Mat) -> Mat:
        """New (1, cols): the column sums of x over its rows (a bias gradient)."""

    @abc.abstractmethod
    def bmm(self, a: Mat, b: Mat, transpose_a: bool = False, transpose_b: bool = False) -> Mat:
        """New (batch, m, n) = op(a[i]) @ op(b[i]) for 3-D a and b, in one call."""

    # ---- linear algebra -------------------------------------------------------------------

    @abc.abstractmethod
    def matmul(self, a: Mat, b: Mat, transpose_a: bool = False, transpose_b: bool = False) -> Mat:
        """New op(a) @ op(b); a clear error on a shape mismatch."""

    @abc.abstractmethod
    def matmul_into(
        self, a: Mat, b: Mat, dst: Mat, transpose_a: bool = False, transpose_b: bool = False,
        accumulate: bool = False,
    ) -> None:
        """dst[...] = op(a) @ op(b) (or dst += with accumulate), no allocation."""


    @abc.abstractmethod
    def add(self, a: Mat, b: Mat) -> Mat:
        """New a + b."""

    @abc.abstractmethod
    def add_(self, a: Mat, b: Mat) -> None:
        """In place a += b."""

    @abc.abstractmethod
    def scale(self, a: Mat, s: float) -> Mat:
        """New a * s."""

    @abc.abstractmethod
    def scale_(self, a: Mat, s: float) -> None:
        """In place a *= s."""


    # ---- element-wise and reductions ------------------------------------------------------

    @abc.abstractmethod
    def softmax_rows(self, x: Mat) -> Mat:
        """New row-wise softmax, max-subtracted."""

    @abc.abstractmethod
    def softmax_backward(self, s: Mat, ds: Mat) -> Mat:
        """New s * (ds - rowsum(ds * s))."""


    @abc.abstractmethod
    def causal_mask_batched(self, scores: Mat, seq_len: int) -> None:
        """In place, rows are stacked blocks: with p = i % seq_len, scores[i, j] = -1e9 for j > p."""

    @abc.abstractmethod
    def bias_add(self, data: Mat, bias: Mat) -> None:
        """In place data[i, j] += bias[0, j]."""

    @abc.abstractmethod
    def relu_forward(self, x: Mat) -> tuple[Mat, Mat]:
        """(max(x, 0), mask) with mask 1.0 where x > 0 else 0.0."""

    @abc.abstractmethod
    def relu_backward(self, grad: Mat, mask: Mat) -> Mat:
        """New grad * mask."""

    @abc.abstractmethod
    def layer_norm_forward(self, x: Mat, gamma: Mat, beta: Mat) -> tuple[Mat, Mat, Mat]:
        """(out, norm, std_inv): eps 1e-5, biased variance per row; std_inv is (rows, 1)."""

    @abc.abstractmethod
    def layer_norm_backward(self, grad: Mat, norm: Mat, std_inv: Mat, gamma: Mat) -> tuple[Mat, Mat, Mat]:
        """(dx, dgamma, dbeta); dgamma and dbeta are (1, cols), summed over rows."""

    @abc.abstractmethod
    def adam_step(self, param: Mat, grad: Mat, m: Mat, v: Mat, lr: float, t: int) -> None:
        """In place Adam with bias correction (beta1 0.9, beta2 0.999, eps 1e-8, t from 1)."""

    @abc.abstractmethod
    def rope_apply(self, x: Mat, cos_cache: Mat, sin_cache: Mat) -> None:
        """In place rotary embedding of a (rows, dim) head slice; row r uses cache row r % n."""

    @abc.abstractmethod
    def rope_apply_inverse(self, x: Mat, cos_cache: Mat, sin_cache: Mat) -> None:
        """In place inverse rotation (the backward of rope_apply)."""

    @abc.abstractmethod
    def fused_softmax_ce_grad(self, logits: Mat, targets: Any) -> tuple[float, Mat]:
        """(mean cross-entropy, dlogits) with dlogits = (softmax - onehot) / rows. A target that is no column of
        logits is never read with (as for the embedding ops below)."""

    @abc.abstractmethod
    def embedding_gather(self, token_emb: Mat, ids: Any, seq_len: int, d_model: int) -> Mat:
        """New (seq_len, d_model): row p = token_emb[ids[p]]. An id that is no row of token_emb is never read
        with: the CPU backends raise `check_token_ids`'s DataError, the cuda backend makes its row NaN."""

    @abc.abstractmethod
    def embedding_scatter_add(self, grad: Mat, ids: Any, d_token_emb: Mat, seq_len: int, d_model: int) -> None:
        """In place d_token_emb[ids[p]] += grad[p]; repeated ids accumulate. An id that is no row of d_token_emb
        is never written with: the CPU backends raise `check_token_ids`'s DataError, the cuda backend skips it."""

    # ---- fused ops with default implementations -------------------------------------------

    def fused_attn_softmax(self, scores: Mat, scale: float) -> Mat:
        """softmax_rows(causal(scores * scale)). Rows are stacked (T, T) blocks: row i is position i % cols."""
        scaled = self.scale(scores, scale)
        self.causal_mask_batched(scaled, scaled.shape[1])
        return self.softmax_rows(scaled)

    def fused_attn_softmax_backward(self, s: Mat, ds: Mat, scale: float) -> Mat:
        """softmax_backward(s, ds) * scale."""
        grad = self.softmax_backward(s, ds)
        self.scale_(grad, scale)
        return grad

    def causal_attention(self, q: Mat, k: Mat, v: Mat, scale: float) -> tuple[Mat, Any]:
        """(out, saved) for n independent heads: q (n, Tq, w), k and v (n, Tk, w) with 1 <= Tq <= Tk, query i at
        position Tk - Tq + i; out (n, Tq, w) = softmax(q k^T * scale, keys after the query's position masked) v.

        `saved` is whatever `causal_attention_backward` needs, in the backend's own form. This default
        materialises the (n, Tq, Tk) probabilities; a backend may fuse it (flash attention) instead.
        Tq = Tk is training or a prompt, Tq = 1 one query against a cache (it sees every key), and the
        Tq between a few new queries against a cache (speculative decoding); the backward is the square case's.
        """
        n, tq, tk = q.shape[0], q.shape[1], k.shape[1]
        if not 1 <= tq <= tk:
            raise ValueError(f"causal_attention: {tq} queries against {tk} keys; needs 1 <= Tq <= Tk")
        scores = self.bmm(q, k, False, True)  # (n, Tq, Tk)
        if tq == tk:
            probs = self.fused_attn_softmax(scores.reshape(n * tq, tk), scale)  # (n*T, T)
        elif tq == 1:  # the newest position sees every key
            probs = self.softmax_rows(self.scale(scores.reshape(n, tk), scale))  # (n, Tk)
        else:
            query_positions = tk - tq + np.arange(tq)[:, None]  # (Tq, 1)
            probs = self._masked_softmax(scores, scale, np.arange(tk)[None, :] > query_positions)  # (n*Tq, Tk)
        out = self.bmm(probs.reshape(n, tq, tk), v)  # (n, Tq, w)
        return out, (q, k, v, probs)

    def causal_attention_backward(self, dout: Mat, saved: Any, scale: float) -> tuple[Mat, Mat, Mat]:
        """(dq, dk, dv), each (n, T, w), for dout (n, T, w) and the square forward's `saved`."""
        q, k, v, probs = saved
        n, t, _ = q.shape
        dprobs = self.bmm(dout, v, False, True)  # (n, T, T)
        dv = self.bmm(probs.reshape(n, t, t), dout, True, False)  # (n, T, w)
        dscores = self.fused_attn_softmax_backward(probs, dprobs.reshape(n * t, t), scale).reshape(n, t, t)
        dq = self.bmm(dscores, k)  # (n, T, w)
        dk = self.bmm(dscores, q, True, False)  # (n, T, w)
        return dq, dk, dv

    def gap_attention(self, q: Mat, k: Mat, v: Mat, scale: float, gap: int) -> tuple[Mat, Any]:
        """(out, saved) for n independent heads, q, k and v each (n, T, w): query i sees key j when j <= i or
        j >= i + gap + 1, so the `gap` positions right after it (i + 1 .. i + gap) are hidden and the keys on
        both sides of them seen (fill-in-the-middle); out (n, T, w) = softmax(q k^T * scale, hidden keys
        masked) v. A query always sees itself, so no row is all masked; a gap of T - 1 or more hides every
        later key (causal attention). gap >= 1; a smaller gap or disagreeing shapes are a ValueError.

        `saved` is whatever `gap_attention_backward` needs. This default materialises the (n, T, T)
        probabilities, the hidden keys' exactly 0 (see `_masked_softmax`)."""
        _, t, _ = _gap_shapes("gap_attention", gap, q=q, k=k, v=v)
        positions = np.arange(t)
        after = positions[None, :] - positions[:, None]  # (T, T): key j's distance after query i
        return self.masked_attention(q, k, v, scale, (after >= 1) & (after <= gap))

    def gap_attention_backward(self, dout: Mat, saved: Any, scale: float, gap: int) -> tuple[Mat, Mat, Mat]:
        """(dq, dk, dv), each (n, T, w), for dout (n, T, w) and the `saved` of `gap_attention` with this scale
        and gap. This default checks gap and dout's shape and takes the mask from the saved probabilities
        (`masked_attention_backward`); a fused backend would recompute the mask."""
        _gap_shapes("gap_attention_backward", gap, dout=dout, q=saved[0])
        return self.masked_attention_backward(dout, saved, scale)

    def masked_attention(self, q: Mat, k: Mat, v: Mat, scale: float, hidden: np.ndarray) -> tuple[Mat, Any]:
        """(out, saved) for n independent heads, q, k and v each (n, T, w), under any mask: out (n, T, w) =
        softmax(q k^T * scale, the keys where the host's boolean (T, T) `hidden` is True masked) v, the same mask
        for every head. A row must see at least one key. The gap mask is one such (gap_attention); the graph's
        full and anticausal masks are others. This default materialises the (n, T, T) probabilities, the hidden
        keys' exactly 0 (see `_masked_softmax`)."""
        n, t, _ = q.shape
        probs = self._masked_softmax(self.bmm(q, k, False, True), scale, hidden)  # (n*T, T)
        out = self.bmm(probs.reshape(n, t, t), v)  # (n, T, w)
        return out, (q, k, v, probs)

    def masked_attention_backward(self, dout: Mat, saved: Any, scale: float) -> tuple[Mat, Mat, Mat]:
        """(dq, dk, dv), each (n, T, w), for dout (n, T, w) and `masked_attention`'s `saved` with this scale. The
        mask comes from the saved probabilities (0 at the hidden keys, so their scores get no gradient)."""
        q, k, v, probs = saved
        n, t, _ = q.shape
        dprobs = self.bmm(dout, v, False, True)  # (n, T, T)
        dv = self.bmm(probs.reshape(n, t, t), dout, True, False)  # (n, T, w)
        dscores = self.softmax_backward(probs, dprobs.reshape(n * t, t))  # (n*T, T)
        self.scale_(dscores, scale)
        dscores = dscores.reshape(n, t, t)  # (n, T, T)
        dq = self.bmm(dscores, k)  # (n, T, w)
        dk = self.bmm(dscores, q, True, False)  # (n, T, w)
        return dq, dk, dv

    def window_attention(self, q: Mat, keys: Mat, values: Mat, start: int, window: int, scale: float) -> Mat:
        """out (G, n, w) of G heads' queries q (G, n, w) at positions start .. start + n - 1 against a key/value
        ring (G, capacity, w) that holds position p in slot p % capacity (their own keys already written): query
        i sees the positions from max(0, start + i - window + 1) to its own, the last `window`. Decoding with a
        KV cache (model/kv_cache.py): one new token, or a few drafted ones past the window, each over its own.

        This default gathers the positions the queries see, in position order (a slice where they do not wrap,
        or all of the ring for one query that sees it whole), and runs causal_attention over them while each
        query sees all before it; past the window, one product over the union of the queries'
        windows under a band mask (MASKED_SCORE outside a query's own window, so its probability is exactly 0).
        """
        capacity, n = keys.shape[1], q.shape[1]
        first, last = max(0, start - window + 1), start + n - 1  # the oldest position any query sees, the newest
        if last - first + 1 > capacity:
            raise ValueError(f"window_attention: {n} queries at {start} see {last - first + 1} positions, but the "
                             f"ring holds {capacity}")
        held = last - first + 1  # the positions the queries see between them
        if first % capacity + held <= capacity:  # no wrap: the positions seen lie in order, one slice
            slots = slice(first % capacity, first % capacity + held)
        elif n == 1 and held == capacity:  # one query that sees the whole ring: any order of its slots does
            slots = slice(0, capacity)
        else:
            slots = np.arange(first, last + 1) % capacity  # (held,): the positions seen, in order
        held_keys, held_values = keys[:, slots].copy(), values[:, slots].copy()  # each (G, held, w), contiguous
        if n == 1 or last < window:  # every query sees every position before it
            return self.causal_attention(q, held_keys, held_values, scale)[0]
        behind = np.arange(n)[:, None] + start - first - np.arange(held)[None, :]  # (n, held): query - key
        return self.bmm(self._masked_softmax(self.bmm(q, held_keys, False, True), scale,
                                             (behind < 0) | (behind > window - 1)).reshape(q.shape[0], n, -1),
                        held_values)  # (G, n, w)

    def _masked_softmax(self, scores: Mat, scale: float, hidden: np.ndarray) -> Mat:
        """(n*Tq, Tk) softmax_rows of scores (n, Tq, Tk) * scale with MASKED_SCORE added where the host's
        boolean (Tq, Tk) `hidden` is True (the same mask for every head): a hidden key's probability is
        exactly 0 for any score far below 1e9 in size, whatever its value."""
        n, tq, tk = scores.shape
        scaled = self.scale(scores.reshape(n * tq, tk), scale)  # (n*Tq, Tk)
        mask = np.where(hidden, MASKED_SCORE, 0.0)  # (Tq, Tk)
        self.add_(scaled, self.from_host(np.tile(mask, (n, 1))))  # (n*Tq, Tk): one mask per head
        return self.softmax_rows(scaled)

    def rounded_memory(self, elements: int) -> int:
        """Elements of the backend's dtype that the bf16 bits kept beside `elements` kernel outputs take (the
        cpu and cuda backends' LayerNorm and ReLU outputs at --precision bf16, kept so the products that read
        them do not round them again; backends/rounded_outputs.py): none in this default, for the memory
        estimate."""
        return 0

    def attention_memory(self, blocks: int, seq_len: int, width: int) -> tuple[int, int]:
        """(kept, temporary), in elements, for `blocks` square (T, width) blocks (heads times sequences):
        what `causal_attention` keeps for its backward besides q, k and v, and the largest temporary
        `causal_attention_backward` makes. For a memory estimate made before anything is allocated. This
        default's: the (T, T) probabilities of every block; the scores' gradient and the softmax backward's
        temporaries, three times as many."""
        probabilities = blocks * seq_len * seq_len
        return probabilities, 3 * probabilities

    def adamw_step(self, param: Mat, grad: Mat, m: Mat, v: Mat, decay_mask: Mat, train_mask: Mat, lr: float,
                   t: int, beta1: float, beta2: float, weight_decay: float, grad_scale: float) -> None:
        """In place AdamW over flat (1, total) buffers (backends/adamw.py gives the formula): Adam with these
        betas on grad * grad_scale, and decoupled decay lr * weight_decay where decay_mask is 1; where
        train_mask is 0 the parameter is frozen and its param, m and v are left bit for bit as they were.
        `grad` is left as it was. This default runs the NumPy formula on host copies (correct on any
        backend, with a round trip per step); a backend overrides it with its own update."""
        host = [self.to_host(a) for a in (param, grad, m, v, decay_mask, train_mask)]
        adamw_update(*host, lr, t, beta1, beta2, weight_decay, grad_scale)
        for target, updated in zip((param, m, v), (host[0], host[2], host[3])):
            target[...] = self.from_host(updated)

    def fused_bias_relu(self, x: Mat, bias: Mat) -> tuple[Mat, Mat]:
        """bias_add(x, bias) then relu_forward(x); x itself is left holding x + bias."""
        self.bias_add(x, bias)
        return self.relu_forward(x)

    # ---- independent passes at once -----------------------------------------------------------

    streams: int = 1  # passes the backend can run at the same time (the cpu backend: one per thread)

    def run_streams(self, tasks: Sequence[Callable[[], Any]]) -> list[Any]:
        """Run each task (a callable doing backend work that touches no other task's arrays), at most
        `streams` at once, and return their results in order. This default runs them one after another."""
        return [task() for task in tasks]

    def add_weighted_(self, dst: Mat, sources: Mat, weights: Sequence[float]) -> None:
        """In place dst += sum_i weights[i] * sources[i], added in the order of i, for dst (1, n) and
        sources (k, n): the gradients of a batch's slices (one per stream) combined into one."""
        for i, weight in enumerate(weights):
            self.add_(dst, self.scale(sources[i : i + 1], weight))

    # ---- device -----------------------------------------------------------------------------

    @abc.abstractmethod
    def sync(self) -> None:
        """Wait for all queued device work (a no-op where there is no device)."""

    @abc.abstractmethod
    def finalize(self) -> None:
        """Free everything the backend holds; idempotent."""


def _gap_shapes(op: str, gap: int, **arrays: Mat) -> tuple[int, int, int]:
    """(n, T, w) of the first of `arrays`, after checking that gap is a whole number >= 1 and that every array
    has that one shape (n, T, w); a clear ValueError naming the op and the arrays otherwise."""
    if isinstance(gap, bool) or not isinstance(gap, (int, np.integer)) or gap < 1:
        raise ValueError(f"{op}: gap must be a whole number >= 1 (the positions hidden after each query), got {gap!r}")
    (first, shape), *others = ((name, tuple(a.shape)) for name, a in arrays.items())
    if len(shape) != 3:
        raise ValueError(f"{op}: {first} must be (n, T, w), got shape {shape}")
    for name, other in others:
        if other != shape:
            raise ValueError(f"{op}: {first} is {shape} but {name} is {other}; they must agree")
    return shape


class ReferenceAPI(abc.ABC):
    """The reference CuBLASBackend's operations that the model, trainer and tools never call, kept for
    compatibility with code written against that API. Mixed into a `Backend`, whose `bmm` it uses. Its raw
    device memory and cuBLAS handle (`device_ops`) are the cuda backend's alone, where they mean something."""

    @abc.abstractmethod
    def release(self, a: Mat) -> None:
        """Free a's device memory now (a no-op where there is no device)."""

    @abc.abstractmethod
    def transpose(self, a: Mat) -> Mat:
        """New contiguous a.T."""

    def batched_matmul(
        self, a_list: Sequence[Mat], b_list: Sequence[Mat], transpose_a: bool, transpose_b: bool
    ) -> list[Mat]:
        """List of op(a_i) @ op(b_i), computed as one batched call."""
        if len(a_list) != len(b_list):
            raise ValueError(f"batched_matmul: {len(a_list)} left matrices but {len(b_list)} right ones")
        if not a_list:
            return []
        out = self.bmm(self.stack(a_list), self.stack(b_list), transpose_a, transpose_b)
        return [out[i] for i in range(out.shape[0])]

    @abc.abstractmethod
    def stack(self, mats: Sequence[Mat]) -> Mat:
        """New (len, rows, cols) array from equally shaped matrices."""

    @abc.abstractmethod
    def causal_mask(self, scores: Mat) -> None:
        """In place: scores[i, j] = -1e9 for j > i."""


def training_ops() -> list[str]:
    """The operations of the contract (docs/ops.md) that training uses (besides `Backend`'s plumbing), in Python spelling."""
    return [
        "matmul", "matmul_into", "add", "add_", "scale", "scale_", "softmax_rows", "softmax_backward",
        "causal_mask_batched", "bias_add", "relu_forward", "relu_backward", "fused_bias_relu",
        "layer_norm_forward", "layer_norm_backward", "adam_step", "rope_apply", "rope_apply_inverse",
        "fused_attn_softmax", "fused_attn_softmax_backward", "fused_softmax_ce_grad", "embedding_gather",
        "embedding_scatter_add", "sync", "finalize",
    ]


def reference_api_ops() -> list[str]:
    """The rest of the contract: `ReferenceAPI`'s operations (its `stack` is plumbing for batched_matmul)."""
    return ["batched_matmul", "transpose", "release", "causal_mask"]


def device_ops() -> list[str]:
    """The reference's raw device memory and cuBLAS handle: on the cuda backend only (cuda/device_memory.py)."""
    return ["gpu_alloc", "gpu_free", "gpu_upload", "gpu_download", "handle"]


def contract_ops() -> list[str]:
    """Every operation name of the reference's API (docs/ops.md), in Python spelling: all three parts."""
    return training_ops() + reference_api_ops() + device_ops()


def extension_ops() -> list[str]:
    """The operations of ours beyond the reference's API that every backend has, with defaults in `Backend` (inherited or
    fused): attention, the memory estimate, AdamW and the streams that run a batch's slices."""
    return ["causal_attention", "causal_attention_backward", "gap_attention", "gap_attention_backward",
            "masked_attention", "masked_attention_backward", "window_attention", "attention_memory", "rounded_memory",
            "adamw_step", "run_streams", "add_weighted_"]
