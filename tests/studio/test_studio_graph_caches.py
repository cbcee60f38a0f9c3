"""The node editor's checks keep the last data file's Corpus (graph_run.corpus_of), and with it the tokenizer made
from its text, while two checks run at once on worker threads: each answer is its own file's, even when another
check stores its file between the store and the return (the interleaving is made here, at once, by a cache that
runs the other check as it is written to); and a kept text is read again under another --max-corpus."""

from __future__ import annotations

import pytest

from microgpt.core.errors import DataError
from microgpt.data import corpus as corpus_module
from microgpt.studio import graph_run
from microgpt.studio.workspace import Workspace


class InterleavingCache(dict):
    """A cache that runs `other()` (another thread's check) right after its first write, once."""

    def __init__(self, other):
        super().__init__()
        self.other = other

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        self.interleave()

    def update(self, *given, **named):
        super().update(*given, **named)
        self.interleave()

    def interleave(self):
        other, self.other = self.other, None
        if other is not None:
            other()


def test_the_corpus_is_the_files_own_while_another_file_is_stored(tmp_path):
    (tmp_path / "a.txt").write_text("alpha text\n", encoding="utf-8")
    (tmp_path / "b.txt").write_text("bravo text\n", encoding="utf-8")
    workspace = Workspace(tmp_path)
    workspace.corpus_cache = InterleavingCache(lambda: graph_run.corpus_of("b.txt", workspace, None))
    assert graph_run.corpus_of("a.txt", workspace, None).text == "alpha text\n"
    assert graph_run.corpus_of("b.txt", workspace, None).text == "bravo text\n"  # the last stored, kept
    assert graph_run.corpus_of("a.txt", workspace, None).text == "alpha text\n"


def test_a_kept_corpus_is_refused_under_a_smaller_cap(tmp_path):
    (tmp_path / "a.txt").write_text("x" * 5000, encoding="utf-8")
    workspace = Workspace(tmp_path)
    assert graph_run.corpus_of("a.txt", workspace, None).text == "x" * 5000
    with pytest.raises(DataError, match="over the 1,000-byte corpus cap"):
        graph_run.corpus_of("a.txt", workspace, 1000)


def test_a_kept_corpus_makes_its_char_tokenizer_once_from_its_own_text(tmp_path, monkeypatch):
    (tmp_path / "a.txt").write_text("abcabc", encoding="utf-8")
    workspace = Workspace(tmp_path)
    learnt = []
    learn = corpus_module.learn_tokenizer
    monkeypatch.setattr(corpus_module, "learn_tokenizer", lambda *given: learnt.append(given) or learn(*given))
    for _ in range(2):
        corpus = graph_run.corpus_of("a.txt", workspace, None)
        assert corpus.new_tokenizer("char", None).vocab == "abc"
    assert len(learnt) == 1
