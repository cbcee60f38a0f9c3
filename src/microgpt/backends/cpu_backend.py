"""The cpu backend: the NumPy backend with its hot ops replaced by fused kernels compiled by numba.

Dense products (the d x d projections, the feed-forward, the head, and
attention's batched Q K^T and P V) stay on BLAS: in float32 the BLAS chosen
for this machine (`blas`: OpenBLAS through NumPy, as in the parent class, or
MKL's cblas_sgemm; backends/blas.py); at --precision bf16 MKL's bf16 products
(`_product`, backends/mkl_bf16.py), on the inputs rounded as the parent rounds them.
Attention's causal softmax and its backward, LayerNorm, bias + ReLU,
softmax + cross-entropy, RoPE, the embedding gather and scatter-add, the bias
gradients, Adam and AdamW, and decoding's attention over a KV cache's ring run
as numba kernels (`cpu_kernels/`), each in one thread, every reduction in a
fixed order.

The threads work on slices of the batch: the backend has one stream per thread
(`streams`), the trainer splits a batch into a slice of sequences per stream
(model/thread_split.py), and `run_streams` runs the slices at once, each calling BLAS in its own thread
(`cpu_streams.py`); `add_weighted_` then combines their gradients in a fixed
order. Adam, AdamW, the gradient combination and `zero_` run in column chunks,
one per thread, above a size threshold. So a run is bit-identical run after run for the same
thread count; another count sums the slices differently and agrees to rounding.

At bf16 the rounding of a product's input is written by the kernel that makes
it, where that is one of ours and the float32 result stays the same (bias +
ReLU, ReLU's backward, attention's softmax and its backward); LayerNorm's
output is rounded by one compiled pass after its kernel (`cpu_kernels/bf16.py`),
and kept with the ReLUs' (`rounded_outputs.py`) for every product that reads it;
every other input (the weights, the residual stream's gradients, q and k) is
rounded by that pass as a product reads it.

float32 by default; `CpuBackend(dtype=np.float64)` for gradient checks (the
kernels compile once per dtype). `threads` (default: every core) goes to
`microgpt.core.threads.set_threads`, which sets BLAS's and numba's pools together;
the backend's `threads` attribute says what it runs with.

Each kernel takes C-contiguous arrays; an op handed anything else (a strided
view) falls back to the NumPy parent, so the contract holds for every input.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from microgpt.backends import blas, mkl_bf16
from microgpt.backends.base import BackendUnavailable, check_token_ids
from microgpt.backends.bf16 import bf16_bits, check_precision
from microgpt.backends.constants import ADAM_BETA1, ADAM_BETA2, ADAM_EPS, LN_EPS
from microgpt.backends.cpu_kernels import load
from microgpt.backends.cpu_streams import StreamPool
from microgpt.backends.numpy_backend import NumpyBackend
from microgpt.backends.rounded_outputs import KeepsRoundedOutputs, RoundedOutputs
from microgpt.core.threads import set_threads
from microgpt.core.version import install_hint

# Element-wise work on arrays at least this large runs in column chunks, one per stream (Adam, AdamW and
# add_weighted_ from CHUNKED_SIZE, zero_ from ZERO_CHUNKED_SIZE): below them, handing chunks to the pool
# costs more than the work it splits; zeroing, cheaper per entry than Adam's update, needs a larger array.
CHUNKED_SIZE = 1 << 16
ZERO_CHUNKED_SIZE = 1 << 20


# Sequences at least this long run attention as two halves of the queries: the first against the first
# half of the keys only, skipping a quarter of the products' work (what it saves: docs/benchmarks.md, "The
# cpu backend's kernels"). Shorter ones gain less than the extra calls cost.
HALVES_MIN_LEN = 64


class CausalHalves(NamedTuple):
    """What causal_attention keeps for its backward: the inputs and both halves' probabilities."""

    q: Any  # (n, T, w), and k, v
    k: Any
    v: Any
    early: Any  # (n, T // 2, T // 2): the first half of the queries against the first half of the keys
    late: Any  # (n, T - T // 2, T): the other queries against every key (kept in float32 alone: their bf16
    # bits are not kept, which would add half their memory, and dV's product rounds them again)


def _check_offset(queries: int, keys: int, offset: int) -> None:
    """The softmax kernels index each row up to its query's position: it must be a key (no bounds checks there)."""
    if offset < 0 or offset + queries > keys:
        raise ValueError(f"{queries} queries at offset {offset} need at least {offset + queries} keys, got {keys}")


def _transposed(bits):
    """bits (n, rows, cols) as (n, cols, rows), a view; None stays None."""
    return None if bits is None else bits.transpose(0, 2, 1)


