"""Data-parallel pieces that need no MPI: the step, gradient accumulation, the batch split, the launcher's
environment, and the one-line error for a launched run without mpi4py. (tests/parallel/test_mpi.py runs real ranks.)"""

from __future__ import annotations

import json
import math
import sys

import numpy as np
import pytest

import microgpt
from microgpt.backends import get_backend
from microgpt.cli import main
from microgpt.core.errors import ConfigError, NonFiniteLoss
from microgpt.data.batches import RandomBatches, SequentialBatches
from microgpt.model.gpt import GPT, GPTConfig
from microgpt.parallel import communicator as distributed
from microgpt.parallel.communicator import SingleProcess, launched_size
from microgpt.parallel.launch import child_environment, dead_rank_line, without_procs
from microgpt.training.data_parallel import RankShare, micro_batch_size, train_step
from microgpt.training.optim import Optimizer

TOKENS = np.arange(500, dtype=np.int32) % 13
TINY = {"d_model": 16, "heads": 2, "n_layers": 1, "d_ff": 32, "seq_len": 16, "backend": "numpy"}


def tiny_model() -> GPT:
    return GPT(GPTConfig(vocab_size=13, d_model=16, n_layers=1, d_ff=32, seq_len=16), get_backend("numpy"), seed=3)


def test_one_process_step_is_exactly_the_models_train_step():
    plain, parallel = tiny_model(), tiny_model()
    adam = Optimizer.reference(parallel.params, 1e-3)
    batches = SequentialBatches(TOKENS, 16, 4)
    for _ in range(5):
        windows = batches.next()
        result = train_step(parallel, windows, adam, SingleProcess())
        assert (result.loss, result.stop, result.save) == (plain.train_step(windows, 1e-3), False, False)
    assert np.array_equal(plain.params.storage, parallel.params.storage)  # bit for bit, moments included


def test_grad_accum_gives_the_mean_gradient_of_the_whole_batch():
    whole, accumulated = tiny_model(), tiny_model()
    windows = SequentialBatches(TOKENS, 16, 8).next()
    whole.params.zero_grad()
    loss, _ = whole.loss_and_backward(windows)
    accumulated_loss = train_step(accumulated, windows, Optimizer.reference(accumulated.params, 1e-3),
                                  SingleProcess(), grad_accum=4).loss
    # The same float32 terms summed in another order: the loss agrees to ~1e-8 relative, each gradient element
    # to a few ulps of the largest gradient (0.4 here, so ~1e-7). 1e-6 leaves room for another BLAS; a wrong
    # scale (the sum of the 4 micro-batch gradients instead of their mean) is off by up to 3 x 0.4.
    assert accumulated_loss == pytest.approx(loss, rel=1e-6)
    np.testing.assert_allclose(accumulated.params.grad, whole.params.grad, rtol=0, atol=1e-6)


def test_grad_accum_trains_like_the_whole_batch(tmp_path):
    corpus = tmp_path / "text.txt"
    corpus.write_text("a small corpus for two short runs, " * 40)
    _, whole = microgpt.train(corpus, steps=10, batch_size=8, save=False, **TINY)
    _, accumulated = microgpt.train(corpus, steps=10, batch_size=8, grad_accum=2, save=False, **TINY)
    # the same windows each step; the micro-batch means are summed in float32 in another order, and ten Adam
    # steps keep such differences near 1e-7 relative. (Adam hardly sees a wrong gradient scale; the test
    # above holds the scale itself.)
    np.testing.assert_allclose(accumulated.losses, whole.losses, rtol=1e-5)


def test_a_nan_loss_on_any_rank_stops_before_the_adam_step():
    class OneRankSawNaN(SingleProcess):
        def agree(self, loss, stop, save=False):
            return math.nan, stop, save  # the all-reduced mean when another rank's loss is NaN

    model = tiny_model()
    before = model.params.storage.copy()
    with pytest.raises(NonFiniteLoss):
        train_step(model, SequentialBatches(TOKENS, 16, 4).next(), Optimizer.reference(model.params, 1e-3),
                   OneRankSawNaN())
    assert model.params.step == 0
    np.testing.assert_array_equal(model.params.data, before[0:1])  # the weights and moments are untouched
    np.testing.assert_array_equal(model.params.m, before[2:3])


