"""What a run trains on (`Corpus`): a text file (or the bundled docs) read whole, or a prepared dataset
(data/dataset.py) trained from its shards, read by position; and how each gives a run its tokenizer and its
training and held-out tokens.

A text: a new run learns its tokenizer from it, a fine-tune extends the source's by its new characters, and
the last tokens are held out (a tenth, up to DEFAULT_HELD_OUT_MAX, or --val-tokens). A dataset: the tokenizer
is the one prepare made (a checkpoint resumed or fine-tuned on it must have the same), and validation reads
the first tokens of its held-out split (as many as --val-tokens, else as many as a text's default would
hold out), so that neither memory nor a validation pass grows with the dataset.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from microgpt.core.errors import ConfigError, DataError
from microgpt.data.corpus import (
    DEFAULT_HELD_OUT_MAX,
    default_corpus,
    held_out_count,
    read_corpus,
    split_validation,
)
from microgpt.data.dataset import Dataset, is_dataset, open_dataset
from microgpt.data.tokenizer import Tokenizer, tokenizer_kind, train_tokenizer
from microgpt.settings.training import TrainConfig

DEFAULT_CORPUS_NAME = "python-docs"  # the default checkpoint name of a run on the bundled docs


def corpus_name(file: str | None) -> str:
    """The default checkpoint name for a corpus: its file's stem (a dataset directory's name), or the docs'."""
    return DEFAULT_CORPUS_NAME if file is None else Path(file).stem


def check_dataset_settings(settings, file: str | None) -> None:
    """A tokenizer setting given for a prepared dataset, whose tokens are made already, is refused."""
    if not is_dataset(file):
        return
    for key in ("tokenizer", "vocab_size"):
        if settings.given(key):
            raise ConfigError(f"{settings.describe(key)} does nothing here: {file} is a prepared dataset, tokenized "
                              "by microgpt prepare; drop it, or prepare the data again with that tokenizer")


