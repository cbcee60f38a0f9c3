"""The training speed a model of P parameters can expect on this machine, estimated before it runs.

A training step does about 6 x P floating-point operations per token (forward and backward through every
weight). The speed is that count against this machine's effective rate: measured from the runs already in
the workspace (results.jsonl: each run's tokens/s x 6 x its parameters), the median over the latest runs
nearest the model in size (a tiny model's step is mostly per-operation overhead, so its rate is far below a
large one's, and a median over every size overstated it), or, before any run, from a timed float32 matrix
product with one thread, times a share that the reference default run reaches. Attention's T^2 work is left out, so for long contexts the figure is high; the canvas says it is an
estimate and which basis it used.
"""

from __future__ import annotations

import json
import math
import statistics
import time

import numpy as np
from threadpoolctl import threadpool_limits

from microgpt.core.user_files import read_tail
from microgpt.training.run_files import MAX_LOG_LINE
from microgpt.training.run_list import results_files

FLOPS_PER_PARAMETER = 6  # per token, forward and backward
MATMUL_SHARE = 0.5  # of a one-thread matrix product's rate that a training step reaches (the default run, roughly)
LATEST_RESULTS = 20  # the results lines the calibration reads, from the last LATEST_RESULTS x MAX_LOG_LINE bytes
NEAREST_RUNS = 3  # the runs nearest the model in size (by the ratio of parameters) whose rates count
_measured: dict[str, float] = {}


def matmul_rate() -> float:
    """Floating-point operations per second of a 256 x 256 float32 matrix product here (measured once)."""
    if "rate" not in _measured:
        a = np.random.default_rng(0).standard_normal((256, 256), dtype=np.float32)
        with threadpool_limits(1):  # as a studio run trains: one thread each
            a @ a  # warm up
            start, repeats = time.perf_counter(), 20
            for _ in range(repeats):
                a @ a
            _measured["rate"] = repeats * 2 * 256**3 / (time.perf_counter() - start)
    return _measured["rate"]


def workspace_rates(workspace) -> list[tuple[int, float]]:
    """(parameters, effective rate) of each of the workspace's latest finished runs."""
    runs = []
    for path in results_files(workspace.checkpoints()):
        try:
            lines = read_tail(path, LATEST_RESULTS * MAX_LOG_LINE)[-LATEST_RESULTS:]
        except OSError:  # unreadable, or not a regular file: no rates from it
            continue
        for line in lines:
            try:
                record = json.loads(line.decode("utf-8", errors="replace"))
                parameters = int(record["parameters"])
                rate = float(record["tokens_per_sec"]) * FLOPS_PER_PARAMETER * parameters
            except (ValueError, KeyError, TypeError, RecursionError, OverflowError):
                continue
            if parameters > 0 and rate > 0 and math.isfinite(rate):
                runs.append((parameters, rate))
    return runs


def expected_tokens_per_second(parameters: int, workspace) -> tuple[float, str]:
    """(tokens/s, the basis of the estimate) for a model of `parameters` parameters."""
    runs = workspace_rates(workspace)
    if runs:
        nearest = sorted(runs, key=lambda run: abs(math.log(run[0] / parameters)))[:NEAREST_RUNS]
        rate = statistics.median(run_rate for _, run_rate in nearest)
        return rate / (FLOPS_PER_PARAMETER * parameters), "the runs in this workspace nearest its size"
    return (matmul_rate() * MATMUL_SHARE / (FLOPS_PER_PARAMETER * parameters),
            "a timed matrix product on this machine")
