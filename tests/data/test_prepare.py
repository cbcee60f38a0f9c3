"""`microgpt prepare`: every input kind read back token for token, the split, the workers, the shard format,
and every refusal answered with one line, exit 2 and nothing left behind."""

from __future__ import annotations

import errno
import gzip
import json
import lzma
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from extras import needs
from microgpt.cli import main
from microgpt.core.errors import ConfigError, DataError
from microgpt.data import shards
from microgpt.data.dataset import MANIFEST, open_dataset
from microgpt.data.prepare import PrepareSettings, blocks, prepare
from microgpt.data.prepare.out_dir import Output
from microgpt.data.prepare.writer import ShardWriter
from microgpt.data.tokenizer.bpe import BPETokenizer
from prepare_inputs import WORDS, documents, tokens, write_jsonl

ROOT = Path(__file__).resolve().parents[2]


NEEDS_ZSTD, NEEDS_ARROW = needs("zstandard"), needs("pyarrow")


def ended(doc: str) -> str:
    return doc if doc.endswith("\n") else doc + "\n"


def run(capsys, *args: str) -> tuple[int, str, str]:
    try:
        code = main(["prepare", *map(str, args), "--quiet"])
    except SystemExit as stop:  # the parser's refusals
        code = stop.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def one_error_line(capsys, *args: str) -> str:
    code, _, err = run(capsys, *args)
    assert code == 2, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


def nothing_left(out: Path) -> None:
    """No --out, no partial directory and no lock beside it."""
    assert not out.exists()
    assert not list(out.parent.glob(f"{out.name}.partial-*"))
    assert not (out.parent / f".{out.name}.lock").exists()


def expected(tokenizer, docs: list[str]) -> np.ndarray:
    """The tokenizer's encoding of each document (with the separator rule), one after another."""
    return np.concatenate([tokenizer.encode(ended(doc)) for doc in docs if doc]).astype(np.int64)


# -- every kind of input, read back ---------------------------------------------------------------------------


