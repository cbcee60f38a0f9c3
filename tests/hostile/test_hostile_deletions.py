"""Nothing deleted that is not ours (issue 52): `prepare --overwrite` replaces only a prepared dataset or an empty
directory; prepare removes only its own partial directories, by exact name, writes no dataset inside a
checkpoint and refuses a cut .zst input; `graph from-family --out` is held to export's rules; a signal during an
export's write leaves no temporary file, and prepare's workers end when prepare is killed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from export_cases import checkpoint
from folder_files import fake_checkpoint, listing
from microgpt.cli import main
from microgpt.data.dataset import open_dataset
from microgpt.model.checkpoint import is_checkpoint
from waiting import alive

WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "naïve", "café", "東京", "😀"]


def prepare(capsys, *args) -> tuple[int, str]:
    code = main(["prepare", *map(str, args), "--quiet"])
    return code, capsys.readouterr().err


def refused(capsys, *args) -> str:
    """Run `microgpt prepare ARGS`; assert exit 2 and one line on stderr, which is returned."""
    code, err = prepare(capsys, *args)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    return err


# -- D: --overwrite replaces a prepared dataset or an empty directory, nothing else -------------------------------


def test_overwrite_leaves_a_directory_that_merely_holds_a_manifest(tmp_path, capsys):
    (tmp_path / "a.txt").write_text("text\n")
    app = tmp_path / "app"
    (app / "src").mkdir(parents=True)
    (app / "manifest.json").write_text('{"name": "my-web-app", "version": "1.0.0"}')
    (app / "important.txt").write_text("keep me")
    (app / "src" / "main.js").write_text("console.log('hello')")
    before = listing(app)
    assert "is not a prepared dataset" in refused(capsys, tmp_path / "a.txt", "--out", app, "--overwrite")
    assert listing(app) == before


def test_overwrite_leaves_a_dataset_that_holds_a_file_of_the_users(tmp_path, capsys):
    (tmp_path / "a.txt").write_text("text\n")
    assert prepare(capsys, tmp_path / "a.txt", "--out", tmp_path / "ds")[0] == 0
    (tmp_path / "ds" / "notes.txt").write_text("keep me")
    before = listing(tmp_path / "ds")
    assert "is not a prepared dataset" in refused(capsys, tmp_path / "a.txt", "--out", tmp_path / "ds", "--overwrite")
    assert listing(tmp_path / "ds") == before
    (tmp_path / "ds" / "notes.txt").unlink()
    assert prepare(capsys, tmp_path / "a.txt", "--out", tmp_path / "ds", "--overwrite")[0] == 0
    (tmp_path / "empty").mkdir()
    assert prepare(capsys, tmp_path / "a.txt", "--out", tmp_path / "empty", "--overwrite")[0] == 0


# -- E: only this --out's partial directories, by exact name, holding only what prepare writes ------------------


def test_only_this_outs_own_partial_directories_are_removed(tmp_path, capsys):
    (tmp_path / "a.txt").write_text("text\n")
    notes = tmp_path / "books.partial-2023-notes"  # the user's
    notes.mkdir()
    (notes / "chapter1.txt").write_text("keep me")
    live = tmp_path / "wiki1.partial-deadbeef"  # another --out's, which may be a running prepare's
    live.mkdir()
    (live / "train-00000.bin").write_bytes(b"shards being written")
    named_like_ours = tmp_path / "books.partial-0123abcd"  # the user's again, with a note in it
    named_like_ours.mkdir()
    (named_like_ours / "notes.txt").write_text("keep me too")
    stale = tmp_path / "books.partial-89abcdef"  # a killed prepare's into --out books
    stale.mkdir()
    (stale / "train-00000.bin").write_bytes(b"half")
    kept = {path: listing(path) for path in (notes, live, named_like_ours)}
    assert prepare(capsys, tmp_path / "a.txt", "--out", tmp_path / "books")[0] == 0
    assert prepare(capsys, tmp_path / "a.txt", "--out", tmp_path / "wiki?")[0] == 0  # a name, not a pattern
    assert {path: listing(path) for path in kept} == kept
    assert not stale.exists()


def test_a_directory_named_like_a_partial_but_not_one_is_read(tmp_path, capsys):
    corpus = tmp_path / "corpus"
    (corpus / "books.partial-2023-notes").mkdir(parents=True)
    (corpus / "books.partial-2023-notes" / "chapter1.txt").write_text("chapter one\n")
    assert prepare(capsys, corpus, "--out", corpus / "books", "--val-fraction", "0")[0] == 0
    manifest = json.loads((corpus / "books" / "manifest.json").read_text())
    assert [entry["path"] for entry in manifest["inputs"]] == [str(corpus / "books.partial-2023-notes" / "chapter1.txt")]


# -- F: no dataset inside a checkpoint ----------------------------------------------------------------------------


def test_prepare_refuses_an_out_inside_a_checkpoint(tmp_path, capsys):
    (tmp_path / "a.txt").write_text("text\n")
    ck = fake_checkpoint(tmp_path / "ck")
    for out in (ck / "data", ck / "data" / "more"):
        assert "is inside the checkpoint" in refused(capsys, tmp_path / "a.txt", "--out", out)
    assert sorted(p.name for p in ck.iterdir()) == ["config.json", "model.safetensors"]
    assert is_checkpoint(ck)


# -- H: graph from-family --out follows export's rules ------------------------------------------------------------


def from_family(capsys, out: Path, *flags: str) -> tuple[int, str]:
    code = main(["graph", "from-family", "--d-model", "16", "--out", str(out), *flags])
    return code, capsys.readouterr().err


def test_graph_from_family_leaves_a_runs_files_and_a_dangling_link(tmp_path, capsys):
    fake_checkpoint(tmp_path / "ck")
    for name in ("ck.metrics.jsonl", ".ck.lock", "results.jsonl"):
        (tmp_path / name).write_text("the run's\n")
    inodes = {name: (tmp_path / name).stat().st_ino for name in ("ck.metrics.jsonl", ".ck.lock", "results.jsonl")}
    for name, inode in inodes.items():
        code, err = from_family(capsys, tmp_path / name, "--overwrite")
        assert code == 2 and "a file a training run writes" in err, err
        assert (tmp_path / name).read_text() == "the run's\n" and (tmp_path / name).stat().st_ino == inode
    link = tmp_path / "g.json"
    link.symlink_to(tmp_path / "elsewhere.json")
    code, err = from_family(capsys, link)
    assert code == 2 and "exists; add --overwrite" in err, err
    assert link.is_symlink() and os.readlink(link) == str(tmp_path / "elsewhere.json")
    assert from_family(capsys, link, "--overwrite")[0] == 0
    assert json.loads(link.read_text())["dims"]["d"] == 16


# -- G: a cut .zst is refused as a cut .gz or .xz is --------------------------------------------------------------


def text_of(size: int) -> str:
    rng = np.random.default_rng(0)
    return "".join(" ".join(rng.choice(WORDS, size=12)) + "\n" for _ in range(size // 60))


def test_a_cut_zst_is_refused_and_a_whole_one_of_several_frames_read(tmp_path, capsys):
    zstandard = pytest.importorskip("zstandard", reason="zstandard is not installed: pip install -e '.[data]'")
    text = text_of(1_000_000)
    packed = zstandard.ZstdCompressor().compress(text.encode())
    for cut in (0.6, 0.99):
        (tmp_path / "cut.txt.zst").write_bytes(packed[: int(len(packed) * cut)])
        line = refused(capsys, tmp_path / "cut.txt.zst", "--out", tmp_path / "ds")
        assert "cut.txt.zst is not a whole zstandard file" in line and "cut short" in line, line
        assert not (tmp_path / "ds").exists()
    halves = [zstandard.ZstdCompressor(write_checksum=True).compress(text[:1000].encode()),
              zstandard.ZstdCompressor(write_content_size=False).compress(text[1000:].encode())]
    skippable = (0x184D2A5F).to_bytes(4, "little") + (3).to_bytes(4, "little") + b"abc"  # a frame readers pass over
    (tmp_path / "whole.txt.zst").write_bytes(halves[0] + skippable + halves[1])
    assert prepare(capsys, tmp_path / "whole.txt.zst", "--out", tmp_path / "ds", "--val-fraction", "0")[0] == 0
    dataset = open_dataset(tmp_path / "ds")
    assert dataset.tokenizer.decode(dataset.train[0 : len(dataset.train)]) == text


# -- I: a signal cleans up; workers end with their parent ---------------------------------------------------------

# Runs `microgpt export ARGS` with the temporary file held open once it is whole: it says so on stdout and waits
# there (its fsync), for the test's signal to come mid-write.
HELD_WRITE = """
import os, sys, time, types
from microgpt.cli import main
from microgpt.export import files

