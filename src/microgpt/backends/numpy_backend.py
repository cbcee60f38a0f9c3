"""The NumPy backend: the readable reference that defines what every op computes.

Plain, vectorised NumPy that reads like the math of docs/ops.md. float32 by
default; `NumpyBackend(dtype=np.float64)` for gradient checks. It has no device, so none of the
reference's device calls (`gpu_*`, `handle`: the cuda backend's). At `use_precision("bf16")`
every matrix product (matmul, matmul_into, bmm: `_product`) reads its inputs rounded to
bf16 and multiplies them in float32, the definition of --precision bf16 (docs/precision.md).

Three habits keep it fast without hiding the math: sums along rows and columns
go through BLAS as products with a vector of ones (several times faster than
NumPy's short-axis reductions); big intermediates are updated in place rather
than allocated anew; and softmax skips the row-max shift when every input is
small enough that exp can neither overflow nor underflow (softmax does not
change under a shift; the shift only guards exp).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from microgpt.backends.adamw import adamw_update
from microgpt.backends.base import Backend, Mat, ReferenceAPI, check_token_ids
from microgpt.backends.bf16 import check_precision, round_bf16
from microgpt.backends.constants import ADAM_BETA1, ADAM_BETA2, ADAM_EPS, LN_EPS, MASKED_SCORE
from microgpt.backends.host_memory import keep_freed_memory
from microgpt.core.threads import set_threads

EXP_SAFE = 60.0  # |x| < 60: float32 exp(x) is a normal number and a row of a million of them sums finitely


class NumpyBackend(Backend, ReferenceAPI):
    name = "numpy"

    def __init__(self, dtype: Any = np.float32):
        self.dtype = np.dtype(dtype)
        if self.dtype not in (np.float32, np.float64):
            raise ValueError(f"numpy backend: dtype must be float32 or float64, not {self.dtype}")
        self._causal_masks: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        keep_freed_memory()  # reuse freed activations instead of faulting them in every step

    @classmethod
    def start(cls, threads=None):
        """A float32 backend, with BLAS set to `threads` threads (`set_threads`) and the count in `.threads`."""
        backend = cls()
        backend.threads = set_threads(threads)
        return backend

    # ---- plumbing -------------------------------------------------------------------------

    def zeros(self, shape):
        return np.zeros(shape, dtype=self.dtype)

    def from_host(self, array):
        return np.array(array, dtype=self.dtype, order="C", copy=True)

    def to_host(self, a):
        return np.array(a, copy=True)

    def ids(self, token_ids):
        return np.ascontiguousarray(token_ids, dtype=np.int32)

    def zero_(self, a):
        a[...] = 0

    def sum_rows(self, x):
        return _column_sums(x)

    def stack(self, mats: Sequence[Mat]) -> Mat:
        return np.stack(mats)

    def bmm(self, a, b, transpose_a=False, transpose_b=False):
        if a.ndim != 3 or b.ndim != 3:
            raise ValueError(f"bmm: needs 3-D arrays, got shapes {a.shape} and {b.shape}")
        a = a.transpose(0, 2, 1) if transpose_a else a
        b = b.transpose(0, 2, 1) if transpose_b else b
        if a.shape[0] != b.shape[0]:
            raise ValueError(f"bmm: batch sizes differ ({a.shape[0]} and {b.shape[0]})")
        _check_matmul_shapes("bmm", a.shape[-2:], b.shape[-2:])
        return self._product(a, b)

    # ---- linear algebra -------------------------------------------------------------------

    def matmul(self, a, b, transpose_a=False, transpose_b=False):
        a = a.T if transpose_a else a
        b = b.T if transpose_b else b
        _check_matmul_shapes("matmul", a.shape, b.shape)
        return self._product(a, b)

    def matmul_into(self, a, b, dst, transpose_a=False, transpose_b=False, accumulate=False):
        a = a.T if transpose_a else a
        b = b.T if transpose_b else b
        _check_matmul_shapes("matmul_into", a.shape, b.shape)
        if dst.shape != (a.shape[0], b.shape[1]):
            raise ValueError(f"matmul_into: dst is {dst.shape} but the product is {(a.shape[0], b.shape[1])}")
        self._product(a, b, dst, accumulate)

    def use_precision(self, precision):
        if check_precision(precision) == "bf16" and self.dtype != np.float32:
            raise ValueError(f"--precision bf16 rounds float32 products' inputs; this backend computes in {self.dtype}")
        self.precision = precision

    def _product(self, a, b, out=None, accumulate=False):
        """a @ b of 2-D or 3-D (batched) arrays, views as they are, at the backend's precision: new, or into out
        (added to it with accumulate). At bf16 both inputs are rounded to bf16 (backends/bf16.py) and
        multiplied in float32. Every product of the backend is this one."""
        if self.precision == "bf16":
            a, b = round_bf16(a), round_bf16(b)
        if out is None:
            return a @ b
        if accumulate:
            out += a @ b
        else:
            np.matmul(a, b, out=out)
        return out

    def transpose(self, a):
        return a.T.copy()  # always new: ascontiguousarray(a.T) returns a view for a (1, n) or (n, 1) a

    def add(self, a, b):
        return a + b

    def add_(self, a, b):
        a += b

    def scale(self, a, s):
        return a * self.dtype.type(s)

    def scale_(self, a, s):
        a *= self.dtype.type(s)

    def release(self, a):
        pass  # NumPy memory is freed when the last reference goes

    # ---- element-wise and reductions ------------------------------------------------------

    def softmax_rows(self, x):
        e = np.exp(x) if _exp_safe(x) else np.exp(x - x.max(axis=1, keepdims=True))
        e /= _row_sums(e)
        return e

    def softmax_backward(self, s, ds):
        grad = ds * s  # (rows, cols), reused below: one new array, not three
        np.subtract(ds, _row_sums(grad), out=grad)
        grad *= s
        return grad

    def causal_mask(self, scores):
        rows, cols = scores.shape
        scores[np.triu(np.ones((rows, cols), dtype=bool), k=1)] = MASKED_SCORE

    def causal_mask_batched(self, scores, seq_len):
        rows, cols = scores.shape
        positions = np.arange(rows)[:, None] % seq_len  # (rows, 1)
        scores[np.arange(cols)[None, :] > positions] = MASKED_SCORE

    def bias_add(self, data, bias):
        data += bias

    def relu_forward(self, x):
        mask = (x > 0).astype(self.dtype)
        return x * mask, mask

    def relu_backward(self, grad, mask):
        return grad * mask

    def layer_norm_forward(self, x, gamma, beta):
        cols = x.shape[1]
        norm = x - _row_sums(x) / cols  # (rows, cols): centred here, divided by the deviation below
        var = _row_sums(norm * norm) / cols  # (rows, 1), the biased variance
        std_inv = 1.0 / np.sqrt(var + self.dtype.type(LN_EPS))  # (rows, 1)
        norm *= std_inv
        out = norm * gamma
        out += beta
        return out, norm, std_inv

    def layer_norm_backward(self, grad, norm, std_inv, gamma):
        cols = grad.shape[1]
        dnorm = grad * gamma
        # dx = std_inv * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), row by row
        dx = dnorm - _row_sums(dnorm) / cols
        dx -= norm * (_row_sums(dnorm * norm) / cols)
        dx *= std_inv
        return dx, _column_sums(grad * norm), _column_sums(grad)

    def adam_step(self, param, grad, m, v, lr, t):
        m *= ADAM_BETA1
        m += (1 - ADAM_BETA1) * grad
        v *= ADAM_BETA2
        v += (1 - ADAM_BETA2) * (grad * grad)
        step = lr / (1 - ADAM_BETA1**t)
        denom = np.sqrt(v / (1 - ADAM_BETA2**t))
        denom += ADAM_EPS
        param -= self.dtype.type(step) * m / denom

    def adamw_step(self, param, grad, m, v, decay_mask, train_mask, lr, t, beta1, beta2, weight_decay, grad_scale):
        adamw_update(param, grad, m, v, decay_mask, train_mask, lr, t, beta1, beta2, weight_decay, grad_scale)

    def rope_apply(self, x, cos_cache, sin_cache):
        self._rope(x, cos_cache, sin_cache, sign=1)

    def rope_apply_inverse(self, x, cos_cache, sin_cache):
        self._rope(x, cos_cache, sin_cache, sign=-1)

    def _rope(self, x, cos_cache, sin_cache, sign):
        # A pair (x0, x1) is the complex number x0 + i x1; rotating it by theta is multiplying by
        # cos theta + i sin theta: x0' = x0 c - x1 s, x1' = x0 s + x1 c. The inverse turns by -theta.
        rows, dim = x.shape
        n = cos_cache.shape[0]
        even = dim - dim % 2  # an odd last column is left as it is
        complex_type = np.complex64 if self.dtype == np.float32 else np.complex128
        turn = (cos_cache[:, 0:even:2] + (1j * sign) * sin_cache[:, 0:even:2]).astype(complex_type)  # (n, dim // 2)
        pairs = x[:, :even].view(complex_type)  # (rows, dim // 2), a view: writing it writes x
        if rows % n == 0:
            blocks = pairs.reshape(rows // n, n, even // 2)  # a view (splits the row axis only)
            blocks *= turn
        else:
            pairs *= turn[np.arange(rows) % n]

    def fused_softmax_ce_grad(self, logits, targets):
        rows = logits.shape[0]
        targets = np.asarray(targets)
        check_token_ids(targets, logits.shape[1])
        shifted = logits if _exp_safe(logits) else logits - logits.max(axis=1, keepdims=True)
        dlogits = np.exp(shifted)  # (rows, vocab): exp now, the gradient after the in-place steps below
        sum_exp = _row_sums(dlogits)  # (rows, 1)
        picked = shifted[np.arange(rows), targets]
        loss = float(np.mean(np.log(sum_exp[:, 0], dtype=np.float64) - picked))
        dlogits /= sum_exp
        dlogits[np.arange(rows), targets] -= 1
        dlogits /= rows
        return loss, dlogits

    def embedding_gather(self, token_emb, ids, seq_len, d_model):
        check_token_ids(ids[:seq_len], token_emb.shape[0])
        return token_emb[ids[:seq_len], :d_model]

    def embedding_scatter_add(self, grad, ids, d_token_emb, seq_len, d_model):
        # Sort the rows by id, sum each run of equal ids, then add each sum once: repeated ids accumulate.
        ids = ids[:seq_len]
        check_token_ids(ids, d_token_emb.shape[0])
        order = np.argsort(ids, kind="stable")
        unique_ids, run_starts = np.unique(ids[order], return_index=True)
        d_token_emb[unique_ids, :d_model] += np.add.reduceat(grad[order, :d_model], run_starts, axis=0)

    # ---- fused attention softmax (the other fused ops use the base class's defaults) -------

    def fused_attn_softmax(self, scores, scale):
        cols = scores.shape[1]
        future, past = self._causal(cols)
        x = scores * self.dtype.type(scale)  # (rows, cols), the one new array; the rest is in place
        blocks = x.reshape(-1, cols, cols)  # a view: the stacked (T, T) blocks
        if _exp_safe(x):
            np.exp(x, out=x)
            blocks *= past  # future positions weigh 0, exactly as exp(-1e9 - max) would
        else:
            np.copyto(blocks, self.dtype.type(MASKED_SCORE), where=future)
            x -= x.max(axis=1, keepdims=True)
            np.exp(x, out=x)
        x /= _row_sums(x)
        return x

    def _causal(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(future, past): (n, n) bool mask of j > i, and its complement as 1.0/0.0 weights; cached by size."""
        if n not in self._causal_masks:
            future = np.triu(np.ones((n, n), dtype=bool), k=1)
            self._causal_masks[n] = (future, (~future).astype(self.dtype))
        return self._causal_masks[n]

    # ---- device: none ----------------------------------------------------------------------

    def sync(self):
        pass  # NumPy work is finished when each call returns

    def finalize(self):
        self._causal_masks.clear()


def _row_sums(x: np.ndarray) -> np.ndarray:
    """(rows, 1): each row's sum, as a BLAS product with a column of ones."""
    return x @ np.ones((x.shape[1], 1), dtype=x.dtype)


def _column_sums(x: np.ndarray) -> np.ndarray:
    """(1, cols): each column's sum, as a BLAS product with a row of ones."""
    return np.ones((1, x.shape[0]), dtype=x.dtype) @ x


def _exp_safe(x: np.ndarray) -> bool:
    """True when every entry is within +-EXP_SAFE, so softmax needs no max shift (False for NaN)."""
    return bool(x.size) and bool(max(x.max(), -x.min()) < EXP_SAFE)


def _check_matmul_shapes(op: str, a_shape, b_shape) -> None:
    if a_shape[-1] != b_shape[0]:
        raise ValueError(f"{op}: shapes {tuple(a_shape)} and {tuple(b_shape)} do not chain (inner sizes differ)")
