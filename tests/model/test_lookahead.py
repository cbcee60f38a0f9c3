"""The lookahead family: its objective gradient-checked in float64 in both modes, a batch split over
threads and the emulated CUDA backend against numpy, per-head losses in the metrics, and the CLI with its clear errors.

Gradient checks compare the backward against central differences of the objective, main loss + W x the mean
of the heads' losses, (f(x + h) - f(x - h)) / 2h with h = 1e-6 in float64: the difference is then near 1e-9
relative for these smooth functions, so 1e-6 is a bound a wrong term (off by a factor, a sign or a missing
path) cannot meet.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from finite_differences import RTOL, numeric
from microgpt.backends import get_backend
from microgpt.core.errors import ConfigError
from microgpt.model.family import family
from microgpt.model.thread_split import ThreadSplit, thread_slices
from tiny_lookahead import TRUNK, V, tiny, windows_of


def objective(model, windows) -> float:
    """main loss + W x the heads' mean loss, as the model trains on it."""
    loss, metrics = model.loss_and_backward(windows)
    return loss + model.config.lookahead_weight * np.mean(list(metrics.values()))


@pytest.mark.parametrize("settings", [
    {"lookahead": 1, "lookahead_mode": "mtp"},
    {"lookahead": 3, "lookahead_mode": "mtp", "lookahead_weight": 0.5},
    {"lookahead": 2, "lookahead_mode": "mtp", "head_layers": 2},
    {"lookahead": 2, "lookahead_mode": "mtp", "head_layers": 0},
    {"lookahead": 1, "lookahead_mode": "gap"},
    {"lookahead": 3, "lookahead_mode": "gap", "head_layers": 2, "lookahead_weight": 2.0},
    {"lookahead": 1, "lookahead_mode": "hydra"},
    {"lookahead": 3, "lookahead_mode": "hydra", "head_layers": 2, "lookahead_weight": 0.7},
])
def test_the_gradient_is_the_objectives(settings):
    model = tiny(**settings)
    windows = windows_of()
    model.params.zero_grad()
    model.loss_and_backward(windows)
    analytic = model.params.to_host(model.params.grad)
    rng = np.random.default_rng(7)
    for name, spec in model.params.specs.items():  # every tensor, at a few places
        for index in rng.choice(spec.size, size=min(3, spec.size), replace=False):
            expected = numeric(model, lambda: objective(model, windows), name, int(index))
            got = analytic[name].reshape(-1)[index]
            assert got == pytest.approx(expected, rel=RTOL, abs=1e-9), (name, index)


@pytest.mark.parametrize("mode", ["mtp", "gap", "hydra"])
def test_each_head_is_trained_on_its_own_target(mode):
    """The loss each head trains on is the cross-entropy of its logits (from `heads`, what the leak test reads)
    against the token at t + offset, over the positions whose target lies in the window."""
    model = tiny(lookahead=3, lookahead_mode=mode)
    windows = windows_of()
    loss, metrics = model.loss_and_backward(windows)
    batch, seq_len = windows.shape[0], windows.shape[1] - 1
    assert loss == pytest.approx(model.loss(windows), rel=1e-12)  # float64: the same forward, summed alike
    assert sorted(metrics) == ["head1_loss", "head2_loss", "head3_loss"]
    for head in model.heads(windows[:, :-1])[1:]:
        logits = model.be.to_host(head.logits).reshape(batch, seq_len, V)
        counted = seq_len - head.offset + 1
        targets = windows[:, head.offset : head.offset + counted]  # (B, counted): the token at t + offset
        kept = logits[:, :counted]  # (B, counted, V)
        log_probs = kept - kept.max(axis=2, keepdims=True)
        log_probs -= np.log(np.exp(log_probs).sum(axis=2, keepdims=True))
        expected = -np.take_along_axis(log_probs, targets[:, :, None], axis=2).mean()
        assert metrics[f"head{head.name.split()[-1]}_loss"] == pytest.approx(expected, rel=1e-12), head.name


def test_a_head_that_diverges_stops_training():
    model = tiny(lookahead=1)
    values = model.params.to_host()
    values["lookahead.1.out.b"][0] = np.inf  # the head's output alone is broken
    model.params.from_host(values)
    with np.errstate(invalid="ignore"):  # the broken head's softmax: the point of the test
        loss, _ = model.loss_and_backward(windows_of())
    assert not np.isfinite(loss)