def _contiguous(*arrays) -> bool:
    return all(a.flags.c_contiguous for a in arrays)


class CpuBackend(KeepsRoundedOutputs, NumpyBackend):
    name = "cpu"

    def __init__(self, dtype: Any = np.float32, threads: int | None = None):
        super().__init__(dtype)
        self.kernels = load(self.dtype)  # BackendUnavailable (with the fix) when numba is missing or broken
        self.threads = set_threads(threads)
        self.streams = self.threads  # the trainer splits a batch into this many slices, run at once
        self._pool = StreamPool(self.threads)
        self.blas = blas.choose()  # float32's BLAS: MICROGPT_BLAS's, else measured once per machine
        self._rounded = RoundedOutputs(protect=True)  # at bf16, the bits our kernels wrote beside their outputs

    @classmethod
    def start(cls, threads=None):
        return cls(threads=threads)

    def use_precision(self, precision):
        """bf16 needs MKL and a processor with AMX-BF16 or AVX512-BF16: without them, one line saying which is
        missing and the fix (BackendUnavailable); never a silent fall back to fp32."""
        if check_precision(precision) == "bf16":
            reason = mkl_bf16.unavailable()
            if reason is not None:
                raise BackendUnavailable(reason)
        super().use_precision(precision)

    def keep_blas(self, name):
        """On a resume: the checkpoint's BLAS where MICROGPT_BLAS leaves the choice open and it is installed; a
        note where it is not taken."""
        if name not in blas.BLASES or name == self.blas:
            return None
        differ = "from here its losses differ from an unbroken run's in the last bits"
        if blas.requested() != "auto":
            return f"{blas.ENV} says {blas.NAMES[self.blas]}, and the checkpoint trained with {blas.NAMES[name]}: {differ}"
        if name == "mkl" and mkl_bf16.mkl_library_path() is None:
            return f"the checkpoint trained with MKL, which is not installed here, so OpenBLAS multiplies: {differ} " \
                   f"({install_hint('mkl')} to continue exactly)"
        self.blas = name
        return None

    def _product(self, a, b, out=None, accumulate=False, a_bits=None):
        """The parent's product (BLAS through NumPy) at fp32 where the BLAS is OpenBLAS; MKL's float32 product
        where it is MKL; at bf16, MKL's bf16 product of the same rounded inputs (backends/mkl_bf16.py; a_bits:
        a already rounded, by the kernel that made it), accumulated in float32; into out or a new array."""
        if self.precision == "bf16":
            def product(x, y, into, add):
                mkl_bf16.gemm_bits(self._bits(x) if a_bits is None else a_bits, self._bits(y), into, add)
        elif self.blas == "mkl" and a.dtype == b.dtype == np.float32 and (out is None or out.dtype == np.float32):
            product = mkl_bf16.sgemm
        else:
            return super()._product(a, b, out, accumulate)
        if out is not None and out.shape[-1] > 1 and out.strides[-1] != out.itemsize:  # MKL writes whole rows
            whole = self._product(a, b, a_bits=a_bits)
            np.add(out, whole, out=out) if accumulate else np.copyto(out, whole)
            return out
        if out is None:
            out = np.empty((*a.shape[:-1], b.shape[-1]), dtype=np.float32)
        product(a, b, out, accumulate)
        return out

    def _round(self, x):
        """x's bfloat16 bits in one compiled pass (a view of x's own layout: a transpose stays one), for
        KeepsRoundedOutputs' `_bits` where no kernel kept them."""
        if x.dtype != np.float32 or x.ndim not in (2, 3):
            return bf16_bits(x)
        if x.strides[-1] != x.itemsize and x.strides[-2] == x.itemsize:  # a transpose: round it as it lies
            return np.swapaxes(self._round(np.swapaxes(x, -1, -2)), -1, -2)
        bits = np.empty(x.shape, dtype=np.uint16)  # (n, rows, cols) or (rows, cols)
        self.kernels.bf16.round_words(x.view(np.uint32).reshape((-1, *x.shape[-2:])) if x.ndim == 3 else
                                      x.view(np.uint32)[None], bits.reshape((-1, *x.shape[-2:])))
        return bits

    def run_streams(self, tasks):
        return self._pool.run(tasks)

    def _over_chunks(self, total: int, work, threshold: int = CHUNKED_SIZE) -> None:
        """work(start, end) for column ranges splitting 0..total, one per stream, at once (below threshold: one
        range, here)."""
        if total < threshold:
            return work(0, total)
        self._pool.run([lambda lo=lo, hi=hi: work(lo, hi) for lo, hi in self._pool.chunks(total)])

    def finalize(self):
        super().finalize()
        self._pool.close()

    def _typed(self, value: float):
        return self.dtype.type(value)

    # ---- reductions -----------------------------------------------------------------------

    def sum_rows(self, x):
        # Above BLAS_SIZE entries the one-thread kernel loses to BLAS's multithreaded product with ones
        # (docs/benchmarks.md, "The cpu backend's kernels", times both).
        if not _contiguous(x) or x.dtype != self.dtype or x.size > self.kernels.column_sums.BLAS_SIZE:
            return super().sum_rows(x)
        out = np.empty((1, x.shape[1]), dtype=self.dtype)  # (1, cols)
        self.kernels.column_sums.column_sums(x, out)
        return out

    # ---- attention: BLAS products around fused softmax kernels, skipping the future keys' half ----

    def causal_attention(self, q, k, v, scale):
        t = q.shape[1]
        if t < HALVES_MIN_LEN or k.shape != q.shape or v.shape != q.shape or not _contiguous(q, k, v) or \
                any(a.dtype != self.dtype for a in (q, k, v)):
            return super().causal_attention(q, k, v, scale)  # short sequences, or queries against a cache (Tq < Tk)
        half = t // 2  # the first half of the queries sees only the first half of the keys
        keys_t = k.transpose(0, 2, 1)  # (n, w, T), a view
        early, early_bits = self._causal_probs(self._product(q[:, :half], keys_t[:, :, :half]), scale, 0)
        late, late_bits = self._causal_probs(self._product(q[:, half:], keys_t), scale, half)  # (n, T - half, T)
        out = np.empty_like(q)  # (n, T, w); early is (n, half, half)
        self._product(early, v[:, :half], out[:, :half], a_bits=early_bits)
        self._product(late, v, out[:, half:], a_bits=late_bits)
        return out, CausalHalves(q, k, v, early, late)

    def window_attention(self, q, keys, values, start, window, scale):
        if not _contiguous(q, keys, values) or any(a.dtype != self.dtype for a in (q, keys, values)) or \
                self.precision != "fp32":  # the kernel's products are float32's: bf16 takes the default's products
            return super().window_attention(q, keys, values, start, window, scale)
        n, capacity = q.shape[1], keys.shape[1]
        if start + n - max(0, start - window + 1) > capacity:  # as the default refuses it
            return super().window_attention(q, keys, values, start, window, scale)
        out = np.empty_like(q)  # (G, n, w)
        self.kernels.window_attention.window_attention(q, keys, values, start, window, self._typed(scale), out)
        return out

    def causal_attention_backward(self, dout, saved, scale):
        if not isinstance(saved, CausalHalves):
            return super().causal_attention_backward(dout, saved, scale)
        q, k, v, early, late = saved
        half = early.shape[1]
        dearly, dearly_bits = self._causal_probs_backward(
            early, self._product(dout[:, :half], v[:, :half].transpose(0, 2, 1)), scale, 0)  # (n, half, half)
        dlate, dlate_bits = self._causal_probs_backward(late, self._product(dout[:, half:], v.transpose(0, 2, 1)),
                                                        scale, half)  # (n, T - half, T)
        dq = np.empty_like(q)  # (n, T, w)
        self._product(dearly, k[:, :half], dq[:, :half], a_bits=dearly_bits)
        self._product(dlate, k, dq[:, half:], a_bits=dlate_bits)
        dk = self._product(dlate.transpose(0, 2, 1), q[:, half:], a_bits=_transposed(dlate_bits))  # (n, T, w)
        self._product(dearly.transpose(0, 2, 1), q[:, :half], dk[:, :half], accumulate=True,
                      a_bits=_transposed(dearly_bits))
        dv = self._product(late.transpose(0, 2, 1), dout[:, half:])  # (n, T, w)
        self._product(early.transpose(0, 2, 1), dout[:, :half], dv[:, :half], accumulate=True)
        return dq, dk, dv

    def _causal_probs(self, scores, scale, offset):
        """The causal softmax of scores (n, queries, keys) * scale, query i at position offset + i, and at bf16
        the same rounded to bfloat16 in the kernel (uint16 bits, else None): the input of P V."""
        n, queries, keys = scores.shape
        _check_offset(queries, keys, offset)
        out, bits = np.empty_like(scores), self._bits_for(scores)  # (n, queries, keys) each
        self.kernels.attention.causal_softmax(scores.reshape(n * queries, keys), self._typed(scale),
                                              out.reshape(n * queries, keys), queries, offset,
                                              None if bits is None else bits.reshape(n * queries, keys))
        return out, bits

    def _causal_probs_backward(self, probs, dprobs, scale, offset):
        """dS (n, queries, keys) for the probabilities of _causal_probs and their gradient dprobs, and at bf16
        its bfloat16 bits (as _causal_probs)."""
        n, queries, keys = probs.shape
        _check_offset(queries, keys, offset)
        rows = n * queries
        out, bits = np.empty_like(probs), self._bits_for(probs)  # (n, queries, keys) each
        self.kernels.attention.causal_softmax_backward(probs.reshape(rows, keys), dprobs.reshape(rows, keys),
                                                       self._typed(scale), out.reshape(rows, keys), queries, offset,
                                                       None if bits is None else bits.reshape(rows, keys))
        return out, bits

    def _new_bits(self, shape):
        return np.empty(shape, dtype=np.uint16)  # for KeepsRoundedOutputs

    def fused_attn_softmax(self, scores, scale):
        rows, cols = scores.shape
        if not _contiguous(scores) or scores.dtype != self.dtype or rows % cols:
            return super().fused_attn_softmax(scores, scale)
        out = np.empty_like(scores)  # (rows, T)
        self.kernels.attention.causal_softmax(scores, self._typed(scale), out, cols, 0)
        return out

    def fused_attn_softmax_backward(self, s, ds, scale):
        rows, cols = s.shape
        if not _contiguous(s, ds) or s.shape != ds.shape or s.dtype != self.dtype or rows % cols:
            return super().fused_attn_softmax_backward(s, ds, scale)
        out = np.empty_like(s)  # (rows, T)
        self.kernels.attention.causal_softmax_backward(s, ds, self._typed(scale), out, cols, 0)
        return out

    # ---- element-wise and row-wise ops ------------------------------------------------------

    def fused_bias_relu(self, x, bias):
        if not _contiguous(x, bias) or bias.shape != (1, x.shape[1]):
            return super().fused_bias_relu(x, bias)
        out, mask, bits = np.empty_like(x), np.empty_like(x), self._bits_for(x)  # (rows, cols) each
        self.kernels.relu.bias_relu_forward(x, bias, out, mask, bits)
        return self._keep_bits(out, bits), mask

    def relu_backward(self, grad, mask):
        if not _contiguous(grad, mask) or grad.shape != mask.shape:
            return super().relu_backward(grad, mask)
        out, bits = np.empty_like(grad), self._bits_for(grad)  # (rows, cols) each
        self.kernels.relu.relu_backward(grad, mask, out, bits)
        return self._keep_bits(out, bits)

    def layer_norm_forward(self, x, gamma, beta):
        if not _contiguous(x, gamma, beta):
            return super().layer_norm_forward(x, gamma, beta)
        out, norm = np.empty_like(x), np.empty_like(x)  # (rows, cols) each
        std_inv = np.empty((x.shape[0], 1), dtype=self.dtype)  # (rows, 1)
        self.kernels.layer_norm.layer_norm_forward(x, gamma, beta, self._typed(LN_EPS), out, norm, std_inv)
        # at bf16, rounded by a pass of its own: inside the kernel the rounding's loop changed how LLVM
        # vectorises the row sums, and so the float32 output's last bits at widths that are no multiple of 32
        bits = self._round(out) if self.precision == "bf16" and out.dtype == np.float32 else None  # (rows, cols)
        return self._keep_bits(out, bits), norm, std_inv

    def layer_norm_backward(self, grad, norm, std_inv, gamma):
        if not _contiguous(grad, norm, std_inv, gamma):
            return super().layer_norm_backward(grad, norm, std_inv, gamma)
        dx = np.empty_like(grad)  # (rows, cols)
        dgamma, dbeta = (np.empty((1, grad.shape[1]), dtype=self.dtype) for _ in range(2))  # (1, cols) each
        self.kernels.layer_norm.layer_norm_backward(grad, norm, std_inv, gamma, dx, dgamma, dbeta)
        return dx, dgamma, dbeta

    def fused_softmax_ce_grad(self, logits, targets):
        targets = np.ascontiguousarray(targets, dtype=np.int32)
        if not _contiguous(logits):
            return super().fused_softmax_ce_grad(logits, targets)
        dlogits = np.empty_like(logits)  # (rows, vocab)
        try:
            loss = self.kernels.cross_entropy.softmax_ce_grad(logits, targets, dlogits)
        except IndexError:  # the kernel refused a target: say which
            check_token_ids(targets[: logits.shape[0]], logits.shape[1])
            raise
        return float(loss), dlogits

    def rope_apply(self, x, cos_cache, sin_cache):
        self._rope_kernel(x, cos_cache, sin_cache, 1)

    def rope_apply_inverse(self, x, cos_cache, sin_cache):
        self._rope_kernel(x, cos_cache, sin_cache, -1)

    def _rope_kernel(self, x, cos_cache, sin_cache, sign):
        if not _contiguous(x):  # in place: a strided x must be written where it is
            return self._rope(x, cos_cache, sin_cache, sign)
        cos_cache, sin_cache = (np.ascontiguousarray(c, dtype=self.dtype) for c in (cos_cache, sin_cache))
        self.kernels.rope.rope(x, cos_cache, sin_cache, self._typed(sign))

    def embedding_gather(self, token_emb, ids, seq_len, d_model):
        ids = np.ascontiguousarray(ids[:seq_len], dtype=np.int32)
        if not _contiguous(token_emb):
            return super().embedding_gather(token_emb, ids, seq_len, d_model)
        out = np.empty((seq_len, d_model), dtype=self.dtype)  # (seq_len, d_model)
        try:
            self.kernels.embedding.gather(token_emb, ids, out)
        except IndexError:  # the kernel refused an id: say which
            check_token_ids(ids, token_emb.shape[0])
            raise
        return out

    def embedding_scatter_add(self, grad, ids, d_token_emb, seq_len, d_model):
        ids = np.ascontiguousarray(ids[:seq_len], dtype=np.int32)
        grad = np.ascontiguousarray(grad[:seq_len, :d_model])
        if not _contiguous(d_token_emb) or d_model > d_token_emb.shape[1]:
            return super().embedding_scatter_add(grad, ids, d_token_emb, seq_len, d_model)
        try:
            self.kernels.embedding.scatter_add(grad, ids, d_token_emb)
        except IndexError:  # the kernel refused an id: say which
            check_token_ids(ids, d_token_emb.shape[0])
            raise

    def adam_step(self, param, grad, m, v, lr, t):
        if not _contiguous(param, grad, m, v) or param.ndim != 2 or param.shape[0] != 1:
            return super().adam_step(param, grad, m, v, lr, t)
        step = lr / (1 - ADAM_BETA1**t)
        v_scale = 1 / (1 - ADAM_BETA2**t)
        typed = self._typed
        scalars = (typed(ADAM_BETA1), typed(1 - ADAM_BETA1), typed(ADAM_BETA2), typed(1 - ADAM_BETA2), typed(ADAM_EPS),
                   typed(step), typed(v_scale))
        self._over_chunks(param.shape[1], lambda lo, hi: self.kernels.adam.adam(
            param[:, lo:hi], grad[:, lo:hi], m[:, lo:hi], v[:, lo:hi], *scalars))

    def adamw_step(self, param, grad, m, v, decay_mask, train_mask, lr, t, beta1, beta2, weight_decay, grad_scale):
        arrays = (param, grad, m, v, decay_mask, train_mask)
        if not _contiguous(*arrays) or param.ndim != 2 or param.shape[0] != 1 or \
                any(a.shape != param.shape or a.dtype != self.dtype for a in arrays):
            return super().adamw_step(param, grad, m, v, decay_mask, train_mask, lr, t, beta1, beta2, weight_decay,
                                      grad_scale)
        typed = self._typed
        scalars = (typed(beta1), typed(1 - beta1), typed(beta2), typed(1 - beta2), typed(ADAM_EPS),
                   typed(lr / (1 - beta1**t)), typed(1 / (1 - beta2**t)), typed(lr * weight_decay), typed(grad_scale))
        self._over_chunks(param.shape[1], lambda lo, hi: self.kernels.adam.adamw(
            param[:, lo:hi], grad[:, lo:hi], m[:, lo:hi], v[:, lo:hi], decay_mask[:, lo:hi], train_mask[:, lo:hi],
            *scalars))

    def add_weighted_(self, dst, sources, weights):
        if not _contiguous(dst, sources) or dst.ndim != 2 or dst.shape[0] != 1 or sources.ndim != 2 or \
                sources.shape[1] != dst.shape[1] or len(weights) != sources.shape[0] or \
                dst.dtype != self.dtype or sources.dtype != self.dtype:
            return super().add_weighted_(dst, sources, weights)
        weights = np.asarray(weights, dtype=self.dtype)  # (k,)
        self._over_chunks(dst.shape[1], lambda lo, hi: self.kernels.weighted_sum.add_weighted(
            dst, sources, weights, lo, hi))

    def zero_(self, a):
        if not _contiguous(a):
            return super().zero_(a)
        flat = a.reshape(-1)  # a view: a is contiguous
        self._over_chunks(flat.size, lambda lo, hi: flat[lo:hi].fill(0), ZERO_CHUNKED_SIZE)
