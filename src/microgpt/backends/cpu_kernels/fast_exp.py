"""exp over a buffer, vectorisable: `exp_into(values, count, scratch)` sets values[:count] = exp(values[:count]).

LLVM cannot vectorise a call to libm's expf, and a scalar exp costs as much as
a dozen vector instructions, so the attention and cross-entropy kernels would
spend most of their time in it. For float32 this is Cephes' expf, in plain
arithmetic that vectorises: n = round(x / ln 2), r = x - n ln 2 (in two parts),
exp(r) by a degree-7 polynomial (relative error below 2 float32 ulp on
|r| <= ln 2 / 2), times 2^n built from its exponent bits in `scratch` (int32, at
least count long). Inputs below -87.3 give exactly 0 (float32's exp underflows
there anyway), above 88.7 they are clamped (softmax's inputs are <= 0 after the
max shift), NaN stays NaN. float64 keeps libm's exp, for the gradient checks' accuracy.
"""

from __future__ import annotations

import numpy as np
from numba import types
from numba.extending import overload

LOG2E = 1.44269504088896341
LN2_HIGH = 0.693359375  # ln 2 split in two: n * LN2_HIGH is exact for |n| < 2^9
LN2_LOW = -2.12194440e-4
UNDERFLOW = -87.33654  # below this float32 exp(x) is 0 (or a subnormal, taken as 0)
OVERFLOW = 88.72283


def exp_into(values, count, scratch):
    """values[:count] = exp(values[:count]) in place; compiled through the overload below."""
    raise NotImplementedError("exp_into is for numba-compiled kernels only")


def _float32_exp_into(values, count, scratch):
    two_to_n = scratch.view(np.float32)  # the same bytes, read as float32 after the int writes
    for j in range(count):
        x = min(max(values[j], np.float32(UNDERFLOW)), np.float32(OVERFLOW))
        n = np.floor(x * np.float32(LOG2E) + np.float32(0.5))
        r = x - n * np.float32(LN2_HIGH) - n * np.float32(LN2_LOW)
        p = np.float32(1.9875691500e-4)
        p = p * r + np.float32(1.3981999507e-3)
        p = p * r + np.float32(8.3334519073e-3)
        p = p * r + np.float32(4.1665795894e-2)
        p = p * r + np.float32(1.6666665459e-1)
        p = p * r + np.float32(5.0000001201e-1)
        scratch[j] = (np.int32(n) + np.int32(127)) << np.int32(23)
        v = values[j]  # NaN fails both tests below and stays NaN
        values[j] = (p * r * r + r + np.float32(1.0)) if v > np.float32(UNDERFLOW) else (
            np.float32(0.0) if v <= np.float32(UNDERFLOW) else v)
    for j in range(count):
        values[j] *= two_to_n[j]


def _libm_exp_into(values, count, scratch):
    for j in range(count):
        values[j] = np.exp(values[j])


@overload(exp_into)
def _exp_into(values, count, scratch):
    if values.dtype == types.float32:
        return _float32_exp_into
    return _libm_exp_into
