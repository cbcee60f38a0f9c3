"""The corpus reader, the character tokenizer, the validation split and the two batchers."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np
import pytest

from microgpt.core.errors import DataError
from microgpt.data.batches import RandomBatches, SequentialBatches
from microgpt.data.corpus import default_corpus, read_corpus, split_validation
from microgpt.data.tokenizer import CharTokenizer

CAP = 1024**2  # a corpus cap far above these tests' files


def test_tokenizer_vocab_is_sorted_unique_characters_and_round_trips():
    tok = CharTokenizer.from_text("hello, world")
    assert tok.vocab == " ,dehlorw"
    ids = tok.encode("world hello")
    assert ids.dtype == np.int32
    assert tok.decode(ids) == "world hello"


def test_unknown_character_names_it_and_where_it_is():
    tok = CharTokenizer.from_text("abc\n")
    with pytest.raises(DataError, match=r"'z' \(U\+007A\) at offset 5 \(line 2\)"):
        tok.encode("abc\naz")


def test_default_corpus_comes_with_python_and_is_text():
    text, description = default_corpus()
    assert len(text) > 100_000
    assert "pydoc_data" in description


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "is empty"),
        (b"abc\x00def", "looks binary"),
        (b"caf\xe9 au lait", "not UTF-8"),
    ],
)
def test_unusable_files_are_clear_errors(tmp_path, content, message):
    path = tmp_path / "corpus.txt"
    path.write_bytes(content)
    with pytest.raises(DataError, match=message):
        read_corpus(path, CAP)


def test_missing_file_and_directory_are_clear_errors(tmp_path):
    with pytest.raises(DataError, match="no such file"):
        read_corpus(tmp_path / "nope.txt", CAP)
    with pytest.raises(DataError, match="is a directory"):
        read_corpus(tmp_path, CAP)


def test_a_fifo_swapped_in_after_the_name_was_looked_at_is_refused_not_waited_on(tmp_path, monkeypatch):
    """The path's stat said a regular file, then a FIFO took its place: the reader checked the stat and opened
    the FIFO, and waited for a writer forever. The descriptor opened is what is checked now."""
    regular, fifo = tmp_path / "corpus.txt", tmp_path / "swapped.txt"
    regular.write_text("hello")
    os.mkfifo(fifo)
    stat_of = Path.stat
    monkeypatch.setattr(Path, "stat", lambda path, **kw: stat_of(regular if path == fifo else path, **kw))
    said: list = []

    def read() -> None:
        try:
            read_corpus(fifo, CAP)
        except DataError as exc:
            said.append(str(exc))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(60)  # only a limit for a hang
    if reader.is_alive():  # it waits in open() for a writer: be one, so the thread ends
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(60)
        raise AssertionError("read_corpus waited on a FIFO for a writer")
    assert said and "it is a pipe, not a regular file" in said[0], said


def test_validation_split_holds_out_the_last_tokens():
    tokens = np.arange(100, dtype=np.int32)
    train, val = split_validation(tokens, 20, seq_len=8)
    assert np.array_equal(val, tokens[80:]) and np.array_equal(train, tokens[:80])
    assert split_validation(tokens, 0, seq_len=8)[1] is None
    with pytest.raises(DataError, match="shorter than one window"):
        split_validation(tokens, 5, seq_len=8)
    with pytest.raises(DataError, match="fewer than seq_len"):
        split_validation(tokens, 95, seq_len=8)


def test_sequential_walk_sees_every_token_once_per_epoch_then_wraps():
    tokens = np.arange(41, dtype=np.int32)  # 5 windows of 8 (+1 target) fit: starts 0, 8, 16, 24, 32
    walk = SequentialBatches(tokens, seq_len=8, batch_size=2)
    first = walk.next()
    assert first.shape == (2, 9)
    assert np.array_equal(first[0], tokens[0:9]) and np.array_equal(first[1], tokens[8:17])
    starts = [int(first[0, 0]), int(first[1, 0])]
    while walk.epoch == 0:
        batch = walk.next()
        starts += [int(row[0]) for row in batch]
    # The epoch-0 windows are 0, 8, ..., 32; then the walk wraps to 0 with epoch 1.
    assert starts[:5] == [0, 8, 16, 24, 32]
    assert starts[5] == 0 and walk.epoch == 1
    inputs_seen = np.concatenate([tokens[s : s + 8] for s in starts[:5]])
    assert np.array_equal(inputs_seen, tokens[:40])


def test_sequential_walk_stride_and_state_restore():
    tokens = np.arange(200, dtype=np.int32)
    walk = SequentialBatches(tokens, seq_len=10, batch_size=3, stride=4)
    assert [int(r[0]) for r in walk.next()] == [0, 4, 8]
    state = walk.state()
    expected = walk.next()
    again = SequentialBatches(tokens, seq_len=10, batch_size=3, stride=4)
    again.restore(state)
    assert np.array_equal(again.next(), expected)


def test_random_batches_are_seeded_and_resume_from_saved_state():
    tokens = np.arange(500, dtype=np.int32)
    a, b = RandomBatches(tokens, 16, 4, seed=7), RandomBatches(tokens, 16, 4, seed=7)
    assert np.array_equal(a.next(), b.next())
    state = a.state()
    expected = [a.next() for _ in range(3)]
    c = RandomBatches(tokens, 16, 4, seed=999)
    c.restore(state)
    assert all(np.array_equal(c.next(), e) for e in expected)
    window = expected[0][0]
    assert np.array_equal(window, np.arange(window[0], window[0] + 17))  # contiguous windows of seq_len + 1


def test_batchers_refuse_text_shorter_than_one_window():
    with pytest.raises(DataError, match="fewer than seq_len"):
        SequentialBatches(np.arange(8, dtype=np.int32), seq_len=8, batch_size=1)
