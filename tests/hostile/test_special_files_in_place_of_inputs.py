"""Files a hostile user hands microgpt in place of the ones it reads (issue 52, items 5 and 6 and part of 7):
a FIFO or /dev/zero as a tokenizer.json, a checkpoint's config.json or train_state.json; a tokenizer.json whose
sparse ids would make the tokenizers library allocate gigabytes; 5,000-digit numbers and deep nesting in a
manifest, a tokenizer.json or a JSON Lines input; a Hugging Face tokenizer in prepare; an unreadable
results.jsonl; and a JSON Lines line of many megabytes. Each is one line and exit status 2, or works, and
none hangs: what could hang runs in a subprocess with a timeout, so that the old code fails instead."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from memory_limits import GIB, THE_CLI, held_to, peak_mb, run_held
from microgpt.cli import main
from microgpt.data.dataset import MANIFEST
from tiny_corpus import TEXT

TINY = ["--d-model", "12", "--heads", "3", "--n-layers", "1", "--d-ff", "24", "--seq-len", "16", "--quiet",
        "--backend", "numpy", "--threads", "1", "--gen", "0"]
HANG_S = 120  # far past what any of these takes; the old code hung until killed
MEMORY = 3 * GIB  # the address space a subprocess may take: the old code took gigabytes, or aborted


@pytest.fixture
def tokenizer_json(workdir) -> Path:
    """A byte-level BPE tokenizer.json, as the tokenizers library writes one."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator([TEXT], trainers.BpeTrainer(
        vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    tokenizer.save(str(workdir / "tokenizer.json"))
    return workdir / "tokenizer.json"


