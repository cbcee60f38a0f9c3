"""The optimiser (optim.py): the schedules against their formulas, clipping against a hand-computed norm,
AdamW's update on every backend path, `--preset reference` against the reference's Adam, bad settings, and a
resume in the middle of warm-up and of cosine decay against a straight run."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import microgpt
from microgpt.backends import get_backend
from microgpt.backends.base import Backend
from microgpt.cli import main
from microgpt.core.errors import ConfigError
from microgpt.data.batches import SequentialBatches
from microgpt.data.tokenizer import CharTokenizer
from microgpt.model.gpt import GPT, GPTConfig
from microgpt.settings.sources import Settings
from microgpt.settings.training import TrainConfig
from microgpt.training.optim import Optimizer, grad_norm, learning_rate

TEXT = "the quick brown fox jumps over the lazy dog. " * 40
SHAPE = {"d_model": 16, "heads": "2", "n_layers": 1, "d_ff": 32, "seq_len": 16}
TINY = ["--d-model", "16", "--heads", "2", "--n-layers", "1", "--d-ff", "32", "--seq-len", "16", "--gen", "0", "--quiet"]


def tiny_model(dtype=np.float32, seed: int = 0) -> tuple[GPT, SequentialBatches]:
    tok = CharTokenizer.from_text(TEXT)
    config = GPTConfig(vocab_size=tok.size, d_model=16, head_dims=(8, 8), n_layers=1, d_ff=32, seq_len=16)
    return GPT(config, get_backend("numpy", dtype=dtype), seed=seed), SequentialBatches(tok.encode(TEXT), 16, 4)


# ---- the schedule --------------------------------------------------------------------------------------

def test_constant_schedule_with_warmup():
    cfg = TrainConfig(steps=100, lr=1e-3, warmup=10, lr_schedule="constant")
    for t in (1, 5, 10):
        assert learning_rate(cfg, t) == pytest.approx(1e-3 * t / 10, rel=1e-15)  # rounding of one product
    assert learning_rate(cfg, 11) == learning_rate(cfg, 100) == 1e-3


def test_cosine_schedule_at_chosen_steps():
    cfg = TrainConfig(steps=1000, lr=1e-3, warmup=100, lr_schedule="cosine", min_lr=1e-4)
    assert learning_rate(cfg, 50) == pytest.approx(5e-4, rel=1e-15)
    assert learning_rate(cfg, 100) == pytest.approx(1e-3, rel=1e-15)
    # halfway through the decay, (100 + 1000) / 2: cos(pi/2) = 0, so the mean of lr and min_lr
    assert learning_rate(cfg, 550) == pytest.approx(5.5e-4, rel=1e-12)
    # a quarter of the way: min + (1 + cos(pi/4)) / 2 * (lr - min)
    assert learning_rate(cfg, 325) == pytest.approx(1e-4 + 0.5 * (1 + math.cos(math.pi / 4)) * 9e-4, rel=1e-12)
    assert learning_rate(cfg, 1000) == 1e-4


def test_cosine_ends_at_decay_steps_and_defaults_to_a_tenth_of_lr():
    cfg = TrainConfig(steps=1000, lr=1e-3, warmup=0, lr_schedule="cosine", decay_steps=400)
    assert cfg.min_lr is None
    assert learning_rate(cfg, 200) == pytest.approx(1e-4 + 0.5 * 9e-4, rel=1e-12)
    assert learning_rate(cfg, 400) == learning_rate(cfg, 900) == pytest.approx(1e-4, rel=1e-15)


# ---- clipping and the update ---------------------------------------------------------------------------

def test_grad_norm_is_the_global_l2_norm_and_clipping_scales_to_it():
    model, batches = tiny_model(np.float64)
    windows = batches.next()
    model.gradients(windows)
    grads = model.params.to_host(model.params.grad)
    by_hand = math.sqrt(sum(float(np.sum(g.astype(np.float64) ** 2)) for g in grads.values()))
    assert grad_norm(model.params) == pytest.approx(by_hand, rel=1e-12)  # float64: rounding of one dot product
    clip = by_hand / 4  # well under the norm, so the step must see the gradients at a quarter of their size
    clipped = Optimizer(model.params, TrainConfig(lr=1e-2, warmup=0, weight_decay=0.0, grad_clip=clip, beta2=0.99))
    twin, _ = tiny_model(np.float64)
    twin.gradients(windows)
    twin.params.grad[...] *= clip / (by_hand + 1e-6)  # what torch.nn.utils.clip_grad_norm_ does
    unclipped = Optimizer(twin.params, TrainConfig(lr=1e-2, warmup=0, weight_decay=0.0, grad_clip=1e9, beta2=0.99))
    assert clipped.step().grad_norm == pytest.approx(by_hand, rel=1e-12)
    unclipped.step()
    # the same update from the same numbers, one side scaling inside the update: rounding only
    np.testing.assert_allclose(model.params.to_host()["head.w"], twin.params.to_host()["head.w"], rtol=1e-13)


def test_gpt_decays_exactly_its_weight_matrices_and_trains_everything():
    model, _ = tiny_model()
    mask = model.params.to_host(model.params.mask("decay"))
    # the linear layers' weights (attention, feed-forward, head); not the embedding, LayerNorm or biases
    assert {name for name, m in mask.items() if np.all(m == 1)} == {n for n in mask if n.endswith(".w")}
    assert {name for name, m in mask.items() if np.all(m == 0)} == {n for n in mask if not n.endswith(".w")}
    assert model.params.all_trainable and model.params.trainable_runs() == [(0, model.params.total)]


def test_backend_default_adamw_matches_the_numpy_backend():
    """`Backend.adamw_step` (host copies, what a backend without its own update runs) against NumPy's own."""
    be = get_backend("numpy")
    rng = np.random.default_rng(0)
    a = [be.from_host(rng.normal(size=(1, 50))) for _ in range(3)] + [be.from_host(rng.random((1, 50)))]
    b = [x.copy() for x in a]
    mask, train = (be.from_host((rng.random((1, 50)) > 0.5).astype(np.float64)) for _ in range(2))
    for t in (1, 2):
        be.adamw_step(*a, mask, train, 1e-2, t, 0.8, 0.95, 0.1, 0.5)
        Backend.adamw_step(be, *b, mask, train, 1e-2, t, 0.8, 0.95, 0.1, 0.5)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)  # the same NumPy code on the same float32 numbers


