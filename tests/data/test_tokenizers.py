"""The tokenizer package: the char kind as microgpt always read characters, byte-level BPE on any Unicode text,
the incremental decoders, the saved JSON, determinism, character counts, the registry and its errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer as LibraryTokenizer
from tokenizers import models, pre_tokenizers, trainers

from microgpt.core.errors import ConfigError, DataError
from microgpt.data.tokenizer import KINDS, from_json, train_tokenizer
from microgpt.data.tokenizer import bpe as bpe_module
from microgpt.data.tokenizer.bpe import MIN_VOCAB, PIECE_CHARS, BPETokenizer, byte_alphabet, pieces, untrained
from microgpt.data.tokenizer.char import CharTokenizer

# --- char ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["hello, world", "abc\naz\n", "Ünïcödé 😀 text\r\n", "x"])
def test_char_ids_are_positions_in_the_sorted_characters(text):
    tok = CharTokenizer.from_text(text)
    assert tok.vocab == "".join(sorted(set(text))) and tok.size == len(set(text))
    ids = tok.encode(text)
    assert ids.dtype == np.int32 and list(ids) == [tok.vocab.index(ch) for ch in text]
    assert tok.decode(ids) == text


def test_char_errors_name_the_character_and_where_it_is():
    tok = CharTokenizer.from_text("abc\n")
    with pytest.raises(DataError) as error:
        tok.encode("abc\naz", source="the prompt")
    assert str(error.value) == ("the prompt has the character 'z' (U+007A) at offset 5 (line 2), which is not in "
                                "the model's vocabulary")
    with pytest.raises(DataError, match="the vocabulary repeats a character"):
        CharTokenizer("aba")


def test_char_extends_after_its_own_characters_so_old_ids_keep_their_meaning():
    tok = CharTokenizer.from_text("hello")
    extended = tok.extended_for("yellow!")
    assert extended.vocab == "ehlo" + "!wy"
    np.testing.assert_array_equal(extended.encode("hello"), tok.encode("hello"))
    assert extended.decode(extended.encode("yellow!")) == "yellow!"


def test_char_json_describe_start_and_counts():
    tok = CharTokenizer.from_text("To be, or not to be\n")
    saved = json.loads(json.dumps(tok.to_json()))
    assert saved == {"kind": "char", "vocab": tok.vocab}
    again = CharTokenizer.from_json(saved)
    np.testing.assert_array_equal(again.encode("not to be"), tok.encode("not to be"))
    assert tok.describe() == f"char: {tok.size} characters"
    assert CharTokenizer("a").describe() == "char: 1 character"
    assert tok.start_text() == "\n"
    assert CharTokenizer.from_text("ba").start_text() == "a"
    assert tok.count_characters(tok.encode("or not")) == 6
    decoder = tok.decoder()
    assert "".join(decoder.add(i) for i in tok.encode("to be\n")) + decoder.flush() == "to be\n"


def test_char_json_without_a_vocabulary_string_is_refused():
    with pytest.raises(DataError, match="'vocab' string"):
        CharTokenizer.from_json({"kind": "char", "vocab": ["a", "b"]})


# --- bpe: a small training text and the texts to encode -----------------------------------------------------

TRAINING_TEXT = """\
The river ran low that summer, and the children walked along its bed
picking up stones, counting the herons, and calling to one another
across the dry channels. Their mother said the rain would come again;
their father said nothing, and mended the nets as if it would.

In the evenings the old men sat outside the inn, talking of other
summers: the year the bridge fell, the year of the two comets, the
year the miller's daughter sailed for the islands and never wrote.
"""

EDGE_CASES = [
    "",
    "a",
    "hello, world",
    "The river ran low that summer.",
    "emoji: 😀🎉👍🏽 and a family 👨‍👩‍👧",
    "漢字とかな、한국어, 中文",
    "combining: e\u0301 a\u0308 n\u0303 \u0915\u094d\u0937",
    "line\r\nbreaks\r\n\r\nand\ttabs\x0b\x0c\x1c\x1d\x1e\x1f\x7f\x85",
    "controls \x01\x02\x1b[31m red \x1b[0m",
    "   leading and trailing spaces   ",
    "\n\n\n",
    "\u00a0\u2028\u2029\u3000\u200b\ufeff",
    "\U0010ffff\U000e0001\ufffd\uffff",
    "mixed ascii ñ € 𝄞 end",
]


def library_encode(tokenizer: BPETokenizer, text: str) -> list[int]:
    """The library's own encoding of the whole text in one call: what ours must equal."""
    return tokenizer.library_tokenizer.encode(text).ids


@pytest.fixture(scope="module")
def bpe() -> BPETokenizer:
    return BPETokenizer.train(TRAINING_TEXT, 300)