def make_input(kind: str, directory: Path, docs: list[str]) -> Path:
    if kind == ".txt":
        (directory / "one.txt").write_text(docs[0], encoding="utf-8")
        return directory / "one.txt"
    if kind == ".txt.xz":
        with lzma.open(directory / "one.txt.xz", "wt", encoding="utf-8") as f:
            f.write(docs[0])
        return directory / "one.txt.xz"
    if kind == ".jsonl":
        return write_jsonl(directory / "d.jsonl", docs)
    if kind == ".jsonl.gz":
        return write_jsonl(directory / "d.jsonl.gz", docs, opener=gzip.open)
    if kind == ".jsonl.zst":
        import zstandard

        raw = "".join(json.dumps({"text": doc}) + "\n" for doc in docs).encode()
        (directory / "d.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(raw))
        return directory / "d.jsonl.zst"
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = directory / ("d.parquet" if kind == ".parquet" else "d.parquet.gz")
    table = pa.table({"n": list(range(len(docs))), "text": docs})
    if kind == ".parquet":
        pq.write_table(table, path, row_group_size=7)
    else:
        pq.write_table(table, directory / "plain.parquet", row_group_size=7)
        path.write_bytes(gzip.compress((directory / "plain.parquet").read_bytes()))
        (directory / "plain.parquet").unlink()
    return path


@pytest.mark.parametrize("kind", [".txt", ".txt.xz", ".jsonl", ".jsonl.gz",
                                  pytest.param(".jsonl.zst", marks=NEEDS_ZSTD),
                                  pytest.param(".parquet", marks=NEEDS_ARROW),
                                  pytest.param(".parquet.gz", marks=NEEDS_ARROW)])
@pytest.mark.parametrize("tokenizer", ["char", "bpe"])
def test_each_input_kind_reads_back_as_the_tokenizers_encoding(tmp_path, capsys, kind, tokenizer):
    docs = documents()
    if kind.startswith(".txt"):
        docs = ["".join(docs)]  # a text file is one document
    source = make_input(kind, tmp_path, docs)
    code, out, err = run(capsys, source, "--out", tmp_path / "ds", "--tokenizer", tokenizer, "--val-fraction", "0",
                         "--vocab-size" if tokenizer == "bpe" else "--seed", "300" if tokenizer == "bpe" else "0")
    assert code == 0, err
    dataset = open_dataset(tmp_path / "ds")
    assert dataset.val is None
    np.testing.assert_array_equal(tokens(dataset.train), expected(dataset.tokenizer, docs))
    assert dataset.manifest["splits"]["train"]["documents"] == len(docs)
    assert f"train: {len(docs):,} document" in out


def test_a_text_cut_into_many_blocks_encodes_as_the_whole(tmp_path, capsys, monkeypatch):
    """The cuts between a text's blocks change no token: bpe of the blocks is bpe of the whole text."""
    monkeypatch.setattr(blocks, "BLOCK_BYTES", 97)
    words = ["alpha", "beta,", "gamma!", "δέλτα", "  ", "\n", "\n\n", "\t", "x'", "'s", "1234", " ", "😀"]
    rng = np.random.default_rng(1)
    text = "".join(rng.choice(words, size=4000)) + "end"
    (tmp_path / "t.txt").write_text(text, encoding="utf-8")
    for tokenizer in ("bpe", "char"):
        code, _, err = run(capsys, tmp_path / "t.txt", "--out", tmp_path / tokenizer, "--tokenizer", tokenizer,
                           "--workers", "1")
        assert code == 0, err
        dataset = open_dataset(tmp_path / tokenizer)
        np.testing.assert_array_equal(tokens(dataset.train), expected(dataset.tokenizer, [text]))


def test_a_text_without_a_place_to_cut_is_cut_between_characters(tmp_path, monkeypatch):
    monkeypatch.setattr(blocks, "BLOCK_BYTES", 16)
    monkeypatch.setattr(blocks, "MAX_BLOCK_BYTES", 64)
    text = "é東😀" * 300  # no space, no newline: every cut is a hard one, between characters
    (tmp_path / "t.txt").write_text(text, encoding="utf-8")
    prepare([tmp_path / "t.txt"], tmp_path / "ds", PrepareSettings(workers=1), quiet=True)
    dataset = open_dataset(tmp_path / "ds")
    assert dataset.tokenizer.decode(tokens(dataset.train)) == text + "\n"


def test_directories_are_walked_in_order_with_glob_and_hidden_files_passed_over(tmp_path, capsys):
    corpus = tmp_path / "corpus"
    (corpus / "b" / "deep").mkdir(parents=True)
    (corpus / ".git").mkdir()
    (corpus / "a.txt").write_text("first\n")
    (corpus / "b" / "deep" / "c.txt").write_text("third\n")
    (corpus / "b" / "b.md").write_text("second\n")
    (corpus / ".hidden.txt").write_text("hidden\n")
    (corpus / ".git" / "x.txt").write_text("git\n")
    (corpus / "notes.csv").write_text("csv\n")
    assert run(capsys, corpus, "--out", tmp_path / "all", "--val-fraction", "0")[0] == 0
    dataset = open_dataset(tmp_path / "all")
    assert dataset.tokenizer.decode(tokens(dataset.train)) == "first\nthird\n"  # .txt only, sorted
    assert [entry["path"] for entry in dataset.manifest["inputs"]] == [str(corpus / "a.txt"),
                                                                       str(corpus / "b" / "deep" / "c.txt")]
    assert run(capsys, corpus, "--out", tmp_path / "md", "--glob", "*.md", "--val-fraction", "0")[0] == 0
    assert open_dataset(tmp_path / "md").tokenizer.decode(tokens(open_dataset(tmp_path / "md").train)) == "second\n"
    assert "holds no files matching --glob '*.rst'" in one_error_line(
        capsys, corpus, "--out", tmp_path / "none", "--glob", "*.rst")


def test_the_manifest_says_what_was_prepared(tmp_path, capsys):
    source = write_jsonl(tmp_path / "d.jsonl", documents())
    assert run(capsys, source, "--out", tmp_path / "ds", "--val-fraction", "0.3")[0] == 0
    manifest = json.loads((tmp_path / "ds" / MANIFEST).read_text())
    assert manifest["microgpt_dataset"] == 1 and manifest["tokenizer"]["kind"] == "char"
    assert manifest["dtype"] == "uint16"
    assert manifest["inputs"] == [{"path": str(source), "bytes": source.stat().st_size}]
    assert manifest["command"].startswith("microgpt prepare ") and "--val-fraction 0.3" in manifest["command"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", manifest["created"])
    assert manifest["errors"] == {"mode": "strict", "replaced": 0, "skipped": 0}
    for name, split in manifest["splits"].items():
        for entry in split["shards"]:
            path = tmp_path / "ds" / entry["file"]
            assert entry["file"].startswith(name) and entry["bytes"] == path.stat().st_size
            assert entry["tokens"] == (entry["bytes"] - shards.HEADER_BYTES) // 2
        assert split["tokens"] == sum(entry["tokens"] for entry in split["shards"])
    assert manifest["splits"]["train"]["documents"] + manifest["splits"]["val"]["documents"] == 60


def test_shards_hold_at_most_shard_tokens_and_read_as_one_sequence(tmp_path, capsys):
    docs = documents()
    source = write_jsonl(tmp_path / "d.jsonl", docs)
    assert run(capsys, source, "--out", tmp_path / "ds", "--val-fraction", "0", "--shard-tokens", "500")[0] == 0
    dataset = open_dataset(tmp_path / "ds")
    entries = dataset.manifest["splits"]["train"]["shards"]
    assert len(entries) > 3 and all(entry["tokens"] == 500 for entry in entries[:-1])
    assert [entry["file"] for entry in entries] == [f"train-{i:05d}.bin" for i in range(len(entries))]
    np.testing.assert_array_equal(tokens(dataset.train), expected(dataset.tokenizer, docs))


# -- the split ------------------------------------------------------------------------------------------------


def split_documents(dataset, docs: list[str]) -> tuple[list[int], list[int]]:
    """Which documents (by index) each split holds, checking each is whole, in order, in exactly one."""
    texts = {name: dataset.tokenizer.decode(tokens(split)) for name, split in
             (("train", dataset.train), ("val", dataset.val))}
    places = {"train": 0, "val": 0}
    found = {"train": [], "val": []}
    for i, doc in enumerate(docs):
        homes = [name for name in texts if texts[name].startswith(ended(doc), places[name])]
        assert len(homes) == 1, f"document {i} is not whole in one split"
        places[homes[0]] += len(ended(doc))
        found[homes[0]].append(i)
    assert places == {name: len(text) for name, text in texts.items()}
    return found["train"], found["val"]


def test_the_split_is_by_document_deterministic_and_seeded(tmp_path, capsys):
    docs = documents(200)
    source = write_jsonl(tmp_path / "d.jsonl", docs)
    for out, seed in (("a", "0"), ("b", "0"), ("c", "1")):
        assert run(capsys, source, "--out", tmp_path / out, "--val-fraction", "0.25", "--seed", seed)[0] == 0
    a, b, c = (open_dataset(tmp_path / out) for out in "abc")
    train_a, val_a = split_documents(a, docs)
    assert 25 <= len(val_a) <= 75  # about a quarter
    assert split_documents(b, docs) == (train_a, val_a)
    assert (tmp_path / "a" / "val-00000.bin").read_bytes() == (tmp_path / "b" / "val-00000.bin").read_bytes()
    assert split_documents(c, docs)[1] != val_a
    assert a.manifest["splits"]["val"]["documents"] == len(val_a)


def test_val_tokens_holds_out_about_that_many(tmp_path, capsys):
    docs = documents(400)
    source = write_jsonl(tmp_path / "d.jsonl", docs)
    assert run(capsys, source, "--out", tmp_path / "ds", "--val-tokens", "3000")[0] == 0
    held = open_dataset(tmp_path / "ds").manifest["splits"]["val"]["tokens"]
    assert 2900 <= held <= 3100  # within a document or so of 3000


def test_the_default_holds_out_about_a_tenth_and_none_of_one_document(tmp_path, capsys):
    source = write_jsonl(tmp_path / "d.jsonl", documents(400))
    assert run(capsys, source, "--out", tmp_path / "ds")[0] == 0
    splits = open_dataset(tmp_path / "ds").manifest["splits"]
    share = splits["val"]["tokens"] / (splits["val"]["tokens"] + splits["train"]["tokens"])
    assert 0.09 < share < 0.11
    (tmp_path / "one.txt").write_text("a single document\n" * 50)
    code, out, _ = run(capsys, tmp_path / "one.txt", "--out", tmp_path / "one")
    assert code == 0 and "nothing held out" in out
    assert open_dataset(tmp_path / "one").val is None


def test_a_split_that_leaves_nothing_to_train_on_is_refused(tmp_path, capsys):
    source = write_jsonl(tmp_path / "d.jsonl", documents(3))
    line = one_error_line(capsys, source, "--out", tmp_path / "ds", "--val-fraction", "0.9999999")
    assert "leaving none to train on" in line
    nothing_left(tmp_path / "ds")


# -- workers and token types ----------------------------------------------------------------------------------


@pytest.mark.parametrize("tokenizer", ["char", "bpe"])
def test_one_and_two_workers_write_the_same_shards(tmp_path, capsys, monkeypatch, tokenizer):
    monkeypatch.setattr(blocks, "BLOCK_BYTES", 512)  # many blocks, so that both workers get some
    docs = documents(150)
    (tmp_path / "in").mkdir()
    write_jsonl(tmp_path / "in" / "d.jsonl", docs)
    (tmp_path / "in" / "long.txt").write_text("".join(documents(80, seed=5)))
    for workers in ("1", "2"):
        code, _, err = run(capsys, tmp_path / "in", "--out", tmp_path / workers, "--workers", workers,
                           "--tokenizer", tokenizer, "--val-fraction", "0.2", "--shard-tokens", "3000")
        assert code == 0, err
    files = sorted(p.name for p in (tmp_path / "1").iterdir())
    assert files == sorted(p.name for p in (tmp_path / "2").iterdir()) and len(files) > 3
    for name in files:
        if name != MANIFEST:
            assert (tmp_path / "1" / name).read_bytes() == (tmp_path / "2" / name).read_bytes(), name
    one, two = (json.loads((tmp_path / w / MANIFEST).read_text()) for w in "12")
    assert one["splits"] == two["splits"] and one["tokenizer"] == two["tokenizer"]


def test_the_token_type_is_the_smallest_that_holds_the_vocabulary(tmp_path):
    assert shards.token_dtype(256) == np.dtype("<u2") and shards.token_dtype(65536) == np.dtype("<u2")
    assert shards.token_dtype(65537) == np.dtype("<u4")
    writer = ShardWriter(tmp_path, "train", shards.token_dtype(100_000), shard_tokens=3)
    writer.append(np.array([0, 70_000, 99_999, 65_536], dtype=np.int64))
    entries = writer.close()
    assert [entry["tokens"] for entry in entries] == [3, 1]
    readers = [shards.open_shard(tmp_path / entry["file"]) for entry in entries]
    assert all(reader.dtype == np.dtype("<u4") for reader in readers)
    assert np.concatenate([reader[:] for reader in readers]).tolist() == [0, 70_000, 99_999, 65_536]


def test_a_char_corpus_of_more_than_65536_characters_is_uint32(tmp_path, capsys):
    points = [p for p in range(0x100, 0x100 + 70_000 + 2048) if not 0xD800 <= p < 0xE000][:70_000]
    text = "".join(map(chr, points)) + "\n"
    (tmp_path / "wide.txt").write_text(text, encoding="utf-8")
    assert run(capsys, tmp_path / "wide.txt", "--out", tmp_path / "ds")[0] == 0
    dataset = open_dataset(tmp_path / "ds")
    assert dataset.manifest["dtype"] == "uint32" and dataset.tokenizer.size == 70_001
    assert dataset.tokenizer.decode(tokens(dataset.train)) == text


# -- undecodable bytes ------------------------------------------------------------------------------------------


def test_errors_strict_names_the_file_and_byte(tmp_path, capsys):
    (tmp_path / "good.txt").write_text("fine\n")
    (tmp_path / "bad.txt").write_bytes(b"caf\xe9 au lait\n")
    line = one_error_line(capsys, tmp_path / "good.txt", tmp_path / "bad.txt", "--out", tmp_path / "ds")
    assert f"{tmp_path / 'bad.txt'}: byte 3 is not UTF-8" in line and "--errors replace" in line
    nothing_left(tmp_path / "ds")
    write_jsonl(tmp_path / "d.jsonl", ["ok"])
    with open(tmp_path / "d.jsonl", "ab") as f:
        f.write(b'{"text": "bad \xff here"}\n')
    at = len(b'{"id": 2, "text": "ok"}\n') + len(b'{"text": "bad ')
    assert f"d.jsonl: line 2, byte {at} is not UTF-8" in one_error_line(capsys, tmp_path / "d.jsonl", "--out",
                                                                     tmp_path / "ds")


def test_errors_replace_and_skip_are_counted(tmp_path, capsys):
    docs = ["good one\n", "bad \xff one\n", "good two\n"]
    with open(tmp_path / "d.jsonl", "wb") as f:
        f.writelines(json.dumps({"text": doc}).encode().replace(b"\\u00ff", b"\xff") + b"\n" for doc in docs)
    (tmp_path / "lone.jsonl").write_text('{"text": "lone \\ud800 surrogate"}\n')
    args = (tmp_path / "d.jsonl", tmp_path / "lone.jsonl", "--val-fraction", "0")
    code, out, _ = run(capsys, *args, "--out", tmp_path / "r", "--errors", "replace")
    assert code == 0 and "2 replaced, 0 documents skipped" in out
    dataset = open_dataset(tmp_path / "r")
    assert dataset.tokenizer.decode(tokens(dataset.train)) == \
        "good one\nbad \ufffd one\ngood two\nlone \ufffd surrogate\n"
    assert dataset.manifest["errors"] == {"mode": "replace", "replaced": 2, "skipped": 0}
    code, out, _ = run(capsys, *args, "--out", tmp_path / "s", "--errors", "skip")
    assert code == 0 and "0 replaced, 2 documents skipped" in out
    dataset = open_dataset(tmp_path / "s")
    assert dataset.tokenizer.decode(tokens(dataset.train)) == "good one\ngood two\n"
    assert dataset.manifest["errors"] == {"mode": "skip", "replaced": 0, "skipped": 2}
    assert dataset.manifest["splits"]["train"]["documents"] == 2


def test_errors_skip_drops_a_long_text_whose_late_block_is_bad(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(blocks, "BLOCK_BYTES", 64)
    (tmp_path / "a.txt").write_bytes(("word " * 100).encode() + b"\xff tail\n")
    (tmp_path / "b.txt").write_text("kept\n")
    code, out, _ = run(capsys, tmp_path / "a.txt", tmp_path / "b.txt", "--out", tmp_path / "ds", "--errors", "skip",
                       "--workers", "1")
    assert code == 0 and "1 document skipped" in out
    dataset = open_dataset(tmp_path / "ds")
    assert dataset.tokenizer.decode(tokens(dataset.train)) == "kept\n"


# -- refusals: one line, exit 2, nothing left -------------------------------------------------------------------


@pytest.mark.parametrize("setup, expected", [
    (lambda d: (d / "a.txt").write_text("text\n") and (d / "b.txt").write_bytes(b"\x00\x01binary"),
     "b.txt looks binary (a NUL byte at byte 0)"),
    (lambda d: (d / "a.jsonl").write_text('{"text": "x"}\n{"text": \n'), "a.jsonl line 2 is not JSON"),
    (lambda d: (d / "a.jsonl").write_text('{"text": "x"}\n{"body": "y"}\n'),
     "a.jsonl line 2 has no 'text' field (its fields: 'body'); give --text-field"),
    (lambda d: (d / "a.jsonl").write_text('{"text": 3}\n'), "a.jsonl line 1: its 'text' is a JSON int, not text"),
    (lambda d: (d / "a.jsonl").write_text('[1, 2]\n'), "a.jsonl line 1 is a JSON list, not an object"),
    (lambda d: (d / "a.txt").write_text(""), "holds no documents"),
    (lambda d: (d / "a.jsonl").write_text('{"text": ""}\n\n{"text": null}\n'), "holds no documents"),
    (lambda d: (d / "a.txt.gz").write_bytes(gzip.compress(b"hello world\n" * 100)[:-20]),
     "is not a whole gzip file"),
    (lambda d: (d / "a.txt.xz").write_bytes(b"not xz at all"), "is not a whole xz file"),
])
def test_bad_inputs_get_one_line_and_leave_nothing(tmp_path, capsys, setup, expected):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    setup(corpus)
    line = one_error_line(capsys, *sorted(corpus.iterdir()), "--out", tmp_path / "ds")
    assert expected in line, line
    nothing_left(tmp_path / "ds")


@NEEDS_ARROW
def test_a_parquet_file_without_the_text_field_is_refused(tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"body": ["a", "b"], "n": [1, 2]}), tmp_path / "d.parquet")
    line = one_error_line(capsys, tmp_path / "d.parquet", "--out", tmp_path / "ds")
    assert "d.parquet has no column 'text' (its columns: body, n); give --text-field" in line
    nothing_left(tmp_path / "ds")
    assert "holds int64, not text" in one_error_line(capsys, tmp_path / "d.parquet", "--out", tmp_path / "ds",
                                                     "--text-field", "n")
    assert run(capsys, tmp_path / "d.parquet", "--out", tmp_path / "ds", "--text-field", "body")[0] == 0


def test_missing_packages_name_the_data_extra(tmp_path, capsys, monkeypatch):
    from microgpt.data.prepare import inputs

    monkeypatch.setattr(inputs, "has_package", lambda name: False)
    (tmp_path / "d.jsonl.zst").write_bytes(b"")
    line = one_error_line(capsys, tmp_path / "d.jsonl.zst", "--out", tmp_path / "ds")
    assert "needs the zstandard package" in line and 'pip install -e ".[data]"' in line
    (tmp_path / "d.parquet").write_bytes(b"")
    assert "needs the pyarrow package" in one_error_line(capsys, tmp_path / "d.parquet", "--out", tmp_path / "p")


def test_bad_paths_and_flags_are_refused(tmp_path, capsys):
    (tmp_path / "a.txt").write_text("text\n")
    assert "no such file or directory" in one_error_line(capsys, tmp_path / "nope.txt", "--out", tmp_path / "ds")
    assert "--vocab-size is for bpe" in one_error_line(capsys, tmp_path / "a.txt", "--out", tmp_path / "ds",
                                                       "--vocab-size", "300")
    assert "give one of them" in one_error_line(capsys, tmp_path / "a.txt", "--out", tmp_path / "ds",
                                                "--val-fraction", "0.1", "--val-tokens", "10")
    assert "--val-fraction" in one_error_line(capsys, tmp_path / "a.txt", "--out", tmp_path / "ds",
                                              "--val-fraction", "1")
    assert "--vocab-size" in one_error_line(capsys, tmp_path / "a.txt", "--out", tmp_path / "ds", "--tokenizer",
                                            "bpe", "--vocab-size", "100")
    (tmp_path / "file").write_text("x")
    assert "is a file" in one_error_line(capsys, tmp_path / "a.txt", "--out", tmp_path / "file")
    nothing_left(tmp_path / "ds")


def test_an_existing_out_is_replaced_only_with_overwrite_and_only_a_dataset(tmp_path, capsys):
    (tmp_path / "a.txt").write_text("first\n")
    (tmp_path / "b.txt").write_text("second\n")
    assert run(capsys, tmp_path / "a.txt", "--out", tmp_path / "ds")[0] == 0
    assert "holds a prepared dataset; give --overwrite" in one_error_line(capsys, tmp_path / "b.txt", "--out",
                                                                          tmp_path / "ds")
    assert open_dataset(tmp_path / "ds").tokenizer.decode(tokens(open_dataset(tmp_path / "ds").train)) == "first\n"
    assert run(capsys, tmp_path / "b.txt", "--out", tmp_path / "ds", "--overwrite")[0] == 0
    assert open_dataset(tmp_path / "ds").tokenizer.decode(tokens(open_dataset(tmp_path / "ds").train)) == "second\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.txt", "ds"]
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    line = one_error_line(capsys, tmp_path / "a.txt", "--out", tmp_path / "mine", "--overwrite")
    assert "is not a prepared dataset" in line and (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


def test_a_failed_overwrite_keeps_the_old_dataset(tmp_path, capsys):
    (tmp_path / "a.txt").write_text("first\n")
    (tmp_path / "bad.txt").write_bytes(b"\x00")
    assert run(capsys, tmp_path / "a.txt", "--out", tmp_path / "ds")[0] == 0
    one_error_line(capsys, tmp_path / "bad.txt", "--out", tmp_path / "ds", "--overwrite")
    assert open_dataset(tmp_path / "ds").tokenizer.decode(tokens(open_dataset(tmp_path / "ds").train)) == "first\n"


def test_a_failed_rename_puts_the_old_dataset_back(tmp_path, capsys, monkeypatch):
    from microgpt.data.prepare import out_dir

    (tmp_path / "a.txt").write_text("first\n")
    (tmp_path / "b.txt").write_text("second\n")
    assert run(capsys, tmp_path / "a.txt", "--out", tmp_path / "ds")[0] == 0
    real = os.rename

    def rename(source, target):
        if ".partial-" in str(source) and not str(source).endswith("-replaced") and Path(target) == tmp_path / "ds":
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        real(source, target)

    monkeypatch.setattr(out_dir.os, "rename", rename)
    assert "cannot write the dataset" in one_error_line(capsys, tmp_path / "b.txt", "--out", tmp_path / "ds",
                                                        "--overwrite")
    assert open_dataset(tmp_path / "ds").tokenizer.decode(tokens(open_dataset(tmp_path / "ds").train)) == "first\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.txt", "ds"]


