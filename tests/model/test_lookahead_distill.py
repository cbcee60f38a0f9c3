"""--lookahead-distill: each mtp (or hydra) head's loss mixes in the main head's distribution at the token it predicts.

The gradient is checked against central differences of the objective written out here from the heads' logits
(`heads`, as the leak test reads them): main loss + W x the mean over heads of (1 - B) x CE(true token) +
B x CE(softmax of the main head's logits at t + k, held fixed). h = 1e-6 in float64, so 1e-6 relative is a bound
a wrong term cannot meet (tests/model/test_lookahead.py says why). Also: the logged head losses stay the true-token
ones, B = 0 is the plain objective bit for bit, B is refused outside [0, 1] and with gap heads, a checkpoint saved
before the setting loads with B = 0, and the cpu backend's threads' slices agree with numpy.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from finite_differences import RTOL, numeric
from microgpt.backends import get_backend
from microgpt.core.errors import ConfigError
from microgpt.model.checkpoint import load_checkpoint, save_checkpoint
from microgpt.model.family import family
from microgpt.model.thread_split import ThreadSplit
from tiny_lookahead import TOKENIZER, V, tiny, windows_of


def log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def written_out(model, windows, teacher_probs=None) -> float:
    """The distilled objective from the heads' logits; teacher_probs (B, T, V) fixes the main head's
    distributions (else they are this model's)."""
    config = model.config
    batch, seq_len = windows.shape[0], windows.shape[1] - 1
    heads = model.heads(windows[:, :-1])
    main = model.be.to_host(heads[0].logits).reshape(batch, seq_len, V)
    teacher = np.exp(log_softmax(main)) if teacher_probs is None else teacher_probs
    main_loss = -np.take_along_axis(log_softmax(main), windows[:, 1:, None], axis=2).mean()
    losses = []
    for k, head in enumerate(heads[1:], start=1):
        counted = seq_len - k
        logp = log_softmax(model.be.to_host(head.logits).reshape(batch, seq_len, V)[:, :counted])
        hard = -np.take_along_axis(logp, windows[:, 1 + k : 1 + k + counted, None], axis=2).mean()
        soft = -(teacher[:, k:] * logp).sum(axis=2).mean()
        losses.append((1 - config.lookahead_distill) * hard + config.lookahead_distill * soft)
    return main_loss + config.lookahead_weight * np.mean(losses)


@pytest.mark.parametrize("settings", [{"lookahead": 2, "lookahead_distill": 0.5, "lookahead_mode": "mtp"},
                                      {"lookahead": 3, "lookahead_distill": 1.0, "head_layers": 0, "lookahead_mode": "mtp",
                                       "lookahead_weight": 2.0},
                                      {"lookahead": 2, "lookahead_distill": 0.4, "lookahead_mode": "hydra"}])
def test_the_gradient_is_the_distilled_objectives(settings):
    model = tiny(**settings)
    windows = windows_of()
    batch, seq_len = windows.shape[0], windows.shape[1] - 1
    main = model.be.to_host(model.heads(windows[:, :-1])[0].logits).reshape(batch, seq_len, V)
    teacher = np.exp(log_softmax(main))  # held fixed: the soft targets carry no gradient
    model.params.zero_grad()
    model.loss_and_backward(windows)
    analytic = model.params.to_host(model.params.grad)
    rng = np.random.default_rng(7)
    for name, spec in model.params.specs.items():
        for index in rng.choice(spec.size, size=min(2, spec.size), replace=False):
            expected = numeric(model, lambda: written_out(model, windows, teacher), name, index)
            assert analytic[name].reshape(-1)[index] == pytest.approx(expected, rel=RTOL, abs=1e-9), (name, index)


def test_the_logged_head_losses_stay_the_true_tokens():
    windows = windows_of()
    plain, distilled = tiny(lookahead=2), tiny(lookahead=2, lookahead_distill=0.7)
    want_loss, want = plain.loss_and_backward(windows)
    got_loss, got = distilled.loss_and_backward(windows)
    assert got_loss == want_loss and got == want  # the same weights: the same main and true-token losses


def test_no_distillation_is_the_plain_objective_bit_for_bit():
    windows = windows_of()
    plain, zero = tiny(lookahead=2), tiny(lookahead=2, lookahead_distill=0.0)
    for model in (plain, zero):
        model.params.zero_grad()
        model.loss_and_backward(windows)
    for name, grad in plain.params.to_host(plain.params.grad).items():
        np.testing.assert_array_equal(zero.params.to_host(zero.params.grad)[name], grad)


@pytest.mark.parametrize(("settings", "words"), [({"lookahead_distill": 1.5}, "from 0 to 1"),
                                                 ({"lookahead_distill": -0.1}, "from 0 to 1"),
                                                 ({"lookahead_distill": 0.5, "lookahead_mode": "gap"},
                                                  "a gap head sees text after its token")])
def test_bad_values_are_refused_in_one_line(settings, words):
    with pytest.raises(ConfigError, match=words):
        tiny(lookahead=2, **settings)


def test_a_checkpoint_saved_before_the_setting_loads_without_it(tmp_path):
    model = tiny(lookahead=2)
    save_checkpoint(tmp_path / "old", model, TOKENIZER, family_name="lookahead")
    config_file = tmp_path / "old" / "config.json"
    saved = json.loads(config_file.read_text())
    del saved["model"]["lookahead_distill"]
    config_file.write_text(json.dumps(saved))
    loaded, _, _ = load_checkpoint(tmp_path / "old", get_backend("numpy", dtype=np.float64))
    assert loaded.config.lookahead_distill == 0.0


def test_a_checkpoint_saved_without_a_mode_loads_as_mtp_the_old_default(tmp_path):
    """Mode hydra is the default now; a config saved before --lookahead-mode existed was an mtp model."""
    model = tiny(lookahead=2, lookahead_mode="mtp")
    save_checkpoint(tmp_path / "old", model, TOKENIZER, family_name="lookahead")
    config_file = tmp_path / "old" / "config.json"
    saved = json.loads(config_file.read_text())
    del saved["model"]["lookahead_mode"]
    config_file.write_text(json.dumps(saved))
    loaded, _, _ = load_checkpoint(tmp_path / "old", get_backend("numpy", dtype=np.float64))
    assert loaded.config.lookahead_mode == "mtp"
    assert family("lookahead").Config(vocab_size=V, seq_len=8).lookahead_mode == "hydra"


def test_the_cpu_threads_slices_agree_with_numpy():
    windows = windows_of(batch=5)
    reference = tiny(lookahead=2, lookahead_distill=0.6)
    cpu = tiny(get_backend("cpu", dtype=np.float64, threads=2), lookahead=2, lookahead_distill=0.6)
    for model in (reference, cpu):
        model.params.zero_grad()
    want, _ = reference.loss_and_backward(windows)
    got, _ = ThreadSplit(cpu).loss_and_backward(windows)
    assert got == pytest.approx(want, rel=1e-12)  # float64, the slices' means weighted: rounding only
    np.testing.assert_allclose(cpu.params.to_host(cpu.params.grad)["lookahead.1.out.w"],
                               reference.params.to_host(reference.params.grad)["lookahead.1.out.w"], rtol=1e-10,
                               atol=1e-13)  # float64, another split of the same sums
