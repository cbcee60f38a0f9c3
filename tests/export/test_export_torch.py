"""`microgpt.export.to_torch(DIR)` and `microgpt export --format torch`: a self-contained torch.nn.Module whose
logits are microgpt's for every family and tokenizer; model.pt loads with torch.load(weights_only=True) and
the shipped module alone (no microgpt import); 10 AdamW steps in PyTorch follow microgpt's own 10; it runs
under torch.compile. Skipped, with the reason, where torch is missing.
"""

from __future__ import annotations

import ast
import subprocess
import sys

import numpy as np
import pytest

import microgpt
from export_cases import CASES, ROOT, SEQ_LEN, TRAINABLE, checkpoint, probe
from extras import need
from microgpt.backends import get_backend
from microgpt.cli import main
from microgpt.model.checkpoint import load_checkpoint
from microgpt.settings.training import TrainConfig
from microgpt.training.optim import Optimizer

torch = need("torch")
from microgpt.export import to_torch
from microgpt.export.torch_module import load  # after the skip: it imports torch

# Logits: float32 on both sides (the module is float32, as the checkpoint), the same operations summed in
# other orders (matmul blocking, softmax and LayerNorm sums, the router's host NumPy); measured at most 5e-6
# at these logits' sizes (up to about 3), so 1e-5 holds with room, and a wrong op misses it by 1e-2 or more.
LOGITS_TOLERANCE = 1e-5
SHAPES = [(1, 1), (3, 5), (2, SEQ_LEN)]


@pytest.mark.parametrize("case", list(CASES))
def test_the_module_gives_microgpts_logits(case):
    loaded = microgpt.load(checkpoint(case))  # the cpu backend (auto, without a GPU)
    module = to_torch(checkpoint(case))
    assert isinstance(module, torch.nn.Module) and module.vocab_size == loaded.tokenizer.size
    with torch.no_grad():
        for batch, length in SHAPES:
            ids = probe(loaded.tokenizer.size, batch, length, seed=batch)
            got = module(torch.from_numpy(ids)).numpy()
            np.testing.assert_allclose(got, loaded.logits(ids.astype(np.int32)), rtol=0, atol=LOGITS_TOLERANCE)
    weights = loaded.model.params.to_host()
    for name, value in module.state_dict().items():  # every weight under the checkpoint's own name
        np.testing.assert_array_equal(value.numpy(), weights[name])


def test_model_pt_loads_with_the_shipped_module_alone(tmp_path, capsys):
    case = "ensemble-trigram-gated"
    out = tmp_path / "model.pt"
    assert main(["export", str(checkpoint(case)), "--out", str(out)]) == 0  # the format from the suffix
    assert capsys.readouterr().out.startswith(f"{out}: ensemble")
    data = torch.load(out, weights_only=True)
    assert data["format"] == "microgpt-torch" and set(data) >= {"plan", "state_dict", "info"}
    ids = probe(data["plan"]["vocab"], 2, SEQ_LEN)
    with torch.no_grad():
        expected = to_torch(checkpoint(case))(torch.from_numpy(ids))
        assert torch.equal(load(out)(torch.from_numpy(ids)), expected)
    shipped = ROOT / "src" / "microgpt" / "export" / "torch_module.py"
    imported = {n.module or "" for n in ast.walk(ast.parse(shipped.read_text())) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(ast.parse(shipped.read_text())) if isinstance(n, ast.Import) for a in n.names}
    assert not {name for name in imported if name.startswith("microgpt")}
    from microgpt.export import export_plan as plan
    from microgpt.export import torch_module

    assert torch_module.PLAN_FORMAT == plan.PLAN_FORMAT  # the shipped module runs the plans export writes
    (tmp_path / "alone").mkdir()
    (tmp_path / "alone" / "torch_module.py").write_text(shipped.read_text())
    np.save(tmp_path / "ids.npy", ids)
    script = ("import sys, numpy, torch; sys.path.insert(0, 'alone'); from torch_module import load; "
              "out = load('model.pt')(torch.from_numpy(numpy.load('ids.npy'))); torch.save(out, 'out.pt'); "
              "assert not [m for m in sys.modules if m.startswith('microgpt')], 'microgpt was imported'")
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert torch.equal(torch.load(tmp_path / "out.pt"), expected)


# Training runs in float64 on both sides (microgpt's numpy backend in float64, the module .double()), from
# the checkpoint's float32 weights. In float32 the comparison would hold rounding, not the optimiser: the
# attention's key biases have an exact gradient of 0 (they shift every score of a query alike), so each side
# holds rounding noise of ~1e-9 there, and Adam divides it by its own size, moving those weights by ±lr at
# random. In float64 that noise is ~1e-18, far under Adam's eps 1e-8, and the two trajectories agree to
# ~1e-12 (measured); 1e-4 (the bound) leaves every real difference (a missed decay mask, other
# betas, a wrong gradient) far outside it: those move the weights by 1e-3 (lr) within a step.
TRAIN_TOLERANCE = 1e-4
STEPS, BATCH, LR, BETAS, WEIGHT_DECAY = 10, 4, 3e-3, (0.9, 0.95), 0.1


