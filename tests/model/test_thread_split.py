"""A batch split over the backend's threads: the trainer's ThreadSplit (model/thread_split.py), the cpu
backend's thread pool, and the element-wise ops that run in column chunks.

The split's arithmetic is checked on any machine with a NumPy backend that
claims several streams and runs them one after another; the threads themselves
with the cpu backend where there are two cores.
"""

from __future__ import annotations

import threading
import time
import warnings
from itertools import pairwise

import numpy as np
import pytest

from blas_threads import blas_threads
from microgpt.backends import get_backend
from microgpt.backends.cpu_backend import CHUNKED_SIZE
from microgpt.backends.cpu_streams import StreamPool
from microgpt.backends.numpy_backend import NumpyBackend
from microgpt.core.threads import available_cores
from microgpt.model.gpt import GPT, GPTConfig
from microgpt.model.thread_split import ThreadSplit

pytestmark = pytest.mark.usefixtures("all_cores_after")  # tests/conftest.py: each starts from every core

# unequal heads, T not a multiple of 16; B=5 splits unevenly into 2+2+1 or 3+2
CONFIG = GPTConfig(vocab_size=29, d_model=24, n_layers=2, head_dims=(8, 8, 5, 3), d_ff=40, seq_len=19)
two_cores = pytest.mark.skipif(available_cores() < 2, reason="needs two cores to run two streams")


class ThreeStreams(NumpyBackend):
    """The NumPy reference claiming three streams, run one after another (the base class's run_streams)."""

    streams = 3


def windows(batch: int = 5, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, CONFIG.vocab_size, size=(batch, CONFIG.seq_len + 1))  # (B, T+1)


def loss_and_grad(backend, batch: np.ndarray, preload: float = 0.0) -> tuple[float, np.ndarray]:
    model = GPT(CONFIG, backend, seed=2)
    model.params.grad[...] = preload
    loss, _ = ThreadSplit(model).loss_and_backward(batch)
    return loss, backend.to_host(model.params.grad)


def train_step(split: ThreadSplit, windows: np.ndarray, lr: float) -> float:
    """GPT.train_step through the split: zero the gradients, the split's pass, one Adam step."""
    split.params.zero_grad()
    loss, _ = split.loss_and_backward(windows)
    split.params.adam_step(lr)
    return loss


@pytest.mark.parametrize("batch", [1, 2, 3, 5, 7])
def test_a_split_batch_gives_the_whole_batch_mean(batch):
    # float64, the same terms summed in another order: agreement to ~1e-15, so 1e-12 is a tight check that
    # each slice is weighted by its share of the sequences (a wrong weight is off by ~10% or more).
    one_loss, one_grad = loss_and_grad(NumpyBackend(np.float64), windows(batch))
    split_loss, split_grad = loss_and_grad(ThreeStreams(np.float64), windows(batch))
    assert split_loss == pytest.approx(one_loss, rel=1e-12)
    np.testing.assert_allclose(split_grad, one_grad, rtol=0, atol=1e-12 * np.abs(one_grad).max())


def test_a_split_batch_adds_into_the_gradient_already_there():
    # loss_and_backward adds into params.grad (gradient accumulation relies on it), split or not
    _, one_grad = loss_and_grad(NumpyBackend(np.float64), windows(), preload=0.5)
    _, split_grad = loss_and_grad(ThreeStreams(np.float64), windows(), preload=0.5)
    np.testing.assert_allclose(split_grad, one_grad, rtol=0, atol=1e-12)
    assert np.abs(split_grad - 0.5).max() > 1e-3  # the gradient itself was added


@pytest.mark.parametrize("batches", [(5, 5, 5), (2, 5, 2), (5, 1, 2, 7)])
def test_every_step_starts_its_slices_from_zero(batches):
    # The slices' buffers are reused from step to step (and re-made when the slice count changes): each
    # step's gradient must be that step's alone, as one pass over the batch gives it.
    split = ThreadSplit(GPT(CONFIG, ThreeStreams(np.float64), seed=2))
    one = GPT(CONFIG, NumpyBackend(np.float64), seed=2)
    for step, batch in enumerate(batches):
        split_loss, one_loss = train_step(split, windows(batch, step), 1e-2), one.train_step(windows(batch, step), 1e-2)
        assert split_loss == pytest.approx(one_loss, rel=1e-12)
        np.testing.assert_allclose(split.params.grad, one.params.grad, rtol=0, atol=1e-12)