def random_text(rng: np.random.Generator, length: int) -> str:
    """length code points, half from ASCII (words, spaces, newlines) and half from anywhere but the
    surrogates, so texts mix trained tokens with bytes never seen in training."""
    ascii_points = rng.choice(np.frombuffer(b"abcde xyz\n\n  .,'\r\t", dtype=np.uint8), size=length)
    wide_points = rng.integers(0, 0x110000 - 0x800, size=length)
    wide_points = np.where(wide_points >= 0xD800, wide_points + 0x800, wide_points)  # skip U+D800..U+DFFF
    points = np.where(rng.random(length) < 0.5, ascii_points, wide_points)  # (length,)
    return "".join(map(chr, points))


# --- bpe: the byte alphabet ---------------------------------------------------------------------------------


def test_byte_alphabet_is_the_library_s():
    alphabet = byte_alphabet()
    assert len(set(alphabet)) == 256
    assert set(alphabet) == set(pre_tokenizers.ByteLevel.alphabet())
    # byte by byte, for every byte valid UTF-8 can hold: the library's mapping of a character's bytes; the 13
    # bytes UTF-8 never uses (C0, C1, F5..FF) are then pinned by the two alphabets being the same set
    split = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    seen = set()
    for point in [*range(0x800), *range(0x800, 0x10000, 0x40), *range(0x10000, 0x110000, 0x1000)]:
        if 0xD800 <= point <= 0xDFFF:
            continue
        encoded = chr(point).encode("utf-8")
        ((mapped, _),) = split.pre_tokenize_str(chr(point))
        assert mapped == "".join(alphabet[b] for b in encoded), hex(point)
        seen.update(encoded)
    assert len(seen) == 256 - 13


# --- bpe: encoding and decoding -----------------------------------------------------------------------------


def test_bpe_trains_the_size_asked_and_learns_merges(bpe):
    assert bpe.size == 300
    assert bpe.kind == "bpe"
    assert bpe.describe() == "bpe: 300 tokens (byte-level)"
    assert sorted(bpe.token_bytes[:256]) == [bytes([b]) for b in range(256)]
    # its 44 merges shorten the text it learnt them from to about 0.55 tokens a byte; bytes alone would be 1
    assert len(bpe.encode(TRAINING_TEXT)) < 0.8 * len(TRAINING_TEXT.encode())


@pytest.mark.parametrize("text", EDGE_CASES)
def test_bpe_round_trips_any_text_as_the_library_encodes_it(bpe, text):
    ids = bpe.encode(text)
    assert ids.dtype == np.int32 and ids.shape == (len(library_encode(bpe, text)),)
    assert ids.tolist() == library_encode(bpe, text)
    assert bpe.decode(ids) == text
    assert bpe.library_tokenizer.decode(ids.tolist()) == text
    assert bpe.count_characters(ids) == len(text)


def test_bpe_round_trips_random_code_points(bpe):
    rng = np.random.default_rng(1234)
    for _ in range(200):
        text = random_text(rng, int(rng.integers(0, 60)))
        ids = bpe.encode(text)
        assert ids.tolist() == library_encode(bpe, text)
        assert bpe.decode(ids) == text
        assert bpe.count_characters(ids) == len(text)
        decoder = bpe.decoder()
        assert "".join(decoder.add(i) for i in ids) + decoder.flush() == text


def test_bpe_decodes_invalid_byte_sequences_as_the_library_does(bpe):
    """Arbitrary ids (as a badly trained model might sample): U+FFFD for each invalid sequence, as the
    library's decoder writes, and the incremental decoder agrees."""
    rng = np.random.default_rng(7)
    invalid = 0
    for _ in range(500):
        ids = rng.integers(0, bpe.size, size=int(rng.integers(0, 12)))
        text = bpe.decode(ids)
        invalid += "\ufffd" in text
        assert text == bpe.library_tokenizer.decode(ids.tolist())
        decoder = bpe.decoder()
        assert "".join(decoder.add(i) for i in ids) + decoder.flush() == text
    assert invalid > 100  # most random byte strings are not UTF-8: the comparison covered the lossy path


def test_a_lone_surrogate_is_an_error_naming_it_and_where_it_is(bpe):
    expected = r"the prompt has the character '\\udcff' \(U\+DCFF\) at offset 4 \(line 2\)"
    with pytest.raises(DataError, match=expected):
        bpe.encode("ab\nc\udcffd", source="the prompt")


def pre_tokens(text: str) -> list[str]:
    """The library's pre-tokens of text (as byte-alphabet strings): what BPE merges within."""
    return [word for word, _ in untrained().pre_tokenizer.pre_tokenize_str(text)]