def microgpt_steps(case: str, windows: list[np.ndarray]) -> tuple[list[float], dict]:
    """(each step's loss, the weights after) of microgpt's own AdamW from the checkpoint's weights."""
    model, _, _ = load_checkpoint(checkpoint(case), get_backend("numpy", dtype=np.float64))
    model.params.step = 0  # a fresh optimiser, as torch's
    config = TrainConfig(steps=STEPS, lr=LR, warmup=0, lr_schedule="constant", weight_decay=WEIGHT_DECAY,
                         beta1=BETAS[0], beta2=BETAS[1], grad_clip=None)
    optimizer = Optimizer(model.params, config)
    losses = []
    for batch in windows:
        model.params.zero_grad()
        loss, _ = model.loss_and_backward(batch)
        losses.append(float(loss))
        optimizer.step()
    return losses, model.params.to_host()


@pytest.mark.parametrize("case", TRAINABLE)
def test_ten_adamw_steps_in_torch_follow_microgpts(case):
    module = to_torch(checkpoint(case)).double().train()
    vocab = module.vocab_size
    windows = [probe(vocab, BATCH, SEQ_LEN + 1, seed=100 + i) for i in range(STEPS)]
    expected_losses, expected = microgpt_steps(case, windows)
    optimizer = torch.optim.AdamW(module.param_groups(WEIGHT_DECAY), lr=LR, betas=BETAS, eps=1e-8)
    losses = []
    for batch in windows:
        ids = torch.from_numpy(batch)
        loss = torch.nn.functional.cross_entropy(module(ids[:, :-1]).flatten(0, 1), ids[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    np.testing.assert_allclose(losses, expected_losses, rtol=0, atol=TRAIN_TOLERANCE)
    before = microgpt.load(checkpoint(case), backend="numpy").model.params.to_host()
    moved = 0.0
    for name, value in module.state_dict().items():
        np.testing.assert_allclose(value.numpy(), expected[name], rtol=0, atol=TRAIN_TOLERANCE, err_msg=name)
        moved = max(moved, float(np.abs(expected[name] - before[name]).max()))
    assert moved > 10 * TRAIN_TOLERANCE  # the steps moved the weights well past the tolerance


def compile_unavailable() -> str | None:
    """Why torch.compile cannot run here (no C++ compiler, an unsupported build), or None."""
    try:
        torch.compile(lambda x: x * 2)(torch.ones(2))
    except Exception as exc:  # noqa: BLE001  (whatever this build lacks, the test is skipped with it)
        return f"torch.compile is unavailable in this build: {type(exc).__name__}: {str(exc)[:200]}"
    return None


def test_the_module_runs_and_trains_under_torch_compile():
    reason = compile_unavailable()
    if reason:
        pytest.skip(reason)
    module = to_torch(checkpoint("small"))  # one layer of one head: the compile is most of the test's time
    compiled = torch.compile(module)
    ids = torch.from_numpy(probe(module.vocab_size, 2, SEQ_LEN + 1, seed=9))
    logits = compiled(ids[:, :-1])
    # the same float32 ops fused by Inductor in another order: measured within 2e-6 of eager
    torch.testing.assert_close(logits, module(ids[:, :-1]), rtol=0, atol=LOGITS_TOLERANCE)
    torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten()).backward()
    grads = {name: p.grad.clone() for name, p in module.named_parameters()}
    module.zero_grad()
    torch.nn.functional.cross_entropy(module(ids[:, :-1]).flatten(0, 1), ids[:, 1:].flatten()).backward()
    for name, p in module.named_parameters():
        torch.testing.assert_close(grads[name], p.grad, rtol=0, atol=LOGITS_TOLERANCE, msg=name)


def test_weights_named_as_module_attributes_keep_apart():
    """A graph may name a node `forward`, `rope` or `training`: each weight still gets its own parameter (a
    trailing _ where nn.Module has the name) and the RoPE tables their own module."""
    from microgpt.export.torch_module import ExportedModel

    plan = {"format": 1, "vocab": 5, "seq_len": 4, "ids": "ids", "logits": "v2",
            "weights": {"forward": {"shape": [5, 2], "decay": False, "trainable": True},
                        "rope.w": {"shape": [2, 5], "decay": True, "trainable": True},
                        "training.b": {"shape": [5], "decay": False, "trainable": False}},
            "steps": [{"op": "embedding", "inputs": ["ids"], "outputs": ["v1"], "params": {"width": 2},
                       "weights": {"table": "forward"}},
                      {"op": "linear", "inputs": ["v1"], "outputs": ["v2"], "params": {"relu": False},
                       "weights": {"w": "rope.w", "b": "training.b"}}]}
    module = ExportedModel(plan)
    assert module.paths == {"forward": "forward_", "rope.w": "rope.w", "training.b": "training_.b"}
    assert module.tables_name == "rope_"
    weights = {"forward_": torch.randn(5, 2), "rope.w": torch.randn(2, 5), "training_.b": torch.randn(5)}
    module.load_state_dict(weights)
    ids = torch.tensor([[0, 3, 4]])
    torch.testing.assert_close(module(ids), weights["forward_"][ids] @ weights["rope.w"] + weights["training_.b"])
    groups = module.param_groups(0.1)
    assert [len(g["params"]) for g in groups] == [1, 1]  # rope.w decays; forward does not; training.b is frozen
