"""`prepare` against input and disks made to hang it or exhaust it, each answered with one line in bounded time
and memory (issue 52): a compressed file that expands without end, a JSON Lines line without end, a disk that
fills while two workers run. Each CLI run that could hang is a child with a timeout, so a regression fails
instead of hanging the suite; memory is the child's peak resident size, never a time."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from error_lines import one_line
from extras import needs
from microgpt.cli import main
from microgpt.core.errors import DataError
from microgpt.data.dataset import open_dataset
from microgpt.data.prepare import blocks

NEEDS_ZSTD = needs("zstandard")
CHILD_ENV = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}
MEASURED = """import resource, subprocess, sys
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
sys.stdout.write(done.stderr)
print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)
"""


def measured(args: list[str], cwd: Path, timeout: float = 240) -> tuple[int, str, int]:
    """Run `args` in a child of a child that reports its peak resident bytes (its own children's only, so no
    earlier test's child counts): (exit status, its stderr, peak bytes)."""
    done = subprocess.run([sys.executable, "-c", MEASURED, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=CHILD_ENV, check=True)
    *err, last = done.stdout.rstrip("\n").split("\n")
    code, peak = map(int, last.split())
    return code, "\n".join(err), peak


def zst_of(path: Path, chunk: bytes, repeat: int) -> Path:
    import zstandard

    with open(path, "wb") as f, zstandard.ZstdCompressor().stream_writer(f) as writer:
        for _ in range(repeat):
            writer.write(chunk)
    return path


@NEEDS_ZSTD
@pytest.mark.parametrize("byte", [b"\0", b"\n"])
def test_a_zst_that_expands_without_end_is_refused_in_bounded_memory(byte, tmp_path):
    """1 GiB of zeros (or of newlines, blank lines) in a 32 KB .jsonl.zst: a line of zeros was gathered whole
    (4 GB: still going after 180 s at 1 GB), a billion blank lines read one by one (past 120 s). Now one line
    once the file passes a thousand times its size, and prepare stays small."""
    zst_of(tmp_path / "bomb.jsonl.zst", byte * 2**24, 64)
    code, err, peak = measured([sys.executable, "-m", "microgpt", "prepare", "bomb.jsonl.zst", "--out", "out",
                                "--quiet"], tmp_path)
    assert code == 2, err
    line = one_line(err)
    assert "bomb.jsonl.zst decompresses to more than" in line and "over 1,000 times its" in line, line
    assert peak < 512 * 2**20, f"{peak / 2**20:.0f} MiB"
    assert sorted(os.listdir(tmp_path)) == ["bomb.jsonl.zst"]


def test_a_json_lines_line_past_the_limit_is_refused_naming_it(tmp_path, monkeypatch, capsys):
    """A line is gathered whole before it is parsed: one longer than MAX_LINE_BYTES is refused as it grows."""
    monkeypatch.setattr(blocks, "BLOCK_BYTES", 1000)
    monkeypatch.setattr(blocks, "MAX_LINE_BYTES", 3000)
    (tmp_path / "a.jsonl").write_text(json.dumps({"text": "fine"}) + "\n" + json.dumps({"text": "x" * 5000}) + "\n")
    assert main(["prepare", str(tmp_path / "a.jsonl"), "--out", str(tmp_path / "out"), "--quiet", "--workers", "1"]) == 2
    line = one_line(capsys.readouterr().err)
    assert "a.jsonl line 2 is longer than 3,000 bytes" in line, line
    assert not (tmp_path / "out").exists()


STOPPED_MIDWAY = """import contextlib, sys
from microgpt.data.prepare.pool import ordered_map
for trial in range(12):
    blocks = [b"x" * 2**21] * 20  # results of 2 MiB: a worker ended mid-send leaves a part of one in the pipe
    with contextlib.suppress(OSError), contextlib.closing(ordered_map(bytes.upper, blocks, 2, {})) as results:
        for n, _ in enumerate(results):
            if n == trial % 3:
                raise OSError(28, "No space left on device")
print("stopped every time")
"""


def test_workers_stopped_midway_never_hang_the_pool():
    """A write that fails while two workers run (a full disk) ends them and the pool: the pool's thread waited
    for the rest of a result that a worker, ended mid-send, never sent, and the shutdown with it, forever."""
    done = subprocess.run([sys.executable, "-c", STOPPED_MIDWAY], capture_output=True, text=True, timeout=120,
                          env=CHILD_ENV, check=False)
    assert done.returncode == 0 and done.stdout == "stopped every time\n", done.stderr


@pytest.fixture
def full_disk(tmp_path):
    """A 1 MiB tmpfs at tmp_path/disk (root only), unmounted after."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], capture_output=True,
                             text=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs to fill ({mounted.stderr.strip() or 'mount failed'}): needs root")
    yield disk
    subprocess.run(["umount", str(disk)], check=False)


def test_a_full_disk_with_two_workers_is_one_line_and_keeps_the_old_dataset(full_disk, tmp_path):
    """prepare --overwrite onto a disk that fills, with 2 workers: 'the disk is full', the earlier dataset as it
    was, and no partial directory or lock left (it hung in 2 of 3 runs, holding both, until killed)."""
    (tmp_path / "small.txt").write_text("a small corpus\n" * 20)
    assert main(["prepare", str(tmp_path / "small.txt"), "--out", str(full_disk / "ds"), "--quiet"]) == 0
    before = {path.name: path.read_bytes() for path in (full_disk / "ds").iterdir()}
    with open(tmp_path / "big.jsonl", "w") as f:  # 4 MB of text, 8 MB of tokens: two workers, and no room
        f.writelines(json.dumps({"text": f"line {i} of the corpus, " * 8}) + "\n" for i in range(20_000))
    for _ in range(3):
        done = subprocess.run([sys.executable, "-m", "microgpt", "prepare", str(tmp_path / "big.jsonl"), "--out",
                               str(full_disk / "ds"), "--overwrite", "--quiet", "--workers", "2"],
                              capture_output=True, text=True, timeout=120, env=CHILD_ENV, check=False)
        assert done.returncode == 2, done.stderr
        assert "the disk is full" in one_line(done.stderr)
        assert os.listdir(full_disk) == ["ds"]
        assert {path.name: path.read_bytes() for path in (full_disk / "ds").iterdir()} == before


def few_descriptors() -> None:
    """In the child: at most 256 open files, fewer than the dataset's shards."""
    import resource

    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))


