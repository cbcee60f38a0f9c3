"""The NumPy backend: the readable reference that defines what every op computes.

Plain, vectorised NumPy that reads like the math of spec/ops.md. float32 by
default; `NumpyBackend(dtype=np.float64)` for gradient checks. Device-only ops
(`gpu_*`, `handle`) raise a clear error: the CPU has no device.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from microgpt.backends.base import Backend, Mat

LN_EPS = 1e-5
ADAM_BETA1, ADAM_BETA2, ADAM_EPS = 0.9, 0.999, 1e-8
MASKED = -1e9


class NumpyBackend(Backend):
    name = "numpy"

    def __init__(self, dtype: Any = np.float32):
        self.dtype = np.dtype(dtype)
        if self.dtype not in (np.float32, np.float64):
            raise ValueError(f"numpy backend: dtype must be float32 or float64, not {self.dtype}")
        self._causal_masks: dict[int, np.ndarray] = {}

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
        return x.sum(axis=0, keepdims=True)

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
        return np.matmul(a, b)

    # ---- linear algebra -------------------------------------------------------------------

    def matmul(self, a, b, transpose_a=False, transpose_b=False):
        a = a.T if transpose_a else a
        b = b.T if transpose_b else b
        _check_matmul_shapes("matmul", a.shape, b.shape)
        return a @ b

    def matmul_into(self, a, b, dst, transpose_a=False, transpose_b=False, accumulate=False):
        a = a.T if transpose_a else a
        b = b.T if transpose_b else b
        _check_matmul_shapes("matmul_into", a.shape, b.shape)
        if dst.shape != (a.shape[0], b.shape[1]):
            raise ValueError(f"matmul_into: dst is {dst.shape} but the product is {(a.shape[0], b.shape[1])}")
        if accumulate:
            dst += a @ b
        else:
            np.matmul(a, b, out=dst)

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
        e = np.exp(x - x.max(axis=1, keepdims=True))
        e /= e.sum(axis=1, keepdims=True)
        return e

    def softmax_backward(self, s, ds):
        return s * (ds - (ds * s).sum(axis=1, keepdims=True))

    def causal_mask(self, scores):
        rows, cols = scores.shape
        scores[np.triu(np.ones((rows, cols), dtype=bool), k=1)] = MASKED

    def causal_mask_batched(self, scores, seq_len):
        rows, cols = scores.shape
        positions = np.arange(rows)[:, None] % seq_len  # (rows, 1)
        scores[np.arange(cols)[None, :] > positions] = MASKED

    def bias_add(self, data, bias):
        data += bias

    def relu_forward(self, x):
        mask = (x > 0).astype(self.dtype)
        return x * mask, mask

    def relu_backward(self, grad, mask):
        return grad * mask

    def layer_norm_forward(self, x, gamma, beta):
        mean = x.mean(axis=1, keepdims=True)
        centered = x - mean
        var = (centered * centered).mean(axis=1, keepdims=True)
        std_inv = 1.0 / np.sqrt(var + self.dtype.type(LN_EPS))  # (rows, 1)
        norm = centered * std_inv
        return norm * gamma + beta, norm, std_inv

    def layer_norm_backward(self, grad, norm, std_inv, gamma):
        dnorm = grad * gamma
        dx = std_inv * (
            dnorm - dnorm.mean(axis=1, keepdims=True) - norm * (dnorm * norm).mean(axis=1, keepdims=True)
        )
        dgamma = (grad * norm).sum(axis=0, keepdims=True)
        dbeta = grad.sum(axis=0, keepdims=True)
        return dx, dgamma, dbeta

    def adam_step(self, param, grad, m, v, lr, t):
        m *= ADAM_BETA1
        m += (1 - ADAM_BETA1) * grad
        v *= ADAM_BETA2
        v += (1 - ADAM_BETA2) * (grad * grad)
        step = lr / (1 - ADAM_BETA1**t)
        denom = np.sqrt(v / (1 - ADAM_BETA2**t))
        denom += ADAM_EPS
        param -= self.dtype.type(step) * m / denom

    def rope_apply(self, x, cos_cache, sin_cache):
        self._rope(x, cos_cache, sin_cache, sign=1)

    def rope_apply_inverse(self, x, cos_cache, sin_cache):
        self._rope(x, cos_cache, sin_cache, sign=-1)

    def _rope(self, x, cos_cache, sin_cache, sign):
        rows, dim = x.shape
        n = cos_cache.shape[0]
        even = dim - dim % 2  # an odd last column is left as it is
        cos = cos_cache[:, 0:even:2]  # (n, dim // 2): both members of a pair hold the same angle
        sin = sin_cache[:, 0:even:2] * sign
        if rows % n == 0:
            x3 = x.reshape(rows // n, n, dim)[..., :even]  # a view: x is contiguous
            x0, x1 = x3[..., 0::2], x3[..., 1::2]
        else:
            pos = np.arange(rows) % n
            cos, sin = cos[pos], sin[pos]
            x0, x1 = x[:, 0:even:2], x[:, 1:even:2]
        new0 = x0 * cos - x1 * sin
        x1[...] = x0 * sin + x1 * cos
        x0[...] = new0

    def fused_softmax_ce_grad(self, logits, targets):
        rows = logits.shape[0]
        targets = np.asarray(targets)
        shifted = logits - logits.max(axis=1, keepdims=True)
        exp = np.exp(shifted)
        sum_exp = exp.sum(axis=1, keepdims=True)
        picked = shifted[np.arange(rows), targets]
        loss = float(np.mean(np.log(sum_exp[:, 0]) - picked))
        dlogits = exp / sum_exp
        dlogits[np.arange(rows), targets] -= 1
        dlogits /= rows
        return loss, dlogits

    def embedding_gather(self, token_emb, ids, seq_len, d_model):
        return token_emb[ids[:seq_len], :d_model]

    def embedding_scatter_add(self, grad, ids, d_token_emb, seq_len, d_model):
        np.add.at(d_token_emb, ids[:seq_len], grad[:seq_len, :d_model])

    # ---- fused ops: one vectorised pass each ---------------------------------------------

    def fused_attn_softmax(self, scores, scale):
        rows, cols = scores.shape
        x = scores * self.dtype.type(scale)
        x.reshape(-1, cols, cols)[:, self._upper(cols)] = MASKED
        return self.softmax_rows(x)

    def fused_attn_softmax_backward(self, s, ds, scale):
        grad = self.softmax_backward(s, ds)
        grad *= self.dtype.type(scale)
        return grad

    def fused_bias_relu(self, x, bias):
        x += bias
        return self.relu_forward(x)

    def _upper(self, n: int) -> np.ndarray:
        """The (n, n) mask of strictly-future positions, cached by size."""
        if n not in self._causal_masks:
            self._causal_masks[n] = np.triu(np.ones((n, n), dtype=bool), k=1)
        return self._causal_masks[n]

    # ---- device memory: the CPU has none --------------------------------------------------

    def _no_device(self, op: str):
        return NotImplementedError(
            f"{op} needs a GPU, and the numpy backend runs on the CPU and has no device memory; "
            "use --backend cuda for device operations"
        )

    def gpu_alloc(self, size):
        raise self._no_device("gpu_alloc")

    def gpu_free(self, ptr):
        raise self._no_device("gpu_free")

    def gpu_upload(self, dst, src, size):
        raise self._no_device("gpu_upload")

    def gpu_download(self, dst, src, size):
        raise self._no_device("gpu_download")

    def sync(self):
        pass  # NumPy work is finished when each call returns

    @property
    def handle(self):
        raise self._no_device("handle (a cuBLAS handle)")

    def finalize(self):
        self._causal_masks.clear()


def _check_matmul_shapes(op: str, a_shape, b_shape) -> None:
    if a_shape[-1] != b_shape[0]:
        raise ValueError(f"{op}: shapes {tuple(a_shape)} and {tuple(b_shape)} do not chain (inner sizes differ)")