def test_an_out_inside_an_input_directory_is_not_read(tmp_path, capsys):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("text\n")
    for _ in range(2):
        assert run(capsys, corpus, "--out", corpus / "ds", "--glob", "*", "--overwrite")[0] == 0
    dataset = open_dataset(corpus / "ds")
    assert dataset.tokenizer.decode(tokens(dataset.train)) == "text\n"
    assert [entry["path"] for entry in dataset.manifest["inputs"]] == [str(corpus / "a.txt")]


def test_progress_goes_to_stderr_in_mb_per_second(tmp_path, capsys):
    source = write_jsonl(tmp_path / "d.jsonl", documents())
    assert main(["prepare", str(source), "--out", str(tmp_path / "ds")]) == 0
    captured = capsys.readouterr()
    assert re.search(r"scanning: [\d.]+/[\d.]+ MB of text  [\d.]+ MB/s  ETA \d+s", captured.err)
    assert re.search(r"tokenizing: [\d.]+/[\d.]+ MB of text  [\d.]+ MB/s  ETA \d+s", captured.err)
    assert "MB/s" not in captured.out.splitlines()[0] and re.search(r"in [\d.]+ s: [\d.]+ MB/s", captured.out)
    assert main(["prepare", str(source), "--out", str(tmp_path / "quiet"), "--quiet"]) == 0
    assert capsys.readouterr().err == ""