def test_every_backend_adamw_step_matches_the_float64_formula(backend, reference):
    """Each backend's update (its own or the host default) against the NumPy formula in float64."""
    rng = np.random.default_rng(2)
    host = [rng.normal(size=(1, 300)) for _ in range(3)] + [rng.random((1, 300))]  # param, grad, m, v
    masks = [(rng.random((1, 300)) > 0.5).astype(np.float64) for _ in range(2)]  # decay, train
    ours = [backend.from_host(a) for a in host]
    exact = [reference.from_host(a) for a in host]
    for t in (1, 2, 3):
        backend.adamw_step(*ours, *(backend.from_host(a) for a in masks), 1e-2, t, 0.8, 0.95, 0.1, 0.5)
        reference.adamw_step(*exact, *(reference.from_host(a) for a in masks), 1e-2, t, 0.8, 0.95, 0.1, 0.5)
    for got, want in zip(ours, exact):
        # float32 against float64 over three steps: a few float32 roundings of values of order 1
        np.testing.assert_allclose(backend.to_host(got), want, rtol=1e-5, atol=1e-6)


def test_plain_settings_through_adamw_equal_the_reference_adam():
    """The AdamW op with the reference's betas, no decay and no clipping is the reference's Adam, bit for bit."""
    be = get_backend("numpy")
    rng = np.random.default_rng(1)
    a = [be.from_host(rng.normal(size=(1, 40))) for _ in range(3)] + [be.from_host(rng.random((1, 40)))]
    b = [x.copy() for x in a]
    for t in (1, 2, 3):
        be.adam_step(*a, 3e-4, t)
        be.adamw_step(*b, be.zeros((1, 40)), be.from_host(np.ones((1, 40))), 3e-4, t, 0.9, 0.999, 0.0, 1.0)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


# ---- the reference preset ------------------------------------------------------------------------------

def test_reference_preset_gives_the_reference_settings():
    cfg = Settings({"preset": "reference"}).train_config()
    assert (cfg.steps, cfg.lr, cfg.batch_size, cfg.warmup, cfg.lr_schedule, cfg.weight_decay) == (10000, 3e-4, 1, 0,
                                                                                                   "constant", 0.0)
    assert (cfg.beta1, cfg.beta2, cfg.grad_clip, cfg.val_tokens) == (0.9, 0.999, None, 0)
    model = Settings({"preset": "reference"}).model_config(vocab_size=50)
    assert (model.d_model, model.n_layers, model.head_dims, model.d_ff, model.seq_len) == (64, 2, (16,) * 4, 256, 128)
    assert Settings({"preset": "reference", "lr": 1e-3}).train_config().lr == 1e-3  # a flag overrides it


