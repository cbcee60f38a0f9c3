"""Nothing deleted that is not ours (issue 52): `prepare --overwrite` replaces only a prepared dataset or an empty
directory; prepare removes only its own partial directories, by exact name.
"""

from __future__ import annotations

import json
from pathlib import Path

from microgpt.cli import main


def listing(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


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