def test_a_second_prepare_into_the_same_out_is_refused_while_one_runs(tmp_path, capsys):
    (tmp_path / "a.txt").write_text("text\n")
    holder = Output(tmp_path / "ds").claim()
    try:
        line = one_error_line(capsys, tmp_path / "a.txt", "--out", tmp_path / "ds")
        assert f"is being prepared by process {os.getpid()}" in line
    finally:
        holder.release()
    assert run(capsys, tmp_path / "a.txt", "--out", tmp_path / "ds")[0] == 0


def test_a_partial_directory_left_by_a_killed_prepare_is_removed(tmp_path, capsys):
    (tmp_path / "a.txt").write_text("text\n")
    stale = tmp_path / "ds.partial-deadbeef"
    stale.mkdir()
    (stale / "train-00000.bin").write_bytes(b"half")
    assert run(capsys, tmp_path / "a.txt", "--out", tmp_path / "ds")[0] == 0
    assert not stale.exists()


def test_a_full_disk_leaves_nothing(tmp_path, capsys, monkeypatch):
    source = write_jsonl(tmp_path / "d.jsonl", documents())
    writes = []

    def full(self, data):
        writes.append(len(data))
        if len(writes) > 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        self._file.write(data)

    monkeypatch.setattr(ShardWriter, "_write", full)
    line = one_error_line(capsys, source, "--out", tmp_path / "ds", "--shard-tokens", "100")
    assert "no space left on the device" in line
    nothing_left(tmp_path / "ds")


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_while_writing_leaves_nothing(tmp_path, signum):
    rng = np.random.default_rng(0)
    with open(tmp_path / "big.txt", "w", encoding="utf-8") as f:
        # about 24 MB: bpe takes many seconds over it
        f.writelines(" ".join(rng.choice(WORDS, size=100_000)) + "\n" for _ in range(40))
    out = tmp_path / "ds"
    process = subprocess.Popen([sys.executable, "-m", "microgpt", "prepare", str(tmp_path / "big.txt"), "--out",
                                str(out), "--tokenizer", "bpe", "--tokenizer-sample", "200KB", "--workers", "2",
                                "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob("ds.partial-*/train-*.bin")) and time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        time.sleep(0.05)
    time.sleep(0.3)
    process.send_signal(signum)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 128 + signum, err
    assert "was not written" in err and "Traceback" not in err
    nothing_left(out)


# -- the shards as a reader sees them -------------------------------------------------------------------------


def test_a_damaged_shard_is_refused_naming_it(tmp_path, capsys):
    source = write_jsonl(tmp_path / "d.jsonl", documents())
    assert run(capsys, source, "--out", tmp_path / "ds", "--val-fraction", "0")[0] == 0
    shard = tmp_path / "ds" / "train-00000.bin"
    good = shard.read_bytes()
    flipped = bytearray(good)
    flipped[100] ^= 0x01
    shard.write_bytes(bytes(flipped))
    with pytest.raises(DataError, match=f"shard {re.escape(str(shard))} does not match its checksum"):
        open_dataset(tmp_path / "ds")
    shard.write_bytes(good[:-2])
    with pytest.raises(DataError, match=f"shard {re.escape(str(shard))} is .* cut short"):
        open_dataset(tmp_path / "ds")
    shard.write_bytes(good)
    open_dataset(tmp_path / "ds")


def test_the_docs_ten_lines_of_numpy_read_a_shard(tmp_path, capsys):
    """docs/data.md's reader, run as written, against a shard prepare wrote."""
    docs = documents()
    assert run(capsys, write_jsonl(tmp_path / "d.jsonl", docs), "--out", tmp_path / "ds", "--val-fraction", "0")[0] == 0
    text = (ROOT / "docs" / "data.md").read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", text, re.DOTALL).group(1)
    assert len(code.strip().splitlines()) <= 10
    namespace: dict = {}
    exec(compile(code, "docs/data.md", "exec"), namespace)  # noqa: S102 - the docs' own lines, as written
    read = namespace["read_shard"](tmp_path / "ds" / "train-00000.bin")
    np.testing.assert_array_equal(read, expected(open_dataset(tmp_path / "ds").tokenizer, docs))


def test_the_settings_check_their_values():
    with pytest.raises(ConfigError, match="--shard-tokens"):
        PrepareSettings(shard_tokens=0)
    with pytest.raises(ConfigError, match="--errors"):
        PrepareSettings(errors="ignore")
    assert BPETokenizer.default_vocab_size == 512


def test_a_hugging_face_tokenizer_json_prepares_and_trains(tmp_path, capsys):
    """--tokenizer PATH/tokenizer.json: the file's tokenizer, used as it is, its ids the shards' (and the
    dataset trains with it)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    import microgpt

    text = "the quick brown fox jumps over the lazy dog\n" * 300
    (tmp_path / "t.txt").write_text(text, encoding="utf-8")
    library = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    library.pre_tokenizer = pre_tokenizers.Whitespace()
    library.train_from_iterator([text], trainers.WordLevelTrainer(special_tokens=["[UNK]"]))
    library.save(str(tmp_path / "tokenizer.json"))
    assert run(capsys, tmp_path / "t.txt", "--out", tmp_path / "ds", "--tokenizer", tmp_path / "tokenizer.json",
               "--val-fraction", "0")[0] == 0
    dataset = open_dataset(tmp_path / "ds")
    assert dataset.tokenizer.kind == "hf"
    assert dataset.train[0:9].tolist() == dataset.tokenizer.encode(text)[:9].tolist()
    _, summary = microgpt.train(str(tmp_path / "ds"), steps=3, d_model=8, heads="1", n_layers=1, d_ff=8, seq_len=8,
                                save=False, gen=0, val_tokens=0, backend="numpy")
    assert summary.steps == 3
    assert "--vocab-size is for bpe" in one_error_line(capsys, tmp_path / "t.txt", "--out", tmp_path / "d2",
                                                        "--tokenizer", tmp_path / "tokenizer.json", "--vocab-size",
                                                        "300")
