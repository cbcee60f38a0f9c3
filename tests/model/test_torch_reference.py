"""microgpt against an independent PyTorch model (benchmarks/torch_gpt.py), in float64.

In the spirit of llm.c's test: the same initial weights go into both; the
logits, the loss and, after one backward, every parameter gradient must agree
(our hand-written backward against autograd); then a short trajectory of Adam
steps must give the same losses, and a checkpoint saved halfway, reloaded and
continued must stay on the same trajectory; and 10 steps of our warm-up, cosine,
clipping and AdamW against torch.optim.AdamW and clip_grad_norm_. Skipped when
torch is not importable (CI does not install it). Each test runs on the NumPy
backend and on the cpu backend (numba's kernels), both in float64.

Tolerance: both sides compute in float64, so they differ only by rounding in a
different order of operations (summation order in matmuls, softmax, LayerNorm).
That is ~1e-16 relative per op; measured, the largest difference in logits or
gradients is ~6e-15. rtol 1e-10 / atol 1e-12 keeps a 100x margin over rounding
while any real error (a wrong sign, a missed term, a transposed weight, an
off-by-one RoPE angle: these show up at 1e-4 or more) fails by orders of
magnitude.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from extras import need
from microgpt.backends import get_backend
from microgpt.model.gpt import GPT, GPTConfig
from microgpt.settings.training import TrainConfig
from microgpt.training.optim import Optimizer, learning_rate
from tiny_gpt import windows_for

torch = need("torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from microgpt.data.tokenizer import CharTokenizer
from microgpt.model.checkpoint import load_checkpoint, save_checkpoint
from torch_gpt import (  # after the path above
    TorchGPT,
    load_from_microgpt,
    make_adam,
    make_adamw,
    microgpt_named_parameters,
    train_step,
)

RTOL, ATOL = 1e-10, 1e-12

# The default shape (small), unequal widths with an odd one (RoPE's untouched last
# column) and a width-1 head, and one layer of a single head.
CONFIGS = [
    GPTConfig(vocab_size=65, d_model=32, n_layers=2, head_dims=(8, 8, 8, 8), d_ff=64, seq_len=16),
    GPTConfig(vocab_size=40, d_model=24, n_layers=2, head_dims=(1, 7, 8, 8), d_ff=48, seq_len=12),
    GPTConfig(vocab_size=11, d_model=6, n_layers=1, head_dims=(6,), d_ff=10, seq_len=5),
]


BACKENDS = ["numpy", "cpu"]


def make_pair(config: GPTConfig, backend: str) -> tuple[GPT, TorchGPT]:
    ours = GPT(config, get_backend(backend, dtype=np.float64), seed=3)
    theirs = TorchGPT(
        config.vocab_size, config.d_model, config.n_layers, config.head_dims, config.d_ff, config.seq_len
    ).double()
    load_from_microgpt(theirs, ours.params.to_host())
    return ours, theirs


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("config", CONFIGS, ids=["default-like", "unequal-odd", "one-head"])
def test_logits_agree(config, backend):
    ours, theirs = make_pair(config, backend)
    ids = windows_for(config, 3, 7)[:, :-1]  # (B, T)
    expected = theirs(torch.from_numpy(ids)).detach().numpy()  # (B, T, V)
    got = np.asarray(ours.logits(ids)).reshape(expected.shape)
    np.testing.assert_allclose(got, expected, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_fused_qkv_baseline_is_the_same_model(backend):
    """bench_cpu.py's torch side (one q, k, v product, one RoPE call) trains what we do: its logits and its loss
    after two Adam steps are ours, in float64, from the same weights."""
    config = CONFIGS[0]
    ours = GPT(config, get_backend(backend, dtype=np.float64), seed=3)
    fused = TorchGPT(config.vocab_size, config.d_model, config.n_layers, config.head_dims, config.d_ff,
                     config.seq_len, fused_qkv=True).double()
    load_from_microgpt(fused, ours.params.to_host())
    windows = windows_for(config, 3, 7)
    expected = fused(torch.from_numpy(windows[:, :-1])).detach().numpy()  # (B, T, V)
    np.testing.assert_allclose(np.asarray(ours.logits(windows[:, :-1])).reshape(expected.shape), expected,
                               rtol=RTOL, atol=ATOL)
    optimizer = make_adam(fused, 1e-2)
    for _ in range(2):
        theirs = train_step(fused, optimizer, torch.from_numpy(windows))
        mine = ours.train_step(windows, 1e-2)
        assert mine == pytest.approx(theirs, rel=1e-9)  # two steps of float64 rounding apart at most
    with pytest.raises(ValueError, match="fused_qkv needs heads of one width"):
        TorchGPT(40, 24, 1, (1, 7, 8, 8), 48, 12, fused_qkv=True)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("config", CONFIGS, ids=["default-like", "unequal-odd", "one-head"])
def test_loss_and_gradients_agree(config, backend):
    ours, theirs = make_pair(config, backend)
    windows = windows_for(config, 3, 7)
    ours.params.zero_grad()
    loss, _ = ours.loss_and_backward(windows)

    ids = torch.from_numpy(windows)
    logits = theirs(ids[:, :-1])  # (B, T, V)
    torch_loss = torch.nn.functional.cross_entropy(
        logits.reshape(-1, config.vocab_size), ids[:, 1:].reshape(-1)
    )
    torch_loss.backward()

    assert loss == pytest.approx(torch_loss.item(), rel=RTOL, abs=ATOL)
    grads = ours.params.to_host(ours.params.grad)
    for name, (param, transposed) in microgpt_named_parameters(theirs).items():
        expected = param.grad.T if transposed else param.grad
        np.testing.assert_allclose(grads[name], expected.numpy(), rtol=RTOL, atol=ATOL, err_msg=name)


@pytest.mark.parametrize("backend", BACKENDS)
def test_adam_trajectory_agrees_and_survives_save_reload_continue(tmp_path, backend):
    # Adam divides by sqrt(v) + eps, which amplifies rounding in the first steps where v is tiny;
    # float64 keeps the two trajectories within ~1e-12 over these steps, so 1e-9 still catches any real
    # difference in the update (a wrong bias correction shifts the losses by 1e-3 or more).
    config = CONFIGS[1]
    ours, theirs = make_pair(config, backend)
    optimizer = make_adam(theirs, lr=1e-2)
    rng = np.random.default_rng(11)
    batches = [rng.integers(0, config.vocab_size, size=(2, config.seq_len + 1)) for _ in range(10)]
    expected = [train_step(theirs, optimizer, torch.from_numpy(b)) for b in batches]
    first = [ours.train_step(b, 1e-2) for b in batches[:5]]
    save_checkpoint(tmp_path / "ck", ours, CharTokenizer("".join(chr(65 + i) for i in range(config.vocab_size))), {}, family_name="gpt")
    # The checkpoint holds float32 weights and moments, so the reloaded float64 run continues from
    # rounded values: its losses move by ~1e-7 relative, far below the 1e-3 of a lost Adam state.
    reloaded, _, _ = load_checkpoint(tmp_path / "ck", get_backend(backend, dtype=np.float64), with_optimizer=True)
    rest = [reloaded.train_step(b, 1e-2) for b in batches[5:]]
    np.testing.assert_allclose(first, expected[:5], rtol=1e-9)
    np.testing.assert_allclose(rest, expected[5:], rtol=1e-5)
    assert reloaded.params.step == 10


@pytest.mark.parametrize("backend", BACKENDS)
def test_adamw_with_schedule_and_clipping_agrees_with_torch_adamw(backend):
    # Our warm-up and cosine, AdamW (betas 0.9, 0.99, decay 0.1 on the Linear weights only) and clipping to a
    # global norm against torch.optim.AdamW with two parameter groups and clip_grad_norm_, lr set per step
    # from our schedule. Same tolerance argument as the Adam trajectory above (float64, 10 steps).
    config = CONFIGS[1]
    ours, theirs = make_pair(config, backend)
    train = TrainConfig(steps=10, lr=1e-2, warmup=3, lr_schedule="cosine", min_lr=1e-3, weight_decay=0.1,
                        beta2=0.99, grad_clip=0.5)
    optimizer = Optimizer(ours.params, train)
    torch_optimizer = make_adamw(theirs, lr=1e-2, betas=(0.9, 0.99), weight_decay=0.1)
    rng = np.random.default_rng(12)
    batches = [rng.integers(0, config.vocab_size, size=(2, config.seq_len + 1)) for _ in range(10)]
    expected = [train_step(theirs, torch_optimizer, torch.from_numpy(b), learning_rate(train, t), grad_clip=0.5)
                for t, b in enumerate(batches, 1)]
    got, norms = [], []
    for b in batches:
        got.append(ours.gradients(b))
        norms.append(optimizer.step().grad_norm)
    assert max(norms) > 0.5  # the clip acted on some steps, so it is tested
    np.testing.assert_allclose(got, expected, rtol=1e-9)
    # atol 1e-10: a few elements (of the key bias, whose exact gradient is ~0 as it shifts every score of a
    # query alike) stay near 0, where both sides hold rounding noise of ~1e-12; real errors are >= 1e-4.
    for name, (param, transposed) in microgpt_named_parameters(theirs).items():
        value = param.detach().T if transposed else param.detach()
        np.testing.assert_allclose(ours.params.to_host()[name], value.numpy(), rtol=1e-9, atol=1e-10, err_msg=name)
