"""`adamw_step`'s train mask: a frozen entry (train_mask 0) keeps its parameter and both moments bit for bit,
whatever its gradient, while the entries that train move; and each backend's update agrees with the NumPy
formula (backends/adamw.py) on awkward inputs.

Every backend: numpy, cpu (numba; above CHUNKED_SIZE in column chunks, one per thread), `Backend`'s default
(the NumPy formula on host copies), the CUDA backend on the CPU emulator and, where there is a GPU, on it.
"""

from __future__ import annotations

import numpy as np
import pytest

from backend_kinds import CUDA_SKIP
from microgpt.backends import Backend, get_backend
from microgpt.backends.adamw import adamw_update
from microgpt.backends.cpu_backend import CHUNKED_SIZE
from microgpt.backends.cuda import kernel_launch as launch
from microgpt.backends.numpy_backend import NumpyBackend

# 1 and 37: shorter than, and not a multiple of, any vector width or block; 301: past one block of 256 CUDA
# threads; 70,003: above CHUNKED_SIZE
SIZES = [1, 37, 301, 70_003]
assert SIZES[-1] > CHUNKED_SIZE
LR, BETA1, BETA2, WEIGHT_DECAY, GRAD_SCALE = 1e-2, 0.9, 0.95, 0.1, 0.3  # decay on, a clipped gradient's scale
STEPS = 4
BUFFERS = ("param", "grad", "m", "v", "decay", "train")  # adamw_step's arrays, in its order


class HostDefault(NumpyBackend):
    """The NumPy backend with `Backend`'s default update, what a backend without its own runs."""

    name = "host default"
    adamw_step = Backend.adamw_step


@pytest.fixture(params=["numpy", "cpu", "host default", "emulated cuda",
                        pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(CUDA_SKIP is not None,
                                                                                        reason=str(CUDA_SKIP))])])
def any_backend(request, monkeypatch, size):
    """Each backend, for a store of `size` entries."""
    if request.param == "emulated cuda":
        if size > CHUNKED_SIZE:
            pytest.skip("70,003 entries are for the cpu backend's chunks; 301 already loop on the emulator")
        monkeypatch.setattr(launch, "MAX_ELEMENT_BLOCKS", 1)  # 301 entries: the grid-stride loop goes round twice
        yield request.getfixturevalue("emulated")[0]
        return
    backend = HostDefault() if request.param == "host default" else get_backend(request.param)
    yield backend
    backend.finalize()


def store(size: int, seed: int = 0) -> dict[str, np.ndarray]:
    """float32 (1, size) buffers by name: param, grad, m, v (v >= 0), and decay and train masks mixing 0 and 1."""
    rng = np.random.default_rng(seed)
    param, grad, m = (rng.normal(size=(1, size)).astype(np.float32) for _ in range(3))
    v = np.abs(rng.normal(size=(1, size))).astype(np.float32)
    decay = (rng.random((1, size)) < 0.5).astype(np.float32)
    train = (rng.random((1, size)) < 0.7).astype(np.float32)
    train[:, size // 3 : size // 2] = 0  # a run of frozen entries (a frozen tensor), across chunk boundaries
    train[:, -1] = 0  # the last entry frozen: a tail past any vector width
    return {"param": param, "grad": grad, "m": m, "v": v, "decay": decay, "train": train}


def steps(backend, host: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """STEPS AdamW steps on the backend from the host buffers; param, m and v back on the host."""
    device = [backend.from_host(host[name]) for name in BUFFERS]
    for t in range(1, STEPS + 1):
        backend.adamw_step(*device, LR, t, BETA1, BETA2, WEIGHT_DECAY, GRAD_SCALE)
    return {name: backend.to_host(device[BUFFERS.index(name)]) for name in ("param", "m", "v")}


# NumPy computes each formula for every entry and writes it only where the entry trains, so a frozen entry's
# NaN gradient or negative v warns there (and is never written)
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("size", SIZES)
def test_frozen_entries_keep_their_bits_while_the_others_move(any_backend, size):
    """Frozen entries hold values an update would turn into NaN or change (a NaN or infinite gradient, a
    negative v, -0.0): skipped, not updated by zero, they come back with the very bits they had."""
    host = store(size)
    frozen = host["train"][0] == 0
    host["grad"][0, frozen] = np.where(np.arange(frozen.sum()) % 2, np.nan, np.inf)
    host["v"][0, frozen] = -1.0  # sqrt(v) would be NaN
    host["param"][0, frozen] = -0.0
    after = steps(any_backend, host)
    for name, values in after.items():
        assert values[0, frozen].tobytes() == host[name][0, frozen].tobytes(), f"frozen {name} changed"
        assert (values[0, ~frozen] != host[name][0, ~frozen]).all(), f"a trainable {name} did not move"
        assert np.isfinite(values[0, ~frozen]).all(), name


@pytest.mark.parametrize("size", SIZES)
def test_every_backend_matches_the_numpy_formula(any_backend, size):
    """float32 against the same formula in NumPy float32: the rounding differs (the cpu kernel's v times
    1 / (1 - beta2^t) against v / (1 - beta2^t), fused multiply-adds) by a float32 ulp or two of values
    up to ~5 (4.8e-7 each) over four steps, an absolute error where an update cancels a value toward 0.
    Frozen entries agree exactly."""
    host = store(size, seed=1)
    got = steps(any_backend, host)
    want = {name: host[name].copy() for name in ("param", "m", "v")}
    for t in range(1, STEPS + 1):
        adamw_update(want["param"], host["grad"], want["m"], want["v"], host["decay"], host["train"], LR, t, BETA1,
                     BETA2, WEIGHT_DECAY, GRAD_SCALE)
    frozen = host["train"][0] == 0
    for name, expected in want.items():
        np.testing.assert_allclose(got[name], expected, rtol=1e-6, atol=1e-6, err_msg=name)
        assert got[name][0, frozen].tobytes() == expected[0, frozen].tobytes(), name