def test_reference_preset_trains_bit_identically_to_params_adam_step(tmp_path):
    (tmp_path / "t.txt").write_text(TEXT)
    _, summary = microgpt.train(str(tmp_path / "t.txt"), preset="reference", steps=30, batch_size=4, save=False,
                                backend="numpy", **SHAPE)
    model, batches = tiny_model(seed=42)  # the preset's seed
    expected = [model.train_step(batches.next(), 3e-4) for _ in range(30)]  # the reference's step
    assert summary.losses == expected  # the same floats


# ---- bad settings and resumes --------------------------------------------------------------------------

@pytest.mark.parametrize(("settings", "words"), [
    ({"warmup": 20, "steps": 10}, "--warmup 20 is longer than the run"),
    ({"min_lr": 1e-2, "lr": 1e-3}, "--min-lr 0.01 must be between 0 and --lr"),
    ({"weight_decay": -0.1}, "--weight-decay must be 0 or more"),
    ({"grad_clip": 0}, "--grad-clip must be above 0"),
    ({"beta1": 1.0}, "--beta1 must be at least 0 and below 1"),
    ({"beta2": -0.5}, "--beta2 must be at least 0 and below 1"),
    ({"decay_steps": 5, "warmup": 5}, "--decay-steps 5 must come after the warm-up"),
    ({"preset": "nanogpt"}, "--preset must be one of reference"),
])
def test_bad_optimiser_settings_get_one_clear_line(settings, words):
    with pytest.raises(ConfigError, match=words.replace("(", r"\(")) as caught:
        Settings(settings).train_config()
    assert "\n" not in str(caught.value)


def test_grad_clip_off_and_the_default_warmup():
    assert Settings({"grad_clip": "off"}).train_config().grad_clip is None
    assert Settings({"steps": 50}).train_config().warmup == 5  # the default warm-up is at most a tenth of the run
    assert Settings({"steps": 5000}).train_config().warmup == 100


def run_losses(path) -> list[float]:
    return [json.loads(line)["loss"] for line in path.read_text().splitlines()]


@pytest.mark.parametrize("stop_at", [20, 70], ids=["mid-warmup", "mid-cosine"])
def test_resume_mid_schedule_is_bit_identical(tmp_path, monkeypatch, capsys, stop_at):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "text.txt").write_text(TEXT)
    recipe = ["--warmup", "40", "--lr-schedule", "cosine", "--lr", "3e-3", "--min-lr", "1e-4", "--weight-decay",
              "0.1", "--beta2", "0.99", "--grad-clip", "1.0", "--batch-size", "2"]
    common = ["train", "text.txt", *TINY, *recipe, "--decay-steps", "100"]
    assert main([*common, "--steps", "100", "--model", "one"]) == 0
    assert main([*common, "--steps", str(stop_at), "--model", "two"]) == 0
    assert main(["train", "--resume", "two", "--steps", "100", "--gen", "0", "--quiet"]) == 0
    one, two = run_losses(tmp_path / "one.metrics.jsonl"), run_losses(tmp_path / "two.metrics.jsonl")
    assert len(one) == len(two) == 100
    assert one == two  # bit-identical: the same floats, not merely close
    assert all("grad_norm" in json.loads(line) for line in (tmp_path / "one.metrics.jsonl").read_text().splitlines())
    capsys.readouterr()
    assert main(["train", "--resume", "two", "--steps", "120", "--lr-schedule", "constant", "--gen", "0",
                 "--quiet"]) == 0
    assert "note: --lr-schedule constant overrides the checkpoint's cosine" in capsys.readouterr().out


def test_a_frozen_parameter_never_moves_and_does_not_count_in_the_clipping_norm(backend_name):
    from microgpt.model.params import Parameters, ParamSpec

    be = get_backend(backend_name)
    specs = [ParamSpec("a", (3, 5), 0.5, decay=True), ParamSpec("frozen", (7,), 0.5, decay=True, trainable=False),
             ParamSpec("c", (4,), 0.5)]
    params = Parameters(be, specs)
    params.initialize(0)
    before = params.to_host()
    optimizer = Optimizer(params, TrainConfig(steps=10, warmup=0, grad_clip=0.1, weight_decay=0.5))
    rng = np.random.default_rng(1)
    for _ in range(3):
        grads = {spec.name: rng.normal(size=spec.shape) for spec in specs}
        params.from_host(grads, params.grad)
        norm = optimizer.step().grad_norm
        trainable = np.concatenate([grads["a"].ravel(), grads["c"].ravel()])
        assert norm == pytest.approx(np.linalg.norm(trainable), rel=1e-5)  # float32 sums of 19 squares
    after = params.to_host()
    np.testing.assert_array_equal(after["frozen"], before["frozen"])  # bit for bit: no decay, no update
    assert not np.allclose(after["a"], before["a"]) and not np.allclose(after["c"], before["c"])
