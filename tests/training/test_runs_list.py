"""`microgpt runs`: every run under some folders, a row each, with its status (training now, finished,
failed, unfinished, damaged, a best copy left alone), as a table or JSON lines (training/run_list.py, cli/runs.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from microgpt.cli import main
from microgpt.training.run_dir import WriterLock
from microgpt.training.run_files import MAX_LOG_LINE
from microgpt.training.run_list import latest_results
from microgpt.use.loaded import load

TEXT = "It was the best of times, it was the worst of times.\n" * 30
TINY = ["--d-model", "12", "--heads", "3", "--n-layers", "1", "--d-ff", "24", "--seq-len", "16", "--quiet",
        "--backend", "numpy", "--threads", "1", "--gen", "0"]


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "text.txt").write_text(TEXT)
    return tmp_path


def rows(capsys, *folders: str) -> dict[str, dict]:
    capsys.readouterr()
    assert main(["runs", "--json", *folders]) == 0
    return {row["path"]: row for row in map(json.loads, capsys.readouterr().out.splitlines())}


def test_runs_lists_each_run_with_its_figures_and_status(workdir, capsys):
    assert main(["train", "text.txt", *TINY, "--steps", "10", "--model", "checkpoints/done"]) == 0
    assert main(["train", "text.txt", *TINY, "--steps", "4", "--model", "elsewhere/short"]) == 0
    state = workdir / "elsewhere" / "short" / "train_state.json"  # as if stopped at step 4 of 8
    saved = json.loads(state.read_text())
    saved["train_config"]["steps"] = 8
    state.write_text(json.dumps(saved))
    found = rows(capsys)  # checkpoints/ and . by default
    assert set(found) == {"checkpoints/done", "elsewhere/short"}
    done, short = found["checkpoints/done"], found["elsewhere/short"]
    assert done["status"] == "finished" and done["step"] == 10 and done["family"] == "gpt"
    assert done["parameters"] > 0 and done["best_val_loss"] is not None and done["machine"]
    assert done["best_checkpoint"] == "checkpoints/done-best"  # its -best copy folded into its row
    assert short["status"] == "unfinished" and (short["step"], short["steps"]) == (4, 8)
    assert main(["runs"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:3] == ["run", "family", "shape"] and len(table) == 3
    assert "finished" in table[1] + table[2] and "4/8" in table[1] + table[2]


def test_a_run_that_stopped_short_is_failed_with_its_line_until_it_trains_on(workdir, capsys):
    assert main(["train", "text.txt", *TINY, "--steps", "3", "--model", "c"]) == 0
    assert main(["train", "--resume", "c", "--lr", "1e9", "--save-every", "1", "--steps", "30", "--quiet",
                 "--gen", "0"]) == 2
    failed = rows(capsys)["c"]
    assert failed["status"] == "failed" and failed["step"] == 3
    assert "training stopped" in failed["error"] and "Try a lower --lr" in failed["error"]
    assert main(["runs"]) == 0 and "failed" in capsys.readouterr().out
    assert main(["train", "--resume", "c", "--steps", "6", "--quiet", "--gen", "0"]) == 0
    again = rows(capsys)["c"]
    assert again["status"] == "finished" and again["step"] == 6 and "error" not in again
    assert not (workdir / "c.failed.json").exists()


def test_a_run_whose_lock_is_held_is_training_and_a_damaged_one_is_marked(workdir, capsys):
    for name in ("live", "bad"):
        assert main(["train", "text.txt", *TINY, "--steps", "2", "--model", f"runs/{name}"]) == 0
    (workdir / "runs" / "bad" / "train_state.json").write_text(json.dumps({"step": 2, "train_config": "x"}))
    lock = WriterLock(workdir / "runs" / "live").acquire()  # as a run training there holds it
    try:
        found = rows(capsys, "runs")
    finally:
        lock.release()
    assert found["runs/live"]["status"] == "training"
    assert found["runs/bad"]["status"] == "unknown"  # its train_config is no mapping: listed, the list whole
    assert rows(capsys, "runs")["runs/live"]["status"] == "finished"


def test_no_runs_and_a_missing_folder_are_one_line(workdir, capsys):
    assert main(["runs"]) == 0
    assert capsys.readouterr().out.strip() == "no runs under checkpoints or ."
    assert main(["runs", "nope"]) == 2
    assert capsys.readouterr().err.strip() == "microgpt runs: error: nope is not a folder; give folders that hold checkpoints"


def test_runs_can_be_sorted_and_filtered(workdir, capsys):
    assert main(["train", "text.txt", *TINY, "--steps", "6", "--model", "checkpoints/a"]) == 0
    assert main(["train", "text.txt", *TINY, "--steps", "2", "--model", "checkpoints/b", "--val-tokens", "100"]) == 0
    assert main(["train", "text.txt", "--cooperative", "d8n1", "--stream-dim", "4", "--seq-len", "16", "--steps", "2",
                 "--quiet", "--backend", "numpy", "--threads", "1", "--gen", "0", "--model", "checkpoints/e"]) == 0
    capsys.readouterr()
    assert main(["runs", "--json", "--sort", "step"]) == 0
    steps = [json.loads(line)["step"] for line in capsys.readouterr().out.splitlines()]
    assert steps == sorted(steps, reverse=True) and steps[0] == 6
    assert main(["runs", "--json", "--where", "family=ensemble"]) == 0
    assert [json.loads(line)["path"] for line in capsys.readouterr().out.splitlines()] == ["checkpoints/e"]
    assert main(["runs", "--json", "--sort", "val", "--where", "family=gpt"]) == 0
    losses = [json.loads(line)["val_loss"] for line in capsys.readouterr().out.splitlines()]
    assert len(losses) == 2 and losses == sorted(losses)
    assert main(["runs", "--where", "family"]) == 2
    assert "--where takes KEY=VALUE" in capsys.readouterr().err


@pytest.mark.parametrize("damage", ["config.json", "train_state.json"])
def test_a_checkpoint_whose_json_is_corrupt_is_listed_damaged_with_the_reason(workdir, capsys, damage):
    """A config.json that is not JSON made the checkpoint vanish from `runs` (issue 52 item 7): listed damaged,
    the file and its parse error named, from a folder above it and given itself."""
    for name in ("good", "bad"):
        assert main(["train", "text.txt", *TINY, "--steps", "2", "--model", f"runs/{name}"]) == 0
    (workdir / "runs" / "bad" / damage).write_text('{"format_version": 2, "family": "gpt", "mod')
    for folder in ("runs", "runs/bad"):
        bad = rows(capsys, folder)["runs/bad"]
        assert bad["status"] == "damaged" and bad["damaged"], bad
        assert bad["error"].startswith(f"runs/bad/{damage} is not valid JSON (") and "remove it" in bad["error"]
    assert rows(capsys, "runs")["runs/good"]["status"] == "finished"
    assert main(["runs", "runs"]) == 0
    assert any(line.startswith("runs/bad") and "damaged" in line for line in capsys.readouterr().out.splitlines())


def held_out_bits_per_char(checkpoint: str, val_loss: float) -> float:
    """The run's validation loss over the characters of the text it held out (the last val_tokens tokens of
    TEXT, as its tokenizer encodes it), in bits: computed here from the checkpoint, not from what runs reads."""
    loaded = load(checkpoint)
    state = json.loads((Path(checkpoint) / "train_state.json").read_text())
    held = loaded.tokenizer.encode(TEXT)[-state["train_config"]["val_tokens"]:]
    return val_loss * len(held) / loaded.tokenizer.count_characters(held) / math.log(2)


def test_runs_show_the_tokenizer_and_rank_by_held_out_bits_per_character(workdir, capsys):
    """Nats per token ranked char against bpe runs, which is meaningless (issue 53 item 2): each row shows its
    tokenizer and its losses in bits per character of the held-out text, and --sort val and best use them."""
    assert main(["train", "text.txt", *TINY, "--steps", "3", "--model", "checkpoints/char"]) == 0
    assert main(["train", "text.txt", *TINY, "--steps", "3", "--tokenizer", "bpe", "--vocab-size", "300",
                 "--model", "checkpoints/bpe"]) == 0
    found = rows(capsys)
    for name, kind in (("char", "char"), ("bpe", "bpe")):
        row = found[f"checkpoints/{name}"]
        assert row["tokenizer"] == kind
        assert row["val_bpc"] == pytest.approx(held_out_bits_per_char(row["path"], row["val_loss"]), rel=1e-12)
        assert row["best_val_bpc"] == pytest.approx(held_out_bits_per_char(row["path"], row["best_val_loss"]))
    assert found["checkpoints/bpe"]["val_characters"] > found["checkpoints/bpe"]["val_tokens"]  # tokens of chars
    for key, field in (("val", "val_bpc"), ("best", "best_val_bpc")):
        capsys.readouterr()
        assert main(["runs", "--json", "--sort", key]) == 0
        ranked = [json.loads(line)[field] for line in capsys.readouterr().out.splitlines()]
        assert ranked == sorted(ranked)
    assert main(["runs"]) == 0
    header, *lines = capsys.readouterr().out.splitlines()
    assert header.split()[3:8] == ["tokenizer", "parameters", "step", "best", "bpc"]
    assert all(f"{found[line.split()[0]]['val_bpc']:.4f}" in line for line in lines)


def test_a_run_from_before_the_record_keeps_a_row_and_sorts_after_by_nats(workdir, capsys):
    for name, tokenizer in (("char", "char"), ("bpe", "bpe"), ("bpe2", "bpe")):
        assert main(["train", "text.txt", *TINY, "--steps", str(2 + len(name)), "--tokenizer", tokenizer,
                     "--model", f"checkpoints/{name}"]) == 0
    for name in ("char", "bpe", "bpe2"):  # as runs trained before validation_text was recorded
        state_file = workdir / "checkpoints" / name / "train_state.json"
        state = json.loads(state_file.read_text())
        del state["validation_text"]
        state_file.write_text(json.dumps(state))
    found = rows(capsys)
    char = found["checkpoints/char"]
    assert char["val_bpc"] == pytest.approx(char["val_loss"] / math.log(2))  # a char token is a character
    assert found["checkpoints/bpe"]["val_bpc"] is None and found["checkpoints/bpe"]["val_loss"] is not None
    assert main(["runs", "--json", "--sort", "val"]) == 0
    order = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert order[0]["path"] == "checkpoints/char"
    assert [row["val_loss"] for row in order[1:]] == sorted(row["val_loss"] for row in order[1:])


def test_a_record_at_the_end_of_an_overlong_results_line_is_not_the_run_s(tmp_path):
    """A results.jsonl line past MAX_LOG_LINE is damage and left out whole, as plot and a resume leave out a
    metrics log's: the list read it in pieces, and took the last piece, a record, for the run's latest."""
    (tmp_path / "ck").mkdir()
    record = {"checkpoint": "ck", "tokens_per_sec": 1.0}
    damaged = b" " * MAX_LOG_LINE + json.dumps({**record, "tokens_per_sec": 999.0}).encode() + b"\n"
    (tmp_path / "results.jsonl").write_bytes(json.dumps(record).encode() + b"\n" + damaged)
    latest = latest_results([tmp_path / "ck"])
    assert latest[str((tmp_path / "ck").resolve())]["tokens_per_sec"] == 1.0