@dataclass
class Corpus:
    text: str  # "" for a dataset
    description: str  # "FILE (N characters)", for messages and the checkpoint
    name: str  # the default checkpoint name
    file: str | None  # None: the bundled Python docs
    sha256: str  # of the text, or of a dataset's manifest
    dataset: Dataset | None = None
    validation: dict | None = None  # {"tokens", "characters"} of the held-out tokens, once `split` has chosen them

    @classmethod
    def load(cls, file: str | None, max_bytes: int) -> Corpus:
        if is_dataset(file):
            dataset = open_dataset(file)
            return cls("", dataset.description, corpus_name(file), file, dataset.identity, dataset)
        if file is None:
            text, description = default_corpus()
        else:
            text = read_corpus(file, max_bytes)
            description = f"{file} ({len(text):,} characters)"
        return cls(text, description, corpus_name(file), file, hashlib.sha256(text.encode("utf-8")).hexdigest())

    def run_info(self, train_config: TrainConfig, best_val_loss: float | None = None) -> dict:
        """What a run keeps in train_state.json besides the step and data position: its corpus (the file as an
        absolute path, so a resume finds it from any directory) and settings."""
        absolute = None if self.file is None else str(Path(self.file).resolve())
        return {"corpus": self.description, "corpus_file": absolute, "corpus_sha256": self.sha256,
                "best_val_loss": best_val_loss, "train_config": vars(train_config), "validation_text": self.validation}

    def new_tokenizer(self, kind: str, vocab_size: int | None) -> Tokenizer:
        """A new run's tokenizer: learnt from the text, or the dataset's."""
        return self.dataset.tokenizer if self.dataset else learn_tokenizer(kind, self.text, vocab_size)

    def check_tokenizer(self, tokenizer: Tokenizer, checkpoint: Path) -> None:
        """A checkpoint's tokenizer must be a dataset's own to train on its ids."""
        if self.dataset and self.dataset.tokenizer.to_json() != tokenizer.to_json():
            raise DataError(f"{self.file} was tokenized by {self.dataset.tokenizer.describe()}, and {checkpoint} "
                            f"reads {tokenizer.describe()}: the same ids mean other text; prepare the data with the "
                            "checkpoint's tokenizer, or train a new model on it")

    def fine_tune_tokenizer(self, tokenizer: Tokenizer, checkpoint: Path) -> Tokenizer:
        """The source's tokenizer extended by the text's new characters, or a dataset's, which must be it."""
        if self.dataset is None:
            return tokenizer.extended_for(self.text)
        self.check_tokenizer(tokenizer, checkpoint)
        return tokenizer

    def split(self, tokenizer: Tokenizer, config: TrainConfig, seq_len: int):
        """(training tokens, held-out tokens or None, the config with the held-out count it used); `validation`
        then says how many characters the held-out tokens stand for (what runs and plot turn a validation loss
        into bits per character with, training/run_list.py)."""
        if self.dataset is None:
            tokens = tokenizer.encode(self.text, source=self.description)
            config = with_held_out(config, len(tokens), seq_len)
            train, val = split_validation(tokens, config.val_tokens, seq_len)
            self.validation = validation_text(tokenizer, val)
            return train, val, config
        held = self.dataset.val
        count = 0 if held is None else min(len(held), DEFAULT_HELD_OUT_MAX if config.val_tokens is None
                                           else config.val_tokens)
        if config.val_tokens and (held is None or config.val_tokens > len(held)):
            raise DataError(f"--val-tokens {config.val_tokens} is more than {self.file} holds out "
                            f"({0 if held is None else len(held):,} tokens); give at most that, or prepare it with a "
                            "larger --val-fraction")
        if 0 < count < seq_len + 1:
            raise DataError(f"{self.file} holds out {count} tokens, fewer than one window (seq_len + 1 = "
                            f"{seq_len + 1}); prepare it with more held out, or give --val-tokens 0")
        val = np.asarray(held[:count], dtype=np.int32) if count else None  # (count,): small, read once
        self.validation = validation_text(tokenizer, val)
        if len(self.dataset.train) < seq_len + 1:
            raise DataError(f"{self.file} has {len(self.dataset.train)} training tokens, fewer than seq_len + 1 = "
                            f"{seq_len + 1}; prepare a larger input or use a smaller --seq-len")
        return self.dataset.train, val, dataclasses.replace(config, val_tokens=count)


def validation_text(tokenizer: Tokenizer, val) -> dict | None:
    """The held-out tokens' count and the characters they stand for (None where nothing is held out)."""
    return None if val is None else {"tokens": len(val), "characters": tokenizer.count_characters(val)}


def learn_tokenizer(kind: str, text: str, vocab_size: int | None) -> Tokenizer:
    """A tokenizer of `kind` learnt from `text`, with `vocab_size` for a kind that takes one (a --vocab-size
    given to one that does not was refused with the settings, naming where it came from)."""
    takes_size = tokenizer_kind(kind).default_vocab_size is not None
    return train_tokenizer(kind, text, vocab_size if takes_size else None)


def short_vocabulary(vocab_size: int | None, tokenizer: Tokenizer) -> str | None:
    """A note where the text ran out of pairs to merge before the vocabulary --vocab-size asked for."""
    asked = vocab_size or tokenizer.default_vocab_size
    if asked is None or tokenizer.size >= asked:
        return None
    return (f"the text ran out of pairs to merge: its {tokenizer.kind} tokenizer has {tokenizer.size} tokens, not "
            f"the {asked} asked for (--vocab-size)")


def with_held_out(config: TrainConfig, n_tokens: int, seq_len: int) -> TrainConfig:
    """The config with its held-out count resolved for this text (data.corpus.held_out_count), so that a
    checkpoint records the split it was trained on and a resume keeps it."""
    return dataclasses.replace(config, val_tokens=held_out_count(config.val_tokens, n_tokens, seq_len))