def held(fd):
    print("writing", flush=True)
    time.sleep(120)

files.os = types.SimpleNamespace(**{**vars(os), "fsync": held})
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_during_an_exports_write_leaves_no_temporary_file(tmp_path, signum):
    for package in ("onnx", "onnxruntime"):
        pytest.importorskip(package, reason=f"{package} is not installed: pip install -e '.[export]'")
    out = tmp_path / "model.onnx"
    process = subprocess.Popen([sys.executable, "-c", HELD_WRITE, "export", str(checkpoint("gpt")), "--out", str(out)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout.readline() == "writing\n", process.communicate()
    assert [p.name for p in tmp_path.iterdir()] == [f".model.onnx.{process.pid}.tmp"]
    process.send_signal(signum)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 128 + signum, err
    assert len(err.strip().splitlines()) == 1 and err.startswith("microgpt export: "), err
    assert not list(tmp_path.iterdir())


def children(pid: int) -> set[int]:
    """The processes whose parent is `pid` (from /proc)."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.add(int(stat.parent.name))
    return found


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc (Linux)")
def test_prepares_workers_end_when_it_is_killed(tmp_path):
    (tmp_path / "big.txt").write_text(text_of(12_000_000))  # bpe: several seconds to tokenize with 2 workers
    process = subprocess.Popen([sys.executable, "-m", "microgpt", "prepare", str(tmp_path / "big.txt"), "--out",
                                str(tmp_path / "ds"), "--tokenizer", "bpe", "--tokenizer-sample", "200KB",
                                "--workers", "2", "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob("ds.partial-*/train-*.bin")) and time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        time.sleep(0.05)
    started = children(process.pid)  # the two workers and multiprocessing's resource tracker
    assert len(started) >= 3, started
    process.kill()
    process.wait()
    deadline = time.monotonic() + 30
    while any(map(alive, started)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [pid for pid in started if alive(pid)]