def test_forward_loss_of_a_split_batch():
    one = GPT(CONFIG, NumpyBackend(np.float64), seed=2).loss(windows(7))
    assert ThreadSplit(GPT(CONFIG, ThreeStreams(np.float64), seed=2)).loss(windows(7)) == pytest.approx(one, rel=1e-12)


@two_cores
def test_cpu_streams_match_the_reference_in_float64():
    # the cpu backend with two threads splits B=5 into 3 + 2 and runs them at once
    one_loss, one_grad = loss_and_grad(NumpyBackend(np.float64), windows())
    backend = get_backend("cpu", dtype=np.float64, threads=2)
    assert backend.streams == 2
    split_loss, split_grad = loss_and_grad(backend, windows())
    assert split_loss == pytest.approx(one_loss, rel=1e-12)
    np.testing.assert_allclose(split_grad, one_grad, rtol=0, atol=1e-12 * np.abs(one_grad).max())


LONG = GPTConfig(vocab_size=29, d_model=64, n_layers=2, head_dims=(16, 16, 16, 16), d_ff=160, seq_len=70)


@two_cores
def test_cpu_streams_forward_loss_and_repeatable_training_on_a_longer_sequence():
    # seq_len 70: attention in halves; 105k parameters: Adam and the combination in column chunks. The
    # forward-only loss runs both slices through the same layers at once.
    batch = np.random.default_rng(7).integers(0, LONG.vocab_size, size=(5, LONG.seq_len + 1))  # (B, T+1)
    cpu = GPT(LONG, get_backend("cpu", dtype=np.float64, threads=2), seed=4)
    reference = GPT(LONG, NumpyBackend(np.float64), seed=4)
    assert ThreadSplit(cpu).loss(batch) == pytest.approx(reference.loss(batch), rel=1e-12)
    runs = []
    for _ in range(2):
        split = ThreadSplit(GPT(LONG, get_backend("cpu", threads=2), seed=4))
        runs.append([train_step(split, batch[::-1] if step % 2 else batch, 1e-2) for step in range(4)])
        split.be.finalize()
    assert runs[0] == runs[1]  # bit-identical, run after run


@two_cores
def test_the_cpu_backend_still_runs_streams_after_finalize():
    backend = get_backend("cpu", threads=2)
    together = threading.Barrier(2, timeout=10)
    backend.finalize()  # stops the pool's threads
    backend.run_streams([together.wait, together.wait])  # a new pool: the barrier passes only if both run at once
    backend.finalize()


@two_cores
def test_the_cpu_backend_runs_its_streams_at_once_with_blas_in_one_thread_each():
    backend = get_backend("cpu", threads=2)
    together = threading.Barrier(2, timeout=10)  # passes only if both tasks run at the same time

    def task():
        together.wait()
        return blas_threads()

    assert backend.run_streams([task, task]) == [{1}, {1}]
    assert blas_threads() == {2}  # restored after the run

    def failing():
        together.wait()
        raise RuntimeError("slice failed")

    with pytest.raises(RuntimeError, match="slice failed"):
        backend.run_streams([task, failing])
    assert blas_threads() == {2}  # and after a failed one
    backend.finalize()


@two_cores
def test_numpy_error_state_holds_in_every_stream():
    # np.errstate is a context variable: the trainer's "ignore overflow" around a step must reach the
    # worker threads too (a diverging run printed overflow warnings from them once)
    backend = get_backend("cpu", threads=2)
    big = np.full(4, 1e38, dtype=np.float32)

    def overflow():
        return big * np.float32(10)

    with np.errstate(over="raise"), pytest.raises(FloatingPointError):
        backend.run_streams([lambda: None, overflow])
    with np.errstate(over="ignore"), warnings.catch_warnings():
        warnings.simplefilter("error")
        backend.run_streams([overflow, overflow])