def test_training_holds_no_descriptor_per_shard(tmp_path, capsys):
    """1,594 shards under ulimit -n 1024 were 'cannot be read (Too many open files)': each shard held its file
    open for the whole run. Now a read opens its shard and closes it, so 600 shards train under 256."""
    (tmp_path / "a.txt").write_text("the shards are small and many; " * 40)
    assert main(["prepare", str(tmp_path / "a.txt"), "--out", str(tmp_path / "ds"), "--shard-tokens", "2",
                 "--val-fraction", "0", "--quiet"]) == 0
    capsys.readouterr()
    assert len(list((tmp_path / "ds").glob("train-*.bin"))) > 600
    done = subprocess.run([sys.executable, "-m", "microgpt", "train", "ds", "--model", "ck", "--steps", "2",
                           "--d-model", "16", "--n-layers", "1", "--heads", "2", "--d-ff", "32", "--seq-len", "16",
                           "--batch-size", "4", "--gen", "0", "--backend", "numpy", "--quiet"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=240, env=CHILD_ENV, preexec_fn=few_descriptors,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "ck").is_dir()


def test_a_shard_replaced_while_training_is_refused(tmp_path, capsys):
    """With no descriptor held, a read finds the file at the path again: another file there is refused."""
    (tmp_path / "a.txt").write_text("one corpus and then another\n" * 20)
    assert main(["prepare", str(tmp_path / "a.txt"), "--out", str(tmp_path / "ds"), "--val-fraction", "0",
                 "--quiet"]) == 0
    tokens = open_dataset(tmp_path / "ds").train
    first = tokens[0:10]
    shard = tmp_path / "ds" / "train-00000.bin"
    replacement = tmp_path / "new.bin"
    replacement.write_bytes(shard.read_bytes())
    os.replace(replacement, shard)
    with pytest.raises(DataError, match="train-00000.bin changed while training"):
        tokens[0:10]
    assert len(first) == 10


def test_validation_asked_of_a_dataset_without_a_held_out_split_says_so(tmp_path, capsys):
    """A dataset prepared with --val-fraction 0 was told 'the text is too short to hold out a tenth of it'."""
    (tmp_path / "a.txt").write_text("nothing of this is held out\n" * 40)
    assert main(["prepare", str(tmp_path / "a.txt"), "--out", str(tmp_path / "ds"), "--val-fraction", "0",
                 "--quiet"]) == 0
    capsys.readouterr()
    assert main(["train", str(tmp_path / "ds"), "--model", str(tmp_path / "ck"), "--steps", "2", "--eval-every", "1",
                 "--backend", "numpy", "--quiet"]) == 2
    line = one_line(capsys.readouterr().err)
    assert f"the dataset {tmp_path / 'ds'} has no held-out split; prepare it again with --val-fraction" in line, line
    assert "too short" not in line


def test_a_saved_run_whose_sample_cannot_start_exits_0_with_a_note(tmp_path, monkeypatch, capsys):
    """The end-of-run sample comes after the checkpoint is saved: a start its tokenizer encodes to nothing (a
    tokenizer that drops whitespace, from a newline) made the whole run exit 2. Now a note, and exit 0."""
    from microgpt.data.tokenizer.char import CharTokenizer

    monkeypatch.setattr(CharTokenizer, "start_text", lambda self: "")
    (tmp_path / "a.txt").write_text("a run that trains and saves\n" * 40)
    assert main(["train", str(tmp_path / "a.txt"), "--model", str(tmp_path / "ck"), "--steps", "2", "--d-model",
                 "16", "--n-layers", "1", "--heads", "2", "--d-ff", "32", "--seq-len", "16", "--gen", "20",
                 "--backend", "numpy", "--quiet"]) == 0
    captured = capsys.readouterr()
    assert "note: no sample: the prompt '' encodes to no tokens" in captured.err, captured.err
    assert (tmp_path / "ck").is_dir()


def test_a_document_a_tokenizer_encodes_to_nothing_is_still_counted(tmp_path, capsys):
    """A tokenizer that drops whitespace encodes a document of blanks to no tokens: prepare counted documents
    by their tokens and said 'the inputs held 2 documents when scanned and 1 when tokenized: they changed
    while being prepared', which they had not. A document is counted by its text, as the scan counts it."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    tokenizer = Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1, "b": 2, "abba": 3}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "1.txt").write_text("abba abba a\n")  # more letters than blanks: the tokens keep most
    (tmp_path / "in" / "2.txt").write_text("   \n")
    assert main(["prepare", str(tmp_path / "in"), "--out", str(tmp_path / "ds"), "--tokenizer",
                 str(tmp_path / "tokenizer.json"), "--val-fraction", "0", "--quiet"]) == 0, capsys.readouterr().err
    manifest = json.loads((tmp_path / "ds" / "manifest.json").read_text())
    assert manifest["splits"]["train"]["documents"] == 2 and manifest["splits"]["train"]["tokens"] == 3


def normalising_tokenizer(path: Path, pattern: str) -> Path:
    """A byte-level BPE whose normaliser deletes every match of `pattern` before anything is tokenized."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = normalizers.Replace(Regex(pattern), "")
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(["some text to learn a few merges from\n"], trainers.BpeTrainer(
        vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    tokenizer.save(str(path))
    return path


@pytest.mark.parametrize("where", ["start", "later"])
def test_a_normaliser_that_drops_most_of_the_text_is_refused(tmp_path, capsys, where):
    """A tokenizer.json whose normaliser deletes the lowercase letters keeps a fifth of the characters: prepare
    wrote the dataset without a word, and a model trained on the rest. Refused in one line, nothing written:
    at once where the start of the text shows it, else once all of it is tokenized."""
    line = "The quick brown fox jumps over the lazy dog.\n"
    if where == "start":
        (tmp_path / "in.txt").write_text(line * 1000)
    else:  # the first million characters (measured first) keep all; most of the rest is lowercase
        (tmp_path / "in.txt").write_text("ABC DEF.\n" * 120_000 + line * 60_000)
    tokenizer = normalising_tokenizer(tmp_path / "tokenizer.json", "[a-z]")
    code = main(["prepare", str(tmp_path / "in.txt"), "--out", str(tmp_path / "ds"), "--tokenizer", str(tokenizer),
                 "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    of = "the start of the text" if where == "start" else "the text"
    assert re.search(rf"the tokenizer keeps \d+\.\d% of the characters of {of} \(its normaliser", err), err
    assert not (tmp_path / "ds").exists() and not list(tmp_path.glob("ds.partial-*"))


def test_what_the_tokenizer_keeps_is_reported_and_a_loss_noted(tmp_path, capsys):
    (tmp_path / "in.txt").write_text("The quick brown fox jumps over the lazy dog.\n" * 200)
    assert main(["prepare", str(tmp_path / "in.txt"), "--out", str(tmp_path / "bpe"), "--tokenizer", "bpe",
                 "--quiet"]) == 0
    assert "characters: 9,000 in the documents; the tokens stand for all of them" in capsys.readouterr().out
    tokenizer = normalising_tokenizer(tmp_path / "tokenizer.json", "[o]")  # 4 of the 45 characters of a line
    assert main(["prepare", str(tmp_path / "in.txt"), "--out", str(tmp_path / "hf"), "--tokenizer", str(tokenizer),
                 "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "the tokens stand for 91.1% of them" in out, out
    assert "note: the tokenizer drops 8.9% of the text's characters" in out
