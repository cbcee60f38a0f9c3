"""`f32(a)`: `a` rounded to float32 and back, so that a float64 reference sees exactly the inputs a float32
backend saw (the cuda backend's tests, on a GPU and on the emulator)."""

from __future__ import annotations

import numpy as np


def f32(a) -> np.ndarray:
    return np.asarray(a, dtype=np.float32).astype(np.float64)