def test_pieces_cut_where_the_pre_tokenizer_splits_anyway(bpe):
    rng = np.random.default_rng(99)
    cut_somewhere = 0
    for _ in range(300):
        text = random_text(rng, int(rng.integers(0, 80)))
        cut = pieces(text, piece_chars=3)
        assert "".join(cut) == text
        assert all(cut)
        cut_somewhere += len(cut) > 1
        assert [word for piece in cut for word in pre_tokens(piece)] == pre_tokens(text)
        assert [i for piece in cut for i in library_encode(bpe, piece)] == library_encode(bpe, text)
    assert cut_somewhere > 100  # most texts were really cut


def long_text() -> str:
    """About 3 * PIECE_CHARS characters of the training text's lines, reshuffled with a seeded RNG."""
    lines = TRAINING_TEXT.splitlines(keepends=True)
    rng = np.random.default_rng(5)
    return "".join(rng.choice(lines, size=3 * PIECE_CHARS // 60))


def test_a_long_text_encodes_and_trains_as_a_whole():
    text = long_text()
    assert len(pieces(text)) >= 3
    tok = BPETokenizer.train(text, 400)
    whole = untrained()
    whole.train_from_iterator(
        [text], trainers.BpeTrainer(vocab_size=400, initial_alphabet=byte_alphabet(), show_progress=False)
    )
    assert tok.library_tokenizer.to_str() == whole.to_str()
    assert tok.encode(text).tolist() == whole.encode(text).ids


# --- bpe: the incremental decoder ---------------------------------------------------------------------------


def test_a_token_ending_inside_a_character_waits_for_the_rest():
    # trained on "aé" only, the first merge joins "a" to the first byte of "é" (C3 A9): the tie between
    # equally frequent pairs goes to the smallest ids, and "a" sorts first; "ê" (C3 AA) then needs that token
    tok = BPETokenizer.train("aé" * 50, 258)
    ids = tok.encode("aêa")
    assert [tok.token_bytes[i] for i in ids] == [b"a\xc3", b"\xaa", b"a"]
    decoder = tok.decoder()
    assert [decoder.add(i) for i in ids] == ["a", "ê", "a"]
    assert decoder.flush() == ""


@pytest.mark.parametrize("text", EDGE_CASES)
def test_the_decoder_fed_one_token_at_a_time_gives_decode(bpe, text):
    ids = bpe.encode(text)
    decoder = bpe.decoder()
    completed = [decoder.add(i) for i in ids]
    assert "".join(completed) + decoder.flush() == bpe.decode(ids) == text
    assert TRAINING_TEXT.isascii()  # so no merge holds a multi-byte character: each comes a byte at a time
    if not text.isascii():
        assert "" in completed


def test_flush_gives_u_fffd_for_an_incomplete_character(bpe):
    ids = bpe.encode("ok 😀")[:-1]  # drop the emoji's last byte
    decoder = bpe.decoder()
    assert "".join(decoder.add(i) for i in ids) == "ok "
    assert decoder.flush() == "\ufffd"
    assert decoder.flush() == ""  # nothing is held back any longer


# --- bpe: JSON, determinism, counts, fine-tuning ------------------------------------------------------------


def test_bpe_json_round_trip_encodes_the_same(bpe):
    saved = json.loads(json.dumps(bpe.to_json()))
    assert saved["kind"] == "bpe"
    again = BPETokenizer.from_json(saved)
    assert again.token_bytes == bpe.token_bytes
    assert again.to_json() == bpe.to_json()
    for text in [*EDGE_CASES, TRAINING_TEXT]:
        np.testing.assert_array_equal(again.encode(text), bpe.encode(text))


def test_training_is_deterministic_across_calls_processes_and_thread_counts(bpe):
    assert BPETokenizer.train(TRAINING_TEXT, 300).to_json() == bpe.to_json()
    program = ("import sys; from microgpt.data.tokenizer.bpe import BPETokenizer; "
               "sys.stdout.write(BPETokenizer.train(sys.stdin.read(), 300).to_json()['data'])")
    source_root = str(Path(bpe_module.__file__).resolve().parents[2])  # this checkout's microgpt, not another
    env = {**os.environ, "RAYON_NUM_THREADS": "1", "PYTHONHASHSEED": "12345", "PYTHONPATH": source_root}
    other = subprocess.run([sys.executable, "-c", program], input=TRAINING_TEXT, capture_output=True, env=env,
                           check=True, encoding="utf-8")
    assert other.stdout == bpe.to_json()["data"]


def test_count_characters_counts_a_split_character_once_where_its_first_byte_is(bpe):
    text = "naïve 😀 text, 漢字"
    ids = bpe.encode(text)
    assert bpe.count_characters(ids) == len(text)
    assert bpe.count_characters([]) == 0
    for cut in range(len(ids) + 1):
        assert bpe.count_characters(ids[:cut]) + bpe.count_characters(ids[cut:]) == len(text)
    emoji = bpe.encode("😀")  # unseen: four single-byte tokens, a lead byte and three continuation bytes
    assert [bpe.count_characters(emoji[i : i + 1]) for i in range(len(emoji))] == [1, 0, 0, 0]


def test_bpe_extends_to_itself_and_starts_from_a_newline(bpe):
    assert bpe.extended_for("any text at all: 😀") is bpe
    assert bpe.start_text() == "\n"


# --- bpe: errors --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("vocab_size", [None, 0, 256, True, 300.0, "512"])
def test_a_bpe_vocab_size_below_the_bytes_and_one_merge_is_refused(vocab_size):
    with pytest.raises(ConfigError, match=f"--vocab-size must be a whole number of at least {MIN_VOCAB}"):
        BPETokenizer.train(TRAINING_TEXT, vocab_size)


def test_the_smallest_vocab_size_trains():
    assert BPETokenizer.train(TRAINING_TEXT, MIN_VOCAB).size == MIN_VOCAB


def bpe_json_with(bpe: BPETokenizer, change) -> dict:
    """bpe's saved JSON after change(the library's JSON as a dict)."""
    library_json = json.loads(bpe.to_json()["data"])
    change(library_json)
    return {"kind": "bpe", "data": json.dumps(library_json)}


def rename_a_byte(library_json: dict) -> None:
    vocab = library_json["model"]["vocab"]
    vocab["!!"] = vocab.pop("!")


def add_a_token_of_no_byte(library_json: dict) -> None:
    vocab = library_json["model"]["vocab"]
    vocab["€"] = len(vocab)


def test_bpe_json_that_is_not_a_byte_level_bpe_is_refused(bpe):
    with pytest.raises(DataError, match="no 'data' string"):
        BPETokenizer.from_json({"kind": "bpe", "data": {"model": {}}})
    with pytest.raises(DataError, match="not a tokenizer the tokenizers library can read"):
        BPETokenizer.from_json({"kind": "bpe", "data": "{not json"})
    word_level = LibraryTokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
    with pytest.raises(DataError, match="not a byte-level BPE"):
        BPETokenizer.from_json({"kind": "bpe", "data": word_level.to_str()})
    with pytest.raises(DataError, match="not a byte-level BPE"):
        BPETokenizer.from_json(bpe_json_with(bpe, lambda j: j["pre_tokenizer"].update(add_prefix_space=True)))
    with pytest.raises(DataError, match="not a byte-level BPE"):
        BPETokenizer.from_json(bpe_json_with(bpe, lambda j: j["model"].update(dropout=0.1)))
    with pytest.raises(DataError, match="skips or repeats ids"):
        BPETokenizer.from_json(bpe_json_with(bpe, lambda j: j["model"]["vocab"].pop("!")))
    with pytest.raises(DataError, match="lacks some of the 256 single bytes"):
        BPETokenizer.from_json(bpe_json_with(bpe, rename_a_byte))
    with pytest.raises(DataError, match="'€', which stands for no byte"):
        BPETokenizer.from_json(bpe_json_with(bpe, add_a_token_of_no_byte))


# --- the registry -------------------------------------------------------------------------------------------


def test_the_registry_trains_each_kind_and_names_the_kinds():
    assert set(KINDS) == {"char", "bpe"}
    assert isinstance(train_tokenizer("char", "abc", None), CharTokenizer)
    assert isinstance(train_tokenizer("bpe", TRAINING_TEXT, 280), BPETokenizer)
    with pytest.raises(ConfigError, match="unknown tokenizer kind 'word'; the kinds are char, bpe"):
        train_tokenizer("word", "abc", None)
    with pytest.raises(ConfigError, match="--vocab-size is for bpe"):
        train_tokenizer("char", "abc", 300)
    default = train_tokenizer("bpe", TRAINING_TEXT, None)  # the kind's default size, 512
    assert default.to_json() == train_tokenizer("bpe", TRAINING_TEXT, BPETokenizer.default_vocab_size).to_json()
    with pytest.raises(ConfigError, match="--vocab-size must be a whole number of at least 257"):
        train_tokenizer("bpe", TRAINING_TEXT, 256)


def test_from_json_reads_back_each_kind(bpe):
    for tok in (CharTokenizer.from_text("hello\n"), bpe):
        again = from_json(json.loads(json.dumps(tok.to_json())))
        assert type(again) is type(tok)
        assert again.to_json() == tok.to_json()


@pytest.mark.parametrize("saved", [{"kind": "word"}, {"vocab": "abc"}, ["char"], None])
def test_json_of_no_known_kind_is_refused(saved):
    with pytest.raises(DataError, match="the kinds are char, bpe"):
        from_json(saved)