def microgpt(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """The CLI in its own process, killed (and the test failed) if it hangs, and held to MEMORY."""
    return subprocess.run([sys.executable, "-m", "microgpt", *args], cwd=cwd, capture_output=True, text=True,
                          check=False, timeout=HANG_S, preexec_fn=held_to(MEMORY))


def one_line(done: subprocess.CompletedProcess, *words: str) -> str:
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    for word in words:
        assert word in done.stderr, done.stderr
    return done.stderr


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


# ---- a tokenizer.json that is not a file, or not one to read whole ---------------------------------------

def test_a_fifo_as_the_tokenizer_is_refused_unread(workdir):
    os.mkfifo(workdir / "fifo.json")
    one_line(microgpt("train", "text.txt", "--tokenizer", "fifo.json", "--no-save", *TINY, cwd=workdir),
             "the tokenizer file fifo.json", "a pipe, not a regular file")
    one_line(microgpt("prepare", "text.txt", "--out", "data", "--quiet", "--tokenizer", "fifo.json", cwd=workdir),
             "the tokenizer file fifo.json", "a pipe")
    assert not (workdir / "data").exists()


def test_dev_zero_and_a_link_to_it_as_the_tokenizer_are_refused_unread(workdir):
    (workdir / "zero.json").symlink_to("/dev/zero")
    for name in ("/dev/zero", "zero.json"):
        one_line(microgpt("train", "text.txt", "--tokenizer", name, "--no-save", *TINY, cwd=workdir),
                 f"the tokenizer file {name}", "a device, not a regular file")


def test_a_sparse_vocabulary_is_refused_before_the_library_reads_it(workdir, tokenizer_json):
    data = json.loads(tokenizer_json.read_text(encoding="utf-8"))
    entries = len(data["model"]["vocab"])
    data["model"]["vocab"]["far"] = 2_000_000_000  # the library would lay out every id up to it: gigabytes
    (workdir / "sparse.json").write_text(json.dumps(data), encoding="utf-8")
    for command in (["train", "text.txt", "--no-save", *TINY], ["prepare", "text.txt", "--out", "data", "--quiet"]):
        one_line(microgpt(*command, "--tokenizer", "sparse.json", cwd=workdir),
                 "the tokenizer file sparse.json has ids up to 2,000,000,000", f"{entries + 1:,} tokens")


@pytest.mark.parametrize("damage, words", [
    (nested(100_000), "is JSON nested too deeply to read"),
    ('{"model": {"type": "BPE", "vocab": {"a": 1' + "0" * 5000 + "}}}", "is JSON with a number of too many digits"),
])
def test_a_tokenizer_json_too_deep_or_with_a_huge_number_is_one_line(workdir, capsys, damage, words):
    (workdir / "bad.json").write_text(damage, encoding="utf-8")
    assert main(["train", "text.txt", "--tokenizer", "bad.json", "--no-save", *TINY]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"the tokenizer file bad.json {words}" in err, err


# ---- a dataset's manifest --------------------------------------------------------------------------------

@pytest.mark.parametrize("damage, words", [
    (nested(100_000), "is JSON nested too deeply to read"),
    ('{"microgpt_dataset": 1' + "0" * 5000 + "}", "is JSON with a number of too many digits"),
    (None, "a pipe, not a regular file"),
])
def test_a_manifest_too_deep_with_a_huge_number_or_a_fifo_is_one_line(workdir, damage, words):
    assert main(["prepare", "text.txt", "--out", "data", "--quiet"]) == 0
    manifest = workdir / "data" / MANIFEST
    manifest.unlink()
    if damage is None:
        os.mkfifo(manifest)
    else:
        manifest.write_text(damage, encoding="utf-8")
    one_line(microgpt("train", "data", "--no-save", *TINY, cwd=workdir), f"{manifest.relative_to(workdir)}", words)


# ---- prepare: a tokenizer.json, and JSON Lines inputs ----------------------------------------------------

def held_out(dataset: Path) -> dict:
    return json.loads((dataset / MANIFEST).read_text(encoding="utf-8"))["splits"].get("val", {})


@pytest.mark.parametrize("kind", ["txt", "jsonl"])
def test_prepare_with_a_tokenizer_json_holds_out_what_it_is_asked(workdir, tokenizer_json, kind):
    lines = [f"document {i}: it was the best of times, it was the worst of times." for i in range(2000)]
    if kind == "txt":
        (workdir / "corpus").mkdir()
        for i, line in enumerate(lines):
            (workdir / "corpus" / f"{i:04}.txt").write_text(line + "\n", encoding="utf-8")
        source = "corpus"
    else:
        source = "corpus.jsonl"
        (workdir / source).write_text("".join(json.dumps({"text": line}) + "\n" for line in lines), encoding="utf-8")
    common = [source, "--tokenizer", "tokenizer.json", "--workers", "1", "--quiet"]
    assert main(["prepare", *common, "--out", "default"]) == 0  # about a tenth
    assert 100 < held_out(workdir / "default")["documents"] < 300
    assert main(["prepare", *common, "--out", "asked", "--val-tokens", "3000"]) == 0
    assert 2000 < held_out(workdir / "asked")["tokens"] < 4000


def test_a_jsonl_number_of_5000_digits_is_one_line_naming_the_line(workdir, capsys):
    (workdir / "big.jsonl").write_text('{"text": "fine"}\n{"text": "x", "n": 1' + "0" * 5000 + "}\n",
                                       encoding="utf-8")
    assert main(["prepare", "big.jsonl", "--out", "data", "--quiet", "--workers", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "big.jsonl line 2 is JSON with a number of too many digits" in err, err
    assert not (workdir / "data").exists()


def test_a_jsonl_line_of_many_blocks_is_one_document(workdir):
    text = "the quick brown fox jumps over the lazy dog. " * 200_000  # 9 MB: nine blocks of reading
    (workdir / "long.jsonl").write_text(json.dumps({"text": text}) + "\n" + json.dumps({"text": "short"}) + "\n",
                                        encoding="utf-8")
    assert main(["prepare", "long.jsonl", "--out", "data", "--quiet", "--workers", "1", "--val-fraction", "0"]) == 0
    train = json.loads((workdir / "data" / MANIFEST).read_text(encoding="utf-8"))["splits"]["train"]
    assert (train["documents"], train["tokens"]) == (2, len(text) + 1 + len("short") + 1)


# ---- the run list: a checkpoint's JSON planted as a FIFO, and its results.jsonl --------------------------

def trained(workdir: Path, name: str) -> Path:
    assert main(["train", "text.txt", *TINY, "--steps", "2", "--model", f"runs/{name}"]) == 0
    return workdir / "runs" / name


def listed(done: subprocess.CompletedProcess) -> dict[str, dict]:
    assert done.returncode == 0, done.stderr
    return {row["name"]: row for row in map(json.loads, done.stdout.splitlines())}


@pytest.mark.parametrize("planted", ["config.json", "train_state.json"])
def test_runs_lists_a_checkpoint_whose_json_is_a_fifo_as_damaged_without_hanging(workdir, planted):
    trained(workdir, "good")
    (trained(workdir, "bad") / planted).unlink()
    os.mkfifo(workdir / "runs" / "bad" / planted)
    rows = listed(microgpt("runs", "--json", "runs", cwd=workdir))
    assert rows["good"]["step"] == 2 and not rows["good"].get("damaged")
    assert rows["bad"]["damaged"] and f"{planted}" in rows["bad"]["error"] and "a pipe" in rows["bad"]["error"]


def test_runs_reads_results_jsonl_a_line_at_a_time(workdir):
    trained(workdir, "good")
    results = workdir / "runs" / "results.jsonl"
    last = results.read_bytes()
    with open(results, "wb") as f:  # 300 MB of one line, then the run's record: read whole, 600 MB or more
        f.write(b"x" * 300 * 1024**2 + b"\n" + last)
    done = run_held(THE_CLI, "runs", "--json", "runs", cwd=workdir, limit=MEMORY, timeout=HANG_S)
    assert listed(done)["good"]["tokens_per_sec"] > 0  # the record after the long line is read
    assert peak_mb(done) < 400, done.stderr  # MB at its peak: a line at a time, 64 KiB at most


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file whatever its mode, so none is unreadable")
def test_runs_lists_runs_beside_an_unreadable_results_jsonl(workdir):
    trained(workdir, "good")
    (workdir / "runs" / "results.jsonl").chmod(0)
    rows = listed(microgpt("runs", "--json", "runs", cwd=workdir))
    assert rows["good"]["step"] == 2 and rows["good"]["tokens_per_sec"] is None

