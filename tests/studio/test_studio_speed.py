"""The studio's speed estimate (studio/speed.py): from the workspace's runs nearest the model in size, else from
a timed matrix product; a damaged results line is passed over."""

from __future__ import annotations

import json
import math

import pytest

from microgpt.studio.speed import FLOPS_PER_PARAMETER, MATMUL_SHARE, expected_tokens_per_second, matmul_rate


class Finished:
    """A stand-in for the studio's Workspace: checkpoints in one folder, and the results.jsonl beside them."""

    def __init__(self, root, runs: list[tuple[int, float]], damaged: str = ""):
        self.root = root
        lines = [json.dumps({"checkpoint": f"run{i}", "parameters": parameters, "tokens_per_sec": speed})
                 for i, (parameters, speed) in enumerate(runs)]
        (root / "results.jsonl").write_text("\n".join(lines + ([damaged] if damaged else [])) + "\n", encoding="utf-8")

    def checkpoints(self):
        return [self.root / "run0"]


def rate(parameters: int, tokens_per_second: float) -> float:
    return tokens_per_second * FLOPS_PER_PARAMETER * parameters


def test_a_tiny_model_is_estimated_from_the_tiny_runs_not_the_large_ones(tmp_path):
    tiny, large = [(2_000, 40_000.0), (3_000, 30_000.0), (2_500, 36_000.0)], [(5_000_000, 2_000.0)] * 4
    workspace = Finished(tmp_path, tiny + large)
    speed, basis = expected_tokens_per_second(2_400, workspace)
    assert basis == "the runs in this workspace nearest its size"
    # the median rate of the three tiny runs (36,000 tok/s at 2,500 parameters), the large ones' far higher
    assert speed == pytest.approx(rate(2_500, 36_000.0) / (FLOPS_PER_PARAMETER * 2_400))
    large_speed, _ = expected_tokens_per_second(4_000_000, workspace)
    assert large_speed == pytest.approx(rate(5_000_000, 2_000.0) / (FLOPS_PER_PARAMETER * 4_000_000))


def test_damaged_or_empty_results_fall_back_to_the_timed_product(tmp_path):
    workspace = Finished(tmp_path, [(0, 100.0), (1000, 0.0)], damaged='{"parameters": "many"')
    speed, basis = expected_tokens_per_second(10_000, workspace)
    assert basis == "a timed matrix product on this machine"
    assert speed == pytest.approx(matmul_rate() * MATMUL_SHARE / (FLOPS_PER_PARAMETER * 10_000))
    # a measured rate: positive and finite, and measured once (so every estimate agrees). Not a floor on it,
    # which a machine busy with other jobs could fall under
    assert 0 < matmul_rate() < math.inf and matmul_rate() == matmul_rate()
