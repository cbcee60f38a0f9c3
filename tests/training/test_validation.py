"""Validation and the schedule's defaults: the whole held-out text is scored, a tenth of the text is held out by
default, a curve is drawn for every run, a schedule trained in parts as the README says equals one run, and a
setting that would do nothing is refused."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from microgpt.backends import get_backend
from microgpt.cli import main
from microgpt.core.errors import ConfigError
from microgpt.core.progress import Progress
from microgpt.data.batches import SequentialBatches
from microgpt.data.corpus import DEFAULT_HELD_OUT_MAX, held_out_count
from microgpt.data.tokenizer import CharTokenizer
from microgpt.model.gpt import GPT, GPTConfig
from microgpt.settings.sources import Settings
from microgpt.settings.training import TrainConfig
from microgpt.training.trainer import RunPaths, Trainer, validation_windows
from microgpt.training.validation import VALIDATION_SHARE, validation_every

TEXT = "the quick brown fox jumps over the lazy dog. " * 60  # 2,700 characters
TINY = ["--d-model", "16", "--heads", "2", "--n-layers", "1", "--d-ff", "32", "--seq-len", "16", "--gen", "0",
        "--quiet", "--backend", "numpy"]


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "text.txt").write_text(TEXT)
    return tmp_path


def records(log) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_validation_scores_every_held_out_window():
    """With far more held-out text than the old 64-window cap, the loss is the mean over every window."""
    tok = CharTokenizer.from_text(TEXT)
    config = GPTConfig(vocab_size=tok.size, d_model=16, head_dims=(8, 8), n_layers=1, d_ff=32, seq_len=8)
    model = GPT(config, get_backend("numpy", dtype=np.float64), seed=0)
    tokens = tok.encode(TEXT)
    val = tokens[-2000:]
    windows = validation_windows(val, 8)
    assert windows.shape == ((2000 - 1) // 8, 9)
    assert np.array_equal(windows[-1], val[(len(windows) - 1) * 8 : len(windows) * 8 + 1])
    trainer = Trainer(model, "gpt", tok, SequentialBatches(tokens[:-2000], 8, 5), val,
                      TrainConfig(steps=1, batch_size=5), RunPaths(None), Progress(quiet=True), {})
    one_pass = model.loss(windows)  # every window in one forward pass: the mean over all their targets
    assert trainer.validation_loss() == pytest.approx(one_pass, rel=1e-12)  # float64, summed in batches of 5
    assert len(windows) > 64 and trainer.validation_loss() != pytest.approx(model.loss(windows[:64]), rel=1e-6)


@pytest.mark.parametrize("n_tokens, seq_len, expected", [
    (10_000, 64, 1_000),  # a tenth
    (10**6, 64, DEFAULT_HELD_OUT_MAX),  # capped
    (300, 64, 0),  # a tenth is shorter than a window: nothing held out
    (2_000, 64, 200),
])
def test_the_default_held_out_share(n_tokens, seq_len, expected):
    assert held_out_count(None, n_tokens, seq_len) == expected
    assert held_out_count(123, n_tokens, seq_len) == 123  # given: as given


def test_the_default_run_shows_a_validation_loss_and_a_curve(workdir, capsys):
    assert main(["train", "text.txt", *TINY, "--steps", "40", "--model", "ck"]) == 0
    out = capsys.readouterr().out
    assert "validation loss" in out
    log = records(workdir / "ck.metrics.jsonl")
    validated = [r["step"] for r in log if "val_loss" in r]
    assert validated == [10, 20, 30, 40]  # steps/20 is 2, so at least 10 apart: a point every 10, the last at the end
    state = json.loads((workdir / "ck" / "train_state.json").read_text())
    assert state["train_config"]["val_tokens"] == 270  # the resolved count, kept for a resume


def test_the_readme_recipe_for_a_schedule_in_parts_is_exact(workdir):
    """README: "to train a schedule in parts, fix its end with --decay-steps and give each part's --steps", on
    the default backend, as a user types it."""
    tiny = TINY[: TINY.index("--backend")]
    assert main(["train", "text.txt", *tiny, "--steps", "200", "--decay-steps", "200", "--model", "whole"]) == 0
    assert main(["train", "text.txt", *tiny, "--steps", "100", "--decay-steps", "200", "--model", "parts"]) == 0
    assert main(["train", "--resume", "parts", "--steps", "200", "--quiet", "--gen", "0"]) == 0
    whole, parts = records(workdir / "whole.metrics.jsonl"), records(workdir / "parts.metrics.jsonl")
    assert [r["lr"] for r in whole] == [r["lr"] for r in parts]
    assert [r["loss"] for r in whole] == [r["loss"] for r in parts]  # bit-identical
    assert whole[0]["lr"] == pytest.approx(3e-3 / 20)  # the warm-up is a tenth of the schedule, 20 steps


def test_the_default_warmup_follows_the_schedule_not_the_part():
    assert TrainConfig(steps=100, decay_steps=2000).warmup == 100
    assert TrainConfig(steps=100).warmup == 10
    assert TrainConfig(steps=5000).warmup == 100


@pytest.mark.parametrize("given, words", [
    ({"eval_every": 5, "val_tokens": 0}, "--eval-every 5 does nothing here: there is no held-out text"),
    ({"val_interval": 5}, "--val-interval 5.0 does nothing here: it times validation only with --eval-every 0"),
    ({"stride": 4}, "--stride 4 does nothing here: it spaces the windows of the sequential walk"),
    ({"min_lr": 1e-4, "lr_schedule": "constant"}, "--min-lr 0.0001 does nothing here: a constant schedule"),
    ({"decay_steps": 50, "lr_schedule": "constant"}, "--decay-steps 50 does nothing here"),
])
def test_a_setting_that_does_nothing_is_refused(given, words):
    settings = Settings({"steps": 10, **given})
    config = settings.train_config()
    with pytest.raises(ConfigError, match=words):
        settings.check_all_used(config)


def test_settings_that_do_something_together_are_accepted():
    settings = Settings({"steps": 10, "stride": 4, "random_batches": False, "eval_every": 0, "val_interval": 5,
                         "val_tokens": 100})
    settings.check_all_used(settings.train_config())


@pytest.mark.parametrize("flags, words", [
    (["--no-save", "--save-every", "5"], "--save-every 5 does nothing here: nothing is saved with --no-save"),
    (["--no-save", "--model", "x"], "--model x does nothing here"),
    (["--compare", "d8n1,d4x2n1", "--gen", "20"], "--gen 20 does nothing here: --compare prints no sample"),
])
def test_cli_flags_that_do_nothing_are_refused_in_one_line(workdir, capsys, flags, words):
    args = ["train", "text.txt", "--seq-len", "16", "--steps", "3", "--quiet", *flags]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1
    assert not (workdir / "checkpoints").exists() and not (workdir / "x").exists()


def test_a_new_run_never_leaves_an_older_models_best_beside_it(workdir):
    """A d16 run with validation leaves ck-best; a new d8 run into ck without validation must remove it, and a
    new run with validation replaces it with its own."""
    assert main(["train", "text.txt", *TINY, "--steps", "10", "--model", "ck"]) == 0
    assert (workdir / "ck-best" / "config.json").is_file()
    small = [*TINY, "--d-model", "8"]
    assert main(["train", "text.txt", *small, "--steps", "10", "--val-tokens", "0", "--model", "ck", "--overwrite"]) == 0
    assert not (workdir / "ck-best").exists()
    assert main(["train", "text.txt", *TINY, "--steps", "10", "--model", "ck", "--overwrite"]) == 0
    assert main(["train", "text.txt", *small, "--steps", "10", "--model", "ck", "--overwrite"]) == 0
    best = json.loads((workdir / "ck-best" / "config.json").read_text())
    assert best["model"]["d_model"] == 8  # this run's own


def test_a_resumed_run_keeps_its_best(workdir):
    assert main(["train", "text.txt", *TINY, "--steps", "10", "--model", "ck"]) == 0
    best = (workdir / "ck-best" / "model.safetensors").read_bytes()
    assert main(["train", "--resume", "ck", "--steps", "12", "--val-tokens", "0", "--quiet", "--gen", "0"]) == 0
    assert (workdir / "ck-best" / "model.safetensors").read_bytes() == best


def test_compare_and_named_runs_log_a_validation_curve_for_every_run(workdir):
    """Short runs end before any time-based validation would: by steps, each spec still draws a curve."""
    assert main(["train", "text.txt", "--compare", "d8n1,d4x2n1", "--seq-len", "16", "--steps", "20", "--quiet",
                 "--gen", "0", "--backend", "numpy", "--model", "cmp"]) == 0
    for spec in ("d8n1", "d4x2n1"):
        points = [r["step"] for r in records(workdir / "cmp" / f"{spec}.metrics.jsonl") if "val_loss" in r]
        assert points == [10, 20]  # steps/20 is every step of 20, so at least 10 apart: at 10 and at the end


def test_a_named_runs_validation_curve_too(workdir):
    (workdir / "runs.yaml").write_text("defaults: {steps: 20, seq_len: 16, d_model: 8, heads: 2, n_layers: 1, "
                                       "d_ff: 8, gen: 0, backend: numpy}\nruns:\n  a: {}\n")
    assert main(["train", "text.txt", "--config", "runs.yaml", "--run", "a", "--quiet"]) == 0
    points = [r["step"] for r in records(workdir / "checkpoints" / "a.metrics.jsonl") if "val_loss" in r]
    assert points == [10, 20]


def test_a_flag_may_switch_off_what_a_named_runs_setting_needs(workdir, capsys):
    """A run's `eval_every: 100` must not block `--val-tokens 0` from the command line (the flag overrides the
    run), while the same two in one layer are still refused."""
    (workdir / "runs.yaml").write_text("defaults: {steps: 3, seq_len: 16, d_model: 8, heads: 2, n_layers: 1, "
                                       "d_ff: 8, gen: 0, eval_every: 100}\nruns:\n  a: {}\n  b: {val_tokens: 0}\n")
    assert main(["train", "text.txt", "--config", "runs.yaml", "--run", "a", "--quiet", "--val-tokens", "0"]) == 0
    assert main(["train", "text.txt", "--config", "runs.yaml", "--run", "b", "--quiet"]) == 2
    assert "eval_every: 100 (run b in runs.yaml) does nothing here" in capsys.readouterr().err


def test_the_default_validation_spacing_follows_each_parts_steps(workdir):
    """A 40-step run validates every 10 steps (steps/20 is 2, under the floor of 10); resumed to 400, every 20
    (not every 10 for 360 more steps)."""
    assert main(["train", "text.txt", *TINY, "--steps", "40", "--model", "ck"]) == 0
    assert main(["train", "--resume", "ck", "--steps", "400", "--quiet", "--gen", "0"]) == 0
    points = [r["step"] for r in records(workdir / "ck.metrics.jsonl") if "val_loss" in r]
    assert points == [*range(10, 41, 10), *range(60, 401, 20)]


@pytest.mark.parametrize("steps, batch_size, seq_len, val_tokens, expected", [
    (300, 12, 64, 20_000, 150),  # issue 53's run: 20 passes took 34% of it; now 2 (at 150 and the end)
    (2_800, 12, 64, 20_000, 140),  # the default run: a twentieth of its steps, as before
    (40, 12, 16, 270, 10),  # short, with little held out: the floor of 10 steps
    (40, 12, 16, 2_000, 40),  # short, with much held out: once, at the end
    (100_000, 1, 1_024, 20_000, 5_000),
])
def test_the_default_validation_reads_a_bounded_share_of_the_training_tokens(steps, batch_size, seq_len,
                                                                                val_tokens, expected):
    config = TrainConfig(steps=steps, batch_size=batch_size, val_tokens=val_tokens)
    every = validation_every(config, seq_len)
    assert every == expected and every >= config.validate_every
    passes = -(-steps // every)  # every `every` steps and at the end
    read = passes * ((val_tokens - 1) // seq_len * seq_len)  # each pass reads every held-out window's targets
    assert passes == 1 or read <= VALIDATION_SHARE * steps * batch_size * seq_len
    given = TrainConfig(steps=steps, batch_size=batch_size, val_tokens=val_tokens, eval_every=7)
    assert validation_every(given, seq_len) == 7  # --eval-every is taken as given
    by_time = TrainConfig(steps=steps, batch_size=batch_size, val_tokens=val_tokens, eval_every=0)
    assert validation_every(by_time, seq_len) == 0


def test_a_short_run_with_much_held_out_validates_at_its_end_only(workdir, capsys):
    assert main(["train", "text.txt", *TINY, "--steps", "40", "--val-tokens", "2000", "--model", "ck"]) == 0
    assert [r["step"] for r in records(workdir / "ck.metrics.jsonl") if "val_loss" in r] == [40]
    assert main(["train", "text.txt", *TINY, "--steps", "40", "--val-tokens", "2000", "--eval-every", "10",
                 "--model", "given", "--overwrite"]) == 0
    assert [r["step"] for r in records(workdir / "given.metrics.jsonl") if "val_loss" in r] == [10, 20, 30, 40]
    train = [r["loss"] for r in records(workdir / "ck.metrics.jsonl")]
    assert train == [r["loss"] for r in records(workdir / "given.metrics.jsonl")]  # the schedule trains no differently


def test_training_alone_leaves_out_validation_and_checkpoints(workdir, monkeypatch, capsys):
    """The rate of training alone divides the tokens by the run's seconds less those spent validating and saving:
    here each of them waits 0.2 s more, which the overall rate counts and training alone does not."""
    import time

    waited = {"validation_loss": 0, "save": 0}

    def slowed(name):
        original = getattr(Trainer, name)

        def wait_then(self, *args):
            waited[name] += 1
            time.sleep(0.2)
            return original(self, *args)
        return wait_then

    for name in waited:
        monkeypatch.setattr(Trainer, name, slowed(name))
    assert main(["train", "text.txt", *TINY[:-3], "--steps", "20", "--eval-every", "10", "--save-every", "5",
                 "--backend", "numpy", "--model", "ck"]) == 0
    out = capsys.readouterr().out
    result = json.loads((workdir / "results.jsonl").read_text().splitlines()[-1])
    tokens = 20 * 12 * 16
    aside = result["seconds"] - tokens / result["training_tokens_per_sec"]
    # 2 validations (with a -best save each) and 3 saves inside the run (at 5, 10, 15: the final one is after it)
    assert waited["validation_loss"] == 2 and aside >= 0.2 * (2 + 2 + 3) - 0.01
    shown = re.search(r"\(([\d,]+) training alone, validation and checkpoints left out\)", out)
    # the line shows the rate to the token, results.jsonl to a tenth: 110,619.46 is 110,619 there and 110619.5 here
    assert shown and abs(int(shown.group(1).replace(",", "")) - result["training_tokens_per_sec"]) <= 0.55, out
