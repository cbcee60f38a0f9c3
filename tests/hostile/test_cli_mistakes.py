"""What a new or hostile user trips over on the command line and in Python (issue 34): damaged checkpoint JSON,
a huge BPE vocabulary, a file after eval's flags, bad choices and misspelt or abbreviated flags, train's help,
the Python API's words, and the small things (a missing file before the backend line, a 5-step run's
validations, the preset's held-out text, a folder of checkpoints)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import microgpt
from microgpt.cli import main
from microgpt.core.errors import ConfigError
from microgpt.model.checkpoint import CheckpointError

TINY = ["--d-model", "12", "--heads", "3", "--n-layers", "1", "--d-ff", "24", "--seq-len", "16", "--quiet",
        "--backend", "numpy", "--threads", "1", "--gen", "0"]
PROCESS_TIMEOUT = 120  # seconds for one subprocess: each takes a few


def only_line(text: str) -> str:
    assert "Traceback" not in text
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    return lines[0]


def exits_with_one_line(argv: list[str], capsys) -> str:
    """The one line `microgpt ARGV` prints on stderr as it exits 2 (an argparse mistake or a user error)."""
    try:
        status = main(argv)
    except SystemExit as exc:
        status = exc.code
    assert status == 2
    return only_line(capsys.readouterr().err)


@pytest.fixture
def checkpoint(workdir):
    assert main(["train", "text.txt", *TINY, "--steps", "2", "--model", "ck"]) == 0
    return workdir / "ck"


# ---- damaged JSON: one line, from the CLI and from microgpt.load ----------------------------------------

@pytest.mark.parametrize("damage", ["deep", "long number"])
def test_a_damaged_config_json_is_one_line_everywhere(checkpoint, capsys, damage):
    config = checkpoint / "config.json"
    if damage == "deep":
        config.write_text("[" * 100_000 + "]" * 100_000)
    else:
        config.write_text(config.read_text().replace('"seq_len": 16', '"seq_len": ' + "9" * 5000))
    capsys.readouterr()
    line = exits_with_one_line(["sample", "ck", "--tokens", "3"], capsys)
    assert "config.json is damaged" in line
    with pytest.raises(CheckpointError, match="config.json is damaged"):
        microgpt.load(checkpoint)


# ---- a huge BPE vocabulary ------------------------------------------------------------------------------

def test_a_billion_token_bpe_vocabulary_trains_what_the_text_can_give_and_says_so(workdir):
    """In a process of its own: the allocation failure it caused aborted the interpreter (SIGABRT)."""
    done = subprocess.run([sys.executable, "-m", "microgpt", "train", "text.txt", *TINY, "--steps", "2", "--no-save",
                           "--tokenizer", "bpe", "--vocab-size", "1000000000"], check=False, capture_output=True,
                          text=True, timeout=PROCESS_TIMEOUT)
    assert done.returncode == 0, done.stderr
    assert "not the 1000000000 asked for (--vocab-size)" in done.stdout
    code = "import microgpt; microgpt.train('text.txt', tokenizer='bpe', vocab_size=10**9, steps=2, save=False, gen=0)"
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, timeout=PROCESS_TIMEOUT)
    assert done.returncode == 0, done.stderr


def test_a_vocabulary_past_what_the_ids_hold_is_one_line(workdir, capsys):
    line = exits_with_one_line(["train", "text.txt", "--tokenizer", "bpe", "--vocab-size", str(2**31)], capsys)
    assert "--vocab-size" in line and "2147483647" in line


# ---- eval's file after its flags ------------------------------------------------------------------------

def test_eval_takes_its_file_before_or_after_its_flags(checkpoint, capsys):
    capsys.readouterr()
    for argv in (["eval", "ck", "text.txt", "--json"], ["eval", "ck", "--json", "text.txt"],
                 ["eval", "--json", "ck", "text.txt"], ["eval", "ck", "--json", "--", "text.txt"]):
        assert main(argv) == 0, argv
        assert json.loads(capsys.readouterr().out)["positions"] > 0


# ---- one line, with the nearest flag or choice ----------------------------------------------------------

@pytest.mark.parametrize("flags, words", [
    (["--prior", "trigrm"], "did you mean trigram?"),
    (["--family", "Gpt"], "did you mean gpt?"),
    (["--d-modle", "32"], "did you mean --d-model?"),
])
def test_a_mistake_is_one_line_naming_train_and_the_nearest_word(workdir, capsys, flags, words):
    line = exits_with_one_line(["train", "text.txt", *flags], capsys)
    assert line.startswith("microgpt train: error: ") and words in line


def test_an_abbreviated_flag_is_not_taken_for_the_whole_one(workdir, capsys):
    line = exits_with_one_line(["train", "text.txt", "--d-mod", "32", "--steps", "1", "--no-save"], capsys)
    assert "unrecognized arguments: --d-mod" in line and "did you mean --d-model?" in line


# ---- train --help -----------------------------------------------------------------------------------------

def test_train_help_is_grouped_and_a_familys_default_says_whose_it_is(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = capsys.readouterr().out
    for title in ("what to train:", "the lookahead family", "the ensemble family", "optimiser and schedule:",
                  "steps, batches and validation:", "where it runs and what it writes:", "several processes:"):
        assert title in text, title
    lookahead = " ".join(text[text.index("  --lookahead K"):].split("\n  --")[0].split())
    assert "the lookahead family's; default: 2" in lookahead


# ---- the Python API speaks Python ------------------------------------------------------------------------

def test_the_python_api_names_keywords_not_flags(workdir):
    with pytest.raises(ConfigError, match=r"^prior='trigram' does nothing here: .* add cooperative=\.\.\.\)$"):
        microgpt.train("text.txt", prior="trigram", steps=2, save=False)
    with pytest.raises(ConfigError, match=r"^steps must be a whole number"):
        microgpt.train("text.txt", steps="many", save=False)


def test_loading_a_missing_checkpoint_is_a_file_not_found_error(workdir):
    with pytest.raises(FileNotFoundError, match="no such checkpoint directory"):
        microgpt.load("nope")


def test_help_of_train_and_load_says_what_they_take_and_give():
    assert "d_model=96" in microgpt.train.__doc__ and "lookahead=2" in microgpt.train.__doc__
    for offered in (".sample(", ".complete(", ".evaluate(", ".logits(", ".tokenizer"):
        assert offered in microgpt.load.__doc__, offered


# ---- small things ----------------------------------------------------------------------------------------

def test_a_missing_file_is_said_before_any_backend_line(workdir, capsys):
    line = exits_with_one_line(["train", "missing.txt", "--steps", "2"], capsys)  # backend auto
    assert line == "microgpt train: error: missing.txt: no such file; give the path of a UTF-8 text file"


def test_a_five_step_run_validates_once_at_its_end(workdir):
    assert main(["train", "text.txt", *TINY, "--steps", "5", "--model", "ck", "--val-tokens", "200"]) == 0
    records = [json.loads(line) for line in (workdir / "ck.metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "val_loss" in r] == [5]


def test_the_reference_preset_says_it_holds_no_text_out(workdir, capsys):
    assert main(["train", "text.txt", "--preset", "reference", "--steps", "1", "--no-save", "--gen", "0",
                 "--backend", "numpy", "--threads", "1", "--seq-len", "16"]) == 0
    out = capsys.readouterr().out
    assert "validation: none (no text held out: the reference preset)" in out and "--val-tokens 0" not in out


def test_sampling_a_folder_of_checkpoints_lists_them(workdir, capsys):
    for name in ("a", "b"):
        assert main(["train", "text.txt", *TINY, "--steps", "1", "--model", f"runs/{name}"]) == 0
    capsys.readouterr()
    line = exits_with_one_line(["sample", "runs"], capsys)
    assert "runs is a folder of checkpoints, not one: a, a-best, b, b-best; give one of them, such as runs/a" in line


def test_a_flag_before_the_command_is_one_line_not_dropped(workdir, capsys):
    line = exits_with_one_line(["--d-model=64", "train", "text.txt", "--steps", "1", "--no-save"], capsys)
    assert "unrecognized arguments: --d-model=64, before the command" in line


@pytest.mark.parametrize("keywords, message", [
    ({"warmup": 500, "steps": 100}, r"^warmup=500 is longer than the run \(steps=100\); .* give decay_steps to "),
    ({"stride": 4}, r"^stride=4 does nothing here: .* add random_batches=False or drop it$"),
    ({"val_tokens": 5}, r"^val_tokens=5 is shorter than one window"),
])
def test_the_python_api_names_keywords_in_the_deeper_checks_too(workdir, keywords, message):
    with pytest.raises(ValueError, match=message):  # ConfigError or DataError, both ValueErrors
        microgpt.train("text.txt", save=False, gen=0, backend="numpy", threads=1, **keywords)