def test_stream_pool_returns_results_in_order_and_runs_tasks_at_once():
    pool = StreamPool(3)
    started = threading.Barrier(3, timeout=10)  # only passes if all three tasks run at the same time

    def task(value):
        started.wait()
        return value

    assert pool.run([lambda v=v: task(v) for v in "abc"]) == ["a", "b", "c"]
    with pytest.raises(ValueError, match="4 tasks for 3 streams"):
        pool.run([lambda: None] * 4)


def test_stream_pool_raises_only_after_every_task_has_ended():
    pool = StreamPool(2)
    finished = []

    def slow():
        time.sleep(0.2)
        finished.append("slow")

    def failing():
        raise RuntimeError("slice failed")

    with pytest.raises(RuntimeError, match="slice failed"):
        pool.run([failing, slow])
    assert finished == ["slow"]  # the other task was waited for, so no task outlives the call
    assert pool.run([lambda: 1, lambda: 2]) == [1, 2]  # and the pool still works


def test_a_run_inside_a_task_runs_in_that_task():  # one run at a time: the inner one runs in its caller
    pool = StreamPool(2)
    inner = []

    def task():
        inner.extend(pool.run([lambda: threading.get_ident(), lambda: threading.get_ident()]))
        return threading.get_ident()

    outer = pool.run([task, lambda: None])
    assert inner == [outer[0], outer[0]]


def test_no_range_to_cover_is_one_empty_chunk():
    assert StreamPool(2).chunks(0) == [(0, 0)]


@pytest.mark.parametrize("total", [1, 63, 64, 65, 1000, 4099])
def test_chunks_cover_the_range_once_at_aligned_starts(total):
    chunks = StreamPool(3).chunks(total)
    assert chunks[0][0] == 0 and chunks[-1][1] == total
    assert all(end == start for (_, end), (start, _) in pairwise(chunks))
    assert all(start % 64 == 0 and start < end for start, end in chunks)
    assert len(chunks) <= 3


@two_cores
@pytest.mark.parametrize("op", ["adam", "adamw", "add_weighted"])
def test_chunked_element_wise_ops_give_the_same_bits_for_any_thread_count(op):
    # Adam, AdamW and the gradient combination are element-wise and run in column chunks, one per thread;
    # every element's arithmetic is the same whichever chunk it falls in, so the bits must be too.
    # 100,003 entries: above CHUNKED_SIZE, and not a multiple of the chunk alignment or of any vector width.
    size = 100_003
    assert size > CHUNKED_SIZE
    rng = np.random.default_rng(0)
    start = [rng.standard_normal((1, size)).astype(np.float32) for _ in range(5)]
    sources = rng.standard_normal((2, size)).astype(np.float32)
    mask = (rng.random((1, size)) < 0.5).astype(np.float32)
    train = (rng.random((1, size)) < 0.8).astype(np.float32)  # frozen entries fall in every chunk
    results = []
    for threads in (1, 2):
        backend = get_backend("cpu", threads=threads)
        param, grad, m, v, dst = (a.copy() for a in start)
        v = np.abs(v)
        if op == "adam":
            backend.adam_step(param, grad, m, v, 1e-3, 3)
        elif op == "adamw":
            backend.adamw_step(param, grad, m, v, mask, train, 1e-3, 3, 0.9, 0.95, 0.1, 0.5)
        else:
            backend.add_weighted_(dst, sources, [0.6, 0.4])
        results.append([param, m, v, dst])
    for one, two in zip(*results):
        np.testing.assert_array_equal(one, two)


def test_add_weighted_matches_the_reference():
    # float32, a fused multiply-add in the kernel against NumPy's separate rounding: 1 ulp of the result
    rng = np.random.default_rng(1)
    dst, sources = rng.standard_normal((1, 3001)).astype(np.float32), rng.standard_normal((3, 3001)).astype(np.float32)
    expected = dst.copy()
    NumpyBackend().add_weighted_(expected, sources, [0.5, 0.25, 0.25])
    get_backend("cpu").add_weighted_(dst, sources, [0.5, 0.25, 0.25])
    np.testing.assert_allclose(dst, expected, rtol=1e-6, atol=1e-6)
