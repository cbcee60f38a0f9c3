"""Inputs that only `microgpt prepare` reads, given to train (issue 53 item 2): a .jsonl trained on its raw JSON
without a word, a .jsonl.gz "looks binary", a folder of text files was "a directory". Each is one line naming
the exact prepare command, from the CLI and from `microgpt.train`, and the command it names works."""

from __future__ import annotations

import gzip
import json
import lzma
import shlex

import pytest

import microgpt
from microgpt.cli import main
from microgpt.core.errors import DataError

TINY = ["--d-model", "16", "--heads", "2", "--n-layers", "1", "--d-ff", "32", "--seq-len", "16", "--steps", "2",
        "--backend", "numpy", "--threads", "1", "--gen", "0", "--quiet"]
DOCS = [f"document {i}: the quick brown fox jumps over the lazy dog\n" * 3 for i in range(40)]


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with open(tmp_path / "corpus.jsonl", "w") as f:
        f.writelines(json.dumps({"id": i, "text": doc}) + "\n" for i, doc in enumerate(DOCS))
    with gzip.open(tmp_path / "dump.jsonl.gz", "wt") as f:
        f.writelines(json.dumps({"text": doc}) + "\n" for doc in DOCS)
    with lzma.open(tmp_path / "notes.txt.xz", "wt") as f:
        f.write("".join(DOCS))
    (tmp_path / "books").mkdir()
    for i in range(3):
        (tmp_path / "books" / f"{i}.txt").write_text("".join(DOCS[i::3]))
    return tmp_path


def one_line(capsys, *args: str) -> str:
    assert main(["train", *args, *TINY]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


CASES = [  # (the input, what the line says it is, the prepare command it names)
    ("corpus.jsonl", "holds JSON Lines records, not plain text", "microgpt prepare corpus.jsonl --out corpus"),
    ("dump.jsonl.gz", "holds gzip-compressed JSON Lines records", "microgpt prepare dump.jsonl.gz --out dump"),
    ("notes.txt.xz", "is xz-compressed text, and train and eval read plain text",
     "microgpt prepare notes.txt.xz --out notes"),
    ("books", ("is a directory but not a prepared dataset (it has no manifest.json); train and eval take a text "
               "file or a dataset directory"), "microgpt prepare books --out books-dataset"),
]


@pytest.mark.parametrize(("given", "what", "command"), CASES)
def test_train_names_the_prepare_command_and_it_works(workdir, capsys, given, what, command):
    line = one_line(capsys, given, "--model", "ck")
    assert f"{given} {what}" in line and command in line, line
    assert not (workdir / "ck").exists()
    with pytest.raises(DataError, match="microgpt prepare") as raised:
        microgpt.train(given, steps=2, d_model=16, heads="8,8", n_layers=1, d_ff=32, seq_len=16, backend="numpy",
                       model="ck")
    assert command in str(raised.value)
    assert main(shlex.split(command)[1:] + ["--quiet"]) == 0
    out = shlex.split(command)[-1]
    assert main(["train", out, "--model", "ck", *TINY]) == 0, capsys.readouterr().err


def test_a_jsonl_named_as_text_trains_on_its_json_as_the_line_says(workdir, capsys):
    assert "give the file a .txt name to train on the JSON itself" in one_line(capsys, "corpus.jsonl")
    (workdir / "corpus.jsonl").rename(workdir / "raw.txt")
    assert main(["train", "raw.txt", "--model", "ck", *TINY]) == 0


def test_the_command_names_an_out_that_is_free(workdir, capsys):
    (workdir / "corpus").mkdir()
    assert "microgpt prepare corpus.jsonl --out corpus-dataset" in one_line(capsys, "corpus.jsonl")


def test_eval_points_to_prepare_too(workdir, capsys):
    (workdir / "text.txt").write_text("".join(DOCS))
    assert main(["train", "text.txt", "--model", "ck", *TINY]) == 0
    assert main(["eval", "ck", "dump.jsonl.gz"]) == 2
    assert "microgpt prepare dump.jsonl.gz --out dump" in capsys.readouterr().err
