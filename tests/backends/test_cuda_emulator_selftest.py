"""The CUDA emulator catches each kind of kernel bug it is there to catch (tests/cuda_emulator/broken_kernels.cu).

Every broken kernel is run twice: with its bug switched off it gives the right answer, with
the bug on the emulator reports it (a KernelError, or NaN where the value was never written).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cuda_emulator import launch
from cuda_emulator.build import GXX
from cuda_emulator.fake_cupy import RawModule, fake_cupy
from cuda_emulator.launch import KernelError, schedule

SOURCE = Path(__file__).parents[1].joinpath("cuda_emulator").joinpath("broken_kernels.cu").read_text(encoding="utf-8")
cp = fake_cupy()


@pytest.fixture(scope="module")
def module():
    if GXX is None:
        pytest.skip("g++ is not on PATH; the CUDA emulator needs it")
    return RawModule(code=SOURCE)


def test_missing_barrier_reads_unwritten_shared_memory(module):
    kernel, x = module.get_function("block_sum_barrier"), np.arange(128, dtype=np.float32)
    out = cp.empty(1)
    kernel((1,), (128,), (x, out, np.int32(1)))
    assert out[0] == x.sum()
    kernel((1,), (128,), (x, out, np.int32(0)))
    assert np.isnan(out[0])  # thread 0 ran ahead of warps 1-3: their slots still held the NaN fill


def test_divergent_shuffle_is_a_deadlock_not_a_hang(module):
    kernel, x = module.get_function("divergent_shuffle"), np.arange(32, dtype=np.float32)
    out = cp.empty(32)
    kernel((1,), (32,), (x, out, np.int32(32)))
    np.testing.assert_array_equal(out, x.reshape(16, 2)[:, ::-1].reshape(-1))  # neighbours swapped
    with pytest.raises(
        KernelError,
        match="deadlock.*16 threads from thread \\(0,0,0\\) wait at a shuffle line 24; 16 threads from thread \\(16,0,0\\) exited",
    ):
        kernel((1,), (32,), (x, cp.empty(32), np.int32(16)))


def test_divergent_barrier_is_an_error(module):
    kernel, out = module.get_function("divergent_barrier"), cp.empty(64)
    kernel((1,), (64,), (out, np.int32(64)))
    assert (out == 1).all()
    with pytest.raises(KernelError, match="__syncthreads.*exited|deadlock"):
        kernel((1,), (64,), (out, np.int32(40)))


def test_unwritten_shared_memory_reads_as_nan_in_every_block(module):
    kernel, x = module.get_function("shifted_shared_read"), np.arange(64, dtype=np.float32)
    out = cp.empty(64)
    kernel((2,), (32,), (x, out, np.int32(0), np.int32(0)))
    np.testing.assert_array_equal(out, x)
    kernel((2,), (32,), (x, out, np.int32(1), np.int32(0)))
    assert np.isnan(out[[31, 63]]).all() and not np.isnan(np.delete(out, [31, 63])).any()
    kernel((2,), (32,), (x, out, np.int32(0), np.int32(1)))  # block 1 sees none of block 0's tile
    np.testing.assert_array_equal(out[:32], x[:32])
    assert np.isnan(out[32:]).all()


def test_out_of_bounds_write_is_an_error(module):
    kernel, out = module.get_function("write_past_the_end"), cp.empty(40)
    kernel((1,), (32,), (out, np.int32(40), np.int32(0)))
    assert (out == 1).all()
    with pytest.raises(KernelError, match="out of bounds after float\\* out"):
        kernel((1,), (32,), (out, np.int32(40), np.int32(1)))


def test_an_element_never_written_stays_nan(module):
    out = cp.empty(40)  # what the backend's outputs start as
    module.get_function("write_past_the_end")((1,), (32,), (out, np.int32(39), np.int32(0)))
    assert np.isnan(out[39]) and (out[:39] == 1).all()


def test_argument_types_must_match_the_signature(module):
    kernel = module.get_function("write_past_the_end")
    with pytest.raises(TypeError, match="int n got int64"):
        kernel((1,), (32,), (cp.empty(4), np.int64(4), np.int32(0)))
    with pytest.raises(TypeError, match="float\\* out needs a contiguous float32 array, got float64"):
        kernel((1,), (32,), (np.zeros(4), np.int32(4), np.int32(0)))
    with pytest.raises(TypeError, match="2 arguments for 3"):
        kernel((1,), (32,), (cp.empty(4), np.int32(4)))


def test_schedules_expose_an_order_dependent_float_sum(module):
    """The determinism tests run kernels under several block and thread orders; float atomics differ."""
    x = (np.random.default_rng(0).normal(size=256) * 10.0 ** np.arange(-4, 4).repeat(32)).astype(np.float32)
    totals = []
    for order in (0, 1, 5):
        total = np.zeros(1, dtype=np.float32)
        with schedule(order):
            module.get_function("atomic_total")((4,), (64,), (x, total, np.int32(256)))
        totals.append(total[0])
    assert len(set(totals)) > 1, totals


def test_an_endless_loop_of_barriers_times_out(module, monkeypatch):
    kernel, out = module.get_function("endless_barriers"), cp.empty(64)
    kernel((1,), (64,), (out, np.int32(3)))
    assert (out == 1).all()
    monkeypatch.setattr(launch, "TIME_LIMIT", 0.2)
    with pytest.raises(KernelError, match="__syncthreads at line .* after the launch's time limit"):
        kernel((1,), (64,), (out, np.int32(-1)))
