"""The character tokenizer: one id per character, the vocabulary being a string of distinct characters.

`CharTokenizer.from_text` takes a text's sorted unique characters; an id is a character's index in `vocab`.
The ids and messages are those microgpt's characters always had (checkpoints of format 1 read with it),
with what every tokenizer has (see microgpt/tokenizer/__init__.py).
"""

from __future__ import annotations

import numpy as np

from microgpt.core.errors import ConfigError, DataError


class CharTokenizer:
    kind = "char"
    default_vocab_size = None  # the vocabulary is the text's characters: --vocab-size does not apply

    def __init__(self, vocab: str):
        if len(set(vocab)) != len(vocab):
            raise DataError("the vocabulary repeats a character")
        self.vocab = vocab
        self._ids = {ch: i for i, ch in enumerate(vocab)}

    @classmethod
    def train(cls, text: str, vocab_size: None = None) -> CharTokenizer:
        """The tokenizer of a training text (`train_tokenizer`'s face); a vocabulary size does not apply."""
        if vocab_size is not None:
            raise ConfigError("--vocab-size is for bpe; a char tokenizer's vocabulary is the text's characters")
        return cls.from_text(text)

    @classmethod
    def from_text(cls, text: str) -> CharTokenizer:
        return cls("".join(sorted(set(text))))

    @property
    def size(self) -> int:
        return len(self.vocab)

    def encode(self, text: str, source: str = "the text") -> np.ndarray:
        """int32 ids (len(text),); a character outside the vocabulary is an error naming it and where it is."""
        try:
            return np.fromiter((self._ids[ch] for ch in text), dtype=np.int32, count=len(text))
        except KeyError as exc:
            ch = exc.args[0]
            index = text.index(ch)
            line = text.count("\n", 0, index) + 1
            raise DataError(
                f"{source} has the character {ch!r} (U+{ord(ch):04X}) at offset {index} (line {line}), "
                "which is not in the model's vocabulary"
            ) from None

    def decode(self, ids) -> str:
        return "".join(self.vocab[int(i)] for i in ids)

    def decoder(self) -> CharDecoder:
        return CharDecoder(self.vocab)

    def to_json(self) -> dict:
        return {"kind": self.kind, "vocab": self.vocab}

    @classmethod
    def from_json(cls, data: dict) -> CharTokenizer:
        vocab = data.get("vocab")
        if not isinstance(vocab, str):
            raise DataError("the char tokenizer's JSON has no 'vocab' string (its characters in id order)")
        return cls(vocab)

    def describe(self) -> str:
        return f"char: {self.size} character{'s' if self.size != 1 else ''}"

    def extended_for(self, text: str) -> CharTokenizer:
        """This vocabulary, then the characters of text it lacks (sorted): the old ids keep their meaning."""
        return CharTokenizer(self.vocab + "".join(sorted(set(text) - set(self.vocab))))

    def count_characters(self, ids) -> int:
        return len(ids)

    def start_text(self) -> str:
        """What an empty prompt starts from: a newline when the vocabulary has one, else its first character."""
        return "\n" if "\n" in self.vocab else self.vocab[0]


class CharDecoder:
    """Text as ids arrive: each id is one whole character, so nothing is ever held back."""

    def __init__(self, vocab: str):
        self.vocab = vocab

    def add(self, token_id: int) -> str:
        return self.vocab[int(token_id)]

    def flush(self) -> str:
        return ""