@pytest.mark.parametrize("walk", ["sequential", "random"])
def test_rank_shares_make_up_the_global_batch_and_keep_its_state(walk):
    def batcher():
        return RandomBatches(TOKENS, 16, 6, seed=5) if walk == "random" else SequentialBatches(TOKENS, 16, 6)

    single, shares = batcher(), [RankShare(batcher(), rank, 3) for rank in range(3)]
    for _ in range(7):  # past the end of the text, so the sequential walk wraps
        np.testing.assert_array_equal(np.concatenate([share.next() for share in shares]), single.next())
    assert all(json.dumps(share.state()) == json.dumps(single.state()) for share in shares)


def test_a_global_batch_that_does_not_split_evenly_is_a_clear_error():
    assert micro_batch_size(12, 3, 2) == 2
    with pytest.raises(ConfigError, match=r"--batch-size 10 .* 4 processes x --grad-accum 1; use a multiple of 4"):
        micro_batch_size(10, 1, 4)


@pytest.mark.parametrize("variables, expected", [
    ({}, (1, None)),
    ({"PMI_SIZE": "1", "PMI_RANK": "0"}, (1, None)),
    ({"PMI_SIZE": "4", "PMI_RANK": "2"}, (4, "mpiexec (MPICH, Intel MPI)")),
    ({"OMPI_COMM_WORLD_SIZE": "2"}, (2, "mpirun (Open MPI)")),
    ({"SLURM_STEP_NUM_TASKS": "8", "SLURM_NTASKS": "8"}, (8, "srun")),
    ({"SLURM_NTASKS": "8"}, (1, None)),  # a batch script itself, not a task started by srun
])
def test_the_launcher_is_read_from_the_environment(variables, expected):
    assert launched_size(variables) == expected


def test_launched_without_mpi4py_is_one_clear_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PMI_SIZE", "2")
    monkeypatch.setattr(distributed, "_COMMUNICATOR", None)
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # importing it fails, as where it is not installed
    monkeypatch.delitem(sys.modules, "microgpt.parallel.mpi", raising=False)
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--steps", "1", "--gen", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "mpiexec (MPICH, Intel MPI) started 2 processes, but mpi4py is not installed" in err
    assert 'pip install -e ".[mpi]"' in err
    assert not (tmp_path / "checkpoints").exists()


def test_procs_runs_the_same_command_without_procs_one_thread_each():
    assert without_procs(["train", "--procs", "4", "x.txt", "--procs=2", "--steps", "5"]) == ["train", "x.txt",
                                                                                              "--steps", "5"]
    env = child_environment({"PATH": "/bin", "OPENBLAS_NUM_THREADS": "3"})
    assert env["OMP_NUM_THREADS"] == "1" and env["OPENBLAS_NUM_THREADS"] == "3"  # a value given is kept


def test_a_dead_pid_in_mpiexecs_report_is_named_by_its_rank():
    header = "processes: rank 0 pid 700 on node1.example, rank 1 pid 700 on node2, rank 2 pid 812 on node2\n"
    report = "=   PID 812 RUNNING AT node2.cluster\n=   EXIT CODE: 9\nEXIT STRING: Killed (signal 9)\n"
    assert dead_rank_line(header + report, 3) == ("microgpt train: error: rank 2 of 3 (pid 812 on node2.cluster) "
                                                 "died: Killed (signal 9); mpiexec stopped every rank")
    assert dead_rank_line(header + report.replace("812", "700"), 3).startswith("microgpt train: error: a rank")
    assert dead_rank_line(header + report.replace("node2.cluster", "node2").replace("812", "700"), 3).startswith(
        "microgpt train: error: rank 1 of 3 (pid 700 on node2)")
    assert dead_rank_line(header, 3) is None