@pytest.mark.parametrize("mode", ["mtp", "gap", "hydra"])
def test_the_cpu_threads_slices_agree_with_numpy(mode):
    windows = windows_of(batch=5)
    reference = tiny(lookahead=2, lookahead_mode=mode)
    cpu = tiny(get_backend("cpu", dtype=np.float64, threads=2), lookahead=2, lookahead_mode=mode)
    for model in (reference, cpu):
        model.params.zero_grad()
    want, want_metrics = reference.loss_and_backward(windows)
    got, got_metrics = ThreadSplit(cpu).loss_and_backward(windows)
    assert len(thread_slices(cpu.be, windows)) == 2  # really split over two threads
    assert got == pytest.approx(want, rel=1e-12)  # float64, the slices' means weighted: rounding only
    for key in want_metrics:
        assert got_metrics[key] == pytest.approx(want_metrics[key], rel=1e-12)
    np.testing.assert_allclose(cpu.params.to_host(cpu.params.grad)["tok_emb"],
                               reference.params.to_host(reference.params.grad)["tok_emb"], rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("mode", ["mtp", "gap", "hydra"])
def test_the_emulated_cuda_backend_agrees_with_numpy(emulated, mode):
    """Through the backend contract (and the array slicing CuPy shares with NumPy) only: on the CPU emulator of
    tests/cuda_emulator, against numpy in float32."""
    emulated_cuda, _ = emulated
    windows = windows_of()
    reference = tiny(get_backend("numpy", dtype=np.float32), lookahead=2, lookahead_mode=mode)
    cuda = tiny(emulated_cuda, lookahead=2, lookahead_mode=mode)
    for model in (reference, cuda):
        model.params.zero_grad()
    want, want_metrics = reference.loss_and_backward(windows)
    got, got_metrics = cuda.loss_and_backward(windows)
    assert got == pytest.approx(want, rel=1e-4)  # float32 on both; other kernels sum in other orders
    for key in want_metrics:
        assert got_metrics[key] == pytest.approx(want_metrics[key], rel=1e-4)
    grads = reference.params.to_host(reference.params.grad), cuda.params.to_host(cuda.params.grad)
    for name in grads[0]:
        np.testing.assert_allclose(grads[1][name], grads[0][name], rtol=1e-3, atol=1e-5, err_msg=name)  # float32


@pytest.mark.parametrize(("settings", "words"), [
    ({"lookahead": 0}, ["at least 1", "--family gpt"]),
    ({"lookahead": -1}, ["-1", "future", "docs/lookahead.md"]),
    ({"lookahead": 7}, ["--lookahead 7", "--seq-len 7", "below 7"]),
    ({"lookahead": 6, "lookahead_mode": "gap"}, ["gap", "--seq-len 7", "shows head 6 nothing", "below 6"]),
    ({"lookahead_mode": "ahead"}, ["--lookahead-mode", "mtp, gap, hydra"]),
    ({"head_layers": -1}, ["--head-layers", "at least 0"]),
    ({"head_layers": 0, "lookahead_mode": "gap"}, ["--head-layers 0", "gap head", "--lookahead-mode mtp"]),
    ({"head_layers": 0, "lookahead_mode": "hydra"}, ["--head-layers 0", "hydra head", "--lookahead-mode mtp"]),
    ({"lookahead_weight": -1.0}, ["--lookahead-weight", "at least 0"]),
])
def test_bad_shapes_get_one_clear_line(settings, words):
    with pytest.raises(ConfigError) as caught:
        family("lookahead").Config(vocab_size=V, **{**TRUNK, **settings})
    message = str(caught.value)
    assert "\n" not in message
    for word in words:
        assert word in message, message


TEXT = "the quick brown fox jumps over the lazy dog.\n" * 30
FLAGS = ["--d-model", "16", "--n-layers", "1", "--heads", "2", "--d-ff", "32", "--seq-len", "16", "--batch-size", "4",
         "--backend", "numpy", "--threads", "1", "--val-tokens", "200", "--eval-every", "5", "--gen", "0"]


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fox.txt").write_text(TEXT, encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize("mode", ["mtp", "hydra"])
def test_a_lookahead_run_trains_resumes_bit_identically_samples_and_scores(workdir, capsys, mode):
    from microgpt.cli import main

    flags = ["fox.txt", *FLAGS, "--lookahead", "2", "--lookahead-mode", mode, "--decay-steps", "10"]
    assert main(["train", *flags, "--steps", "10", "--model", "whole"]) == 0
    assert "head1 " in capsys.readouterr().err  # the progress line shows each head's loss
    assert main(["train", *flags, "--steps", "5", "--model", "parts", "--quiet"]) == 0
    assert main(["train", "--resume", "parts", "--steps", "10", "--quiet", "--gen", "0", "--backend", "numpy",
                 "--threads", "1"]) == 0
    whole, parts = (json.loads((workdir / f"{d}.metrics.jsonl").read_text().splitlines()[-1]) for d in ("whole", "parts"))
    assert whole["loss"] == parts["loss"] and whole["head2_loss"] == parts["head2_loss"] and whole["step"] == 10
    config = json.loads((workdir / "whole" / "config.json").read_text())
    assert config["family"] == "lookahead" and config["model"]["lookahead"] == 2
    assert config["model"]["lookahead_mode"] == mode
    capsys.readouterr()
    assert main(["sample", "whole", "--prompt", "the", "--tokens", "5", "--backend", "numpy"]) == 0
    assert len(capsys.readouterr().out.rstrip("\n")) == 5  # the continuation alone: sample prints no prompt
    greedy = []
    for extra in ([], ["--speculative"]):  # the saved heads draft; the text stays greedy sampling's
        assert main(["sample", "whole", "--prompt", "the", "--tokens", "12", "--temperature", "0", "--backend",
                     "numpy", *extra]) == 0
        greedy.append(capsys.readouterr().out)
    assert greedy[0] == greedy[1]
    assert main(["eval", "whole", "fox.txt", "--json", "--backend", "numpy", "--max-positions", "50"]) == 0
    assert json.loads(capsys.readouterr().out)["positions"] == 50


@pytest.mark.parametrize("mode", ["mtp", "gap", "hydra"])
def test_the_extra_heads_train_the_trunk(mode):
    """The heads' share of the gradient reaches the trunk's blocks and the embedding: with --lookahead-weight 1
    their gradients differ from the main head's alone (weight 0) by the heads' part, which the gradient check
    above holds to the objective's."""
    windows = windows_of()
    grads = []
    for weight in (0.0, 1.0):
        model = tiny(lookahead=2, lookahead_mode=mode, lookahead_weight=weight)
        model.params.zero_grad()
        model.loss_and_backward(windows)
        grads.append(model.params.to_host(model.params.grad))
    for name in ("tok_emb", "blocks.0.attn.wq.w", "blocks.1.ff.l2.w"):
        assert np.abs(grads[1][name] - grads[0][name]).max() > 1e-6, name  # float64: far above rounding


def test_gap_heads_learn_through_the_cli(workdir):
    from microgpt.cli import main

    assert main(["train", "fox.txt", *FLAGS, "--lookahead", "2", "--lookahead-mode", "gap", "--steps", "30",
                 "--model", "g", "--quiet"]) == 0
    records = [json.loads(line) for line in (workdir / "g.metrics.jsonl").read_text().splitlines()]
    for key in ("head1_loss", "head2_loss"):
        assert records[-1][key] < records[0][key] - 0.5  # they learn (from about ln 30 = 3.4)


@pytest.mark.parametrize(("flags", "words"), [
    (["--lookahead", "0"], "argument --lookahead: must be a whole number K of at least 1"),
    (["--lookahead", "-1"], "the original µGPT's -1, a 'future' head"),
    (["--lookahead", "16"], "--lookahead 16 asks head 16 for the token 17 positions ahead"),
    (["--lookahead", "15", "--lookahead-mode", "gap"], "hides a gap of up to 15 positions, so large that the context"),
    (["--family", "gpt", "--lookahead", "2"], "--lookahead 2 does nothing here: the gpt family has no lookahead"),
    (["--head-layers", "2"], ("--head-layers 2 does nothing here: the gpt family has no head_layers (it is the "
                             "lookahead family's: add --lookahead ...)")),
])
def test_bad_lookahead_settings_are_one_clear_line(workdir, capsys, flags, words):
    from microgpt.cli import main

    try:
        status = main(["train", "fox.txt", *FLAGS, "--steps", "2", "--no-save", *flags])
    except SystemExit as exc:  # argparse's exit, for a flag's bad value
        status = exc.code
    assert status == 2
    err = capsys.readouterr().err
    line = err.strip().splitlines()[-1]  # a flag's bad value comes after argparse's usage lines
    assert words in line and (line.startswith("microgpt train: error:") or len(err.strip().splitlines()) == 1), err


def test_speculative_sampling_through_the_cli_is_greedy_samplings_text_and_reports_acceptance(workdir, capsys):
    from microgpt.cli import main

    assert main(["train", "fox.txt", *FLAGS, "--lookahead", "2", "--steps", "150", "--model", "m", "--quiet"]) == 0
    common = ["sample", "m", "--temperature", "0", "--tokens", "80", "--prompt", "the", "--backend", "numpy"]
    capsys.readouterr()
    assert main(common) == 0
    plain = capsys.readouterr().out
    assert main([*common, "--speculative"]) == 0
    drafted = capsys.readouterr()
    assert drafted.out == plain
    report = drafted.err.strip().splitlines()[-1]
    assert report.startswith("speculative: 80 tokens in ") and "head 1 " in report and "head 2 " in report


@pytest.mark.parametrize(("train_flags", "sample_flags", "words"), [
    ([], ["--speculative"], "--speculative needs a model with draft heads"),
    (["--lookahead", "2", "--lookahead-mode", "gap"], ["--speculative"], "cannot draft"),
    (["--lookahead", "2"], ["--speculative", "--no-cache"], "--no-cache turns off"),
])
def test_speculative_sampling_is_refused_in_one_line_before_any_text(workdir, capsys, train_flags, sample_flags,
                                                                     words):
    from microgpt.cli import main

    assert main(["train", "fox.txt", *FLAGS, *train_flags, "--steps", "2", "--model", "m", "--quiet"]) == 0
    capsys.readouterr()
    assert main(["sample", "m", "--backend", "numpy", *sample_flags]) == 2
    out, err = capsys.readouterr()
    assert out == "" and words in err and len(err.strip().splitlines()) == 1, err
