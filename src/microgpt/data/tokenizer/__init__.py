"""Tokenizers: what every kind has (`Tokenizer`, `IncrementalDecoder`), the registry of kinds, and the two
ways to get one: `train_tokenizer` on a training text, `from_json` from a checkpoint's saved form.

The kinds: "char" (char.py: one id per character of the training text) and "bpe" (bpe.py: byte-level BPE
learnt from it, which encodes any text) are trained (`KINDS`); "hf" (hf.py: any Hugging Face tokenizer.json)
is read from its file (`load_tokenizer_file`), a `--tokenizer` value that is a path (`is_tokenizer_file`).
Part of the ground: of microgpt it imports only core/errors.py.
"""

from __future__ import annotations

import os
from typing import Protocol

import numpy as np

from microgpt.core.errors import ConfigError, DataError
from microgpt.data.tokenizer.bpe import BPETokenizer
from microgpt.data.tokenizer.char import CharTokenizer
from microgpt.data.tokenizer.hf import HFTokenizer, load_tokenizer_file


class IncrementalDecoder(Protocol):
    """Text as sampled ids arrive, one at a time; the pieces joined equal `Tokenizer.decode` of all the ids."""

    def add(self, token_id: int) -> str:
        """The text completed by this token: "" while a UTF-8 character is still incomplete. (An hf decoder
        reads the ids as continuing a text, so a first word-start token keeps its space: hf.py.)"""

    def flush(self) -> str:
        """What is left at the end: U+FFFD for an incomplete character, else ""."""


class Tokenizer(Protocol):
    kind: str  # the registry's name for the class: "char", "bpe", "hf"
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


KINDS: dict[str, type[Tokenizer]] = {"char": CharTokenizer, "bpe": BPETokenizer}  # trained on a text
SAVED_KINDS: dict[str, type[Tokenizer]] = {**KINDS, "hf": HFTokenizer}  # what a checkpoint may hold


def is_tokenizer_file(value) -> bool:
    """Whether a --tokenizer value names a file rather than a kind: it ends in .json, has a slash, or is no
    kind's name and is there (`--tokenizer gpt2`, a folder holding tokenizer.json)."""
    return isinstance(value, str) and bool(value) and (value.endswith(".json") or "/" in value or "\\" in value
                                                       or (value not in SAVED_KINDS and os.path.exists(value)))


def from_json(data: dict) -> Tokenizer:
    """The tokenizer that `to_json` saved as data; a DataError naming the problem when it is not one."""
    kind = data.get("kind") if isinstance(data, dict) else None
    if not isinstance(kind, str) or kind not in SAVED_KINDS:
        raise DataError(f"the saved tokenizer has kind {kind!r}; the kinds are {', '.join(SAVED_KINDS)}")
    return SAVED_KINDS[kind].from_json(data)


def tokenizer_kind(kind: str) -> type[Tokenizer]:
    """The tokenizer class of a --tokenizer value (a kind's name, or a tokenizer.json's path: the hf kind); a
    ConfigError naming the kinds for another."""
    if is_tokenizer_file(kind):
        return HFTokenizer
    if kind not in SAVED_KINDS:
        raise ConfigError(f"unknown tokenizer kind {kind!r}; the kinds are {', '.join(KINDS)}, or the path of a "
                          "Hugging Face tokenizer.json")
    return SAVED_KINDS[kind]


def train_tokenizer(kind: str, text: str, vocab_size: int | None) -> Tokenizer:
    """A tokenizer of this kind for the training text, of vocab_size tokens for a kind that takes one (its
    default_vocab_size when None); a ConfigError for vocab_size with a kind that takes none. A tokenizer.json's
    path gives the tokenizer read from it (trained already)."""
    if is_tokenizer_file(kind):
        if vocab_size is not None:
            raise ConfigError(f"--vocab-size is for bpe; the tokenizer read from {kind} has its own vocabulary")
        return load_tokenizer_file(kind)
    chosen = tokenizer_kind(kind)
    if vocab_size is None:
        vocab_size = chosen.default_vocab_size
    return chosen.train(text, vocab_size)


def matches_setting(value: str, tokenizer: Tokenizer) -> bool:
    """Whether a --tokenizer value says the tokenizer a checkpoint has: its kind, or a tokenizer.json that reads
    as the same tokenizer."""
    if is_tokenizer_file(value):
        return tokenizer.kind == HFTokenizer.kind and load_tokenizer_file(value).to_json() == tokenizer.to_json()
    return value == tokenizer.kind


def unknown_note(tokenizer: Tokenizer, *token_arrays) -> str | None:
    """A note where some of a text's tokens are the tokenizer's unknown token ([UNK]: characters it has no
    token for, which an hf tokenizer allows), with how many; None where none are (or the kind has none)."""
    unknown = getattr(tokenizer, "unknown_id", None)
    arrays = [np.asarray(tokens) for tokens in token_arrays if tokens is not None]
    count = sum(int(np.count_nonzero(tokens == unknown)) for tokens in arrays) if unknown is not None else 0
    if not count:
        return None
    total = sum(len(tokens) for tokens in arrays)
    name = tokenizer.decode([unknown])
    return (f"{count:,} of the text's {total:,} tokens are the tokenizer's unknown token {name!r}, for characters it "
            "has no token for: the model learns them as one token, and bits per character counts each as one")
