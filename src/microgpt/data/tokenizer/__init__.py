"""Tokenizers: what every kind has (`Tokenizer`, `IncrementalDecoder`), the registry of kinds, and the two
ways to get one: `train_tokenizer` on a training text, `from_json` from a checkpoint's saved form.

The kinds: "char" (char.py: one id per character of the training text) and "bpe" (bpe.py: byte-level BPE
learnt from it, which encodes any text). Part of the ground: of microgpt it imports only core/errors.py.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from microgpt.core.errors import ConfigError, DataError
from microgpt.data.tokenizer.bpe import BPETokenizer
from microgpt.data.tokenizer.char import CharTokenizer


class IncrementalDecoder(Protocol):
    """Text as sampled ids arrive, one at a time; the pieces joined equal `Tokenizer.decode` of all the ids."""

    def add(self, token_id: int) -> str:
        """The text completed by this token: "" while a UTF-8 character is still incomplete."""

    def flush(self) -> str:
        """What is left at the end: U+FFFD for an incomplete character, else ""."""


class Tokenizer(Protocol):
    kind: str  # the registry's name for the class: "char", "bpe"
    default_vocab_size: int | None  # the size `train` takes without --vocab-size; None: the kind takes none

    @classmethod
    def train(cls, text: str, vocab_size: int | None) -> Tokenizer:
        """The tokenizer learnt from a training text."""

    @property
    def size(self) -> int:
        """How many ids there are: the model's vocabulary size."""

    def encode(self, text: str, source: str = "the text") -> np.ndarray:
        """int32 ids (n,); a DataError naming source and the place for text that cannot be encoded."""

    def decode(self, ids) -> str: ...

    def decoder(self) -> IncrementalDecoder: ...

    def to_json(self) -> dict:
        """A JSON-serialisable dict with "kind", which `from_json` reads back."""

    @classmethod
    def from_json(cls, data: dict) -> Tokenizer: ...

    def describe(self) -> str:
        """One line: "char: 65 characters", "bpe: 512 tokens (byte-level)"."""

    def extended_for(self, text: str) -> Tokenizer:
        """The tokenizer to fine-tune on text with: one that encodes it, whose old ids keep their meaning."""

    def count_characters(self, ids) -> int:
        """How many characters of text the ids stand for (bits per character divide by it)."""

    def start_text(self) -> str:
        """What an empty sampling prompt starts from."""


KINDS: dict[str, type[Tokenizer]] = {"char": CharTokenizer, "bpe": BPETokenizer}


def from_json(data: dict) -> Tokenizer:
    """The tokenizer that `to_json` saved as data; a DataError naming the problem when it is not one."""
    kind = data.get("kind") if isinstance(data, dict) else None
    if not isinstance(kind, str) or kind not in KINDS:
        raise DataError(f"the saved tokenizer has kind {kind!r}; the kinds are {', '.join(KINDS)}")
    return KINDS[kind].from_json(data)


def tokenizer_kind(kind: str) -> type[Tokenizer]:
    """The tokenizer class of a kind's name; a ConfigError naming the kinds for another."""
    if kind not in KINDS:
        raise ConfigError(f"unknown tokenizer kind {kind!r}; the kinds are {', '.join(KINDS)}")
    return KINDS[kind]


def train_tokenizer(kind: str, text: str, vocab_size: int | None) -> Tokenizer:
    """A tokenizer of this kind for the training text, of vocab_size tokens for a kind that takes one (its
    default_vocab_size when None); a ConfigError for vocab_size with a kind that takes none."""
    chosen = tokenizer_kind(kind)
    if vocab_size is None:
        vocab_size = chosen.default_vocab_size
    return chosen.train(text, vocab_size)
