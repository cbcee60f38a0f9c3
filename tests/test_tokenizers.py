"""The tokenizer package: the char kind against data.py's tokenizer, and what it adds (extension for
fine-tuning, JSON, one-line description, the start of a sampling prompt, character counts, its decoder)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from microgpt import data
from microgpt.data import DataError
from microgpt.tokenizer.char import CharTokenizer

# --- char ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["hello, world", "abc\naz\n", "Ünïcödé 😀 text\r\n", "x"])
def test_char_encodes_as_data_py_does(text):
    new, old = CharTokenizer.from_text(text), data.CharTokenizer.from_text(text)
    assert new.vocab == old.vocab
    assert new.size == old.size
    np.testing.assert_array_equal(new.encode(text), old.encode(text))
    assert new.encode(text).dtype == np.int32
    assert new.decode(new.encode(text)) == old.decode(old.encode(text)) == text


def test_char_errors_are_data_py_s():
    new, old = CharTokenizer.from_text("abc\n"), data.CharTokenizer.from_text("abc\n")
    with pytest.raises(DataError) as new_error:
        new.encode("abc\naz", source="the prompt")
    with pytest.raises(DataError) as old_error:
        old.encode("abc\naz", source="the prompt")
    assert str(new_error.value) == str(old_error.value)
    assert "'z' (U+007A) at offset 5 (line 2)" in str(new_error.value)
    with pytest.raises(DataError) as new_error:
        CharTokenizer("aba")
    with pytest.raises(DataError) as old_error:
        data.CharTokenizer("aba")
    assert str(new_error.value) == str(old_error.value)


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
