"""Numerical constants every backend shares, defined once.

The NumPy and CUDA backends import them here; the CUDA kernels receive them as
`#define` lines that `cuda/loader.kernel_source` prepends to each file's text,
so a changed constant also changes NVRTC's cache key.
"""

from __future__ import annotations

LN_EPS = 1e-5  # LayerNorm: x_hat = (x - mean) / sqrt(var + LN_EPS), with the biased variance
ADAM_BETA1 = 0.9  # Adam's first-moment decay
ADAM_BETA2 = 0.999  # Adam's second-moment decay
ADAM_EPS = 1e-8  # Adam: added to sqrt(v_hat) in the denominator
MASKED_SCORE = -1e9  # what the causal mask writes over a future position's attention score


def kernel_defines() -> str:
    """The constants the kernels use, as CUDA C `#define` lines of float literals. (Adam's betas and eps
    reach its kernel as launch arguments, since the host folds them into the bias corrections.)"""
    values = {"LN_EPS": LN_EPS, "MASKED_SCORE": MASKED_SCORE}
    return "".join(f"#define {name} ({value!r}f)\n" for name, value in values.items())
