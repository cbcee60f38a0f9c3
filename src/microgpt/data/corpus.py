"""What a run trains on (`Corpus`): a text file (or the bundled docs) read whole, or a prepared dataset
(data/dataset.py) trained from its shards, read by position; how each gives a run its tokenizer and its training
and held-out tokens; and the text's own reading and held-out split.

`read_corpus` reads a regular UTF-8 text file up to a size cap, with a clear error for a missing, empty,
binary, oversized or non-UTF-8 file, or one that is not a regular file; `default_corpus` is the documentation
text that every Python installation carries (`pydoc_data.topics`). A text: a new run learns its tokenizer from
it, a fine-tune extends the source's by its new characters, and the last tokens are held out (`held_out_count`:
a tenth, up to DEFAULT_HELD_OUT_MAX, or --val-tokens; `split_validation`). A dataset: the tokenizer is the one
prepare made (a checkpoint resumed or fine-tuned on it must have the same), and validation reads the first
tokens of its held-out split (as many as --val-tokens, else as many as a text's default would hold out), so
that neither memory nor a validation pass grows with the dataset. A run's config is read here by its fields
(val_tokens), as settings/training.py's TrainConfig declares them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import shlex
import stat
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from microgpt.core.errors import DataError, Named
from microgpt.core.user_files import TooLarge, read_regular
from microgpt.data.dataset import Dataset, is_dataset, open_dataset
from microgpt.data.prepare.inputs import kind_of
from microgpt.data.tokenizer import Tokenizer, tokenizer_kind, train_tokenizer
from microgpt.data.tokenizer.bpe import most_tokens

# Without --val-tokens, this share of the text is held out (1/10, as nanoGPT does), up to a number of tokens
# that keeps a validation pass near ten training steps of the default run; a text too short for it holds out none.
DEFAULT_HELD_OUT_SHARE, DEFAULT_HELD_OUT_MAX = 10, 20_000


def read_corpus(path: str | Path, max_bytes: int, wanted: str = "a text file with at least seq_len + 1 characters",
                prepared: bool = True) -> str:
    """The text of a regular UTF-8 file of at most max_bytes; a DataError naming the problem otherwise (an empty
    one's says to give `wanted`). With `prepared` (train and eval, which take a prepared dataset as well), what
    only `microgpt prepare` reads is refused naming the command that prepares it (`prepare_first`).

    Only a regular file is read: a FIFO would block forever, and /dev/zero or /dev/urandom never end. The
    file's type and size are those of the descriptor opened (core/user_files.py's read_regular, whose open never
    waits), so a FIFO put in its place after the name was looked at is refused too; the path's stat only
    chooses the message for a directory, for what `microgpt prepare` reads, and the size an oversized one says.
    """
    path = Path(path)
    try:
        info = path.stat()
    except FileNotFoundError:
        raise DataError(f"{path}: no such file; give the path of a UTF-8 text file") from None
    except OSError as exc:
        raise DataError(f"{path} cannot be read ({exc.strerror or exc}); give the path of a UTF-8 text file") from None
    if prepared and (why := prepare_first(path, stat.S_ISDIR(info.st_mode))):
        raise DataError(why)
    if stat.S_ISDIR(info.st_mode):
        raise DataError(f"{path} is a directory; give the path of a UTF-8 text file")
    try:
        raw = read_regular(path, max_bytes)
    except TooLarge:
        size = f"{info.st_size:,} bytes, " if info.st_size > max_bytes else ""  # else it grew since
        raise DataError(f"{path} is {size}over the {max_bytes:,}-byte corpus cap; raise ", Named("max_corpus"),
                        " if you mean it, or give a smaller file", key="file") from None
    except FileNotFoundError:
        raise DataError(f"{path}: no such file; give the path of a UTF-8 text file") from None
    except OSError as exc:  # a pipe, a device or a socket (read_regular's words), or the system's reason
        raise DataError(f"{path} cannot be read ({exc.strerror or exc}); give the path of a UTF-8 text file") from None
    if not raw:
        raise DataError(f"{path} is empty; give {wanted}")
    if b"\x00" in raw:
        raise DataError(f"{path} looks binary (it holds NUL bytes); give a UTF-8 text file")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(
            f"{path} is not UTF-8 text (byte {exc.start} cannot be decoded); convert it to UTF-8 first"
        ) from None


def prepare_first(path: Path, directory: bool) -> str | None:
    """Why `path` is for `microgpt prepare` rather than to be read as one text, with the command that makes a
    dataset directory of it (which train and eval take): a directory that is not a dataset, JSON Lines or Parquet
    records (read as text, a .jsonl trained on its quotes, escapes and keys without a word), a compressed file
    (read as text, it "looks binary"). None for anything else. A .jsonl meant as text is given a .txt name."""
    kind, compression = kind_of(path)
    packed = f"{ {'.gz': 'gzip', '.xz': 'xz', '.zst': 'zstd'}[compression]}-compressed " if compression else ""
    records = {"jsonl": "JSON Lines", "parquet": "Parquet"}.get(kind)
    if directory:
        out = path / "dataset" if path.name in ("", ".", "..") else path.with_name(f"{path.name}-dataset")
        return (f"{path} is a directory but not a prepared dataset (it has no manifest.json); train and eval take a "
                "text file or a dataset directory, which microgpt prepare makes of the files in it: microgpt "
                f"prepare {shlex.quote(str(path))} --out {shlex.quote(str(out))}")
    if records is None and not compression:
        return None
    name = path.name[: len(path.name) - len(compression)]
    name = name[: -len(f".{kind}")] if records else name[:-4] if name.lower().endswith(".txt") else name
    out = path.with_name(name) if name and not path.with_name(name).exists() else path.with_name(f"{name}-dataset")
    command = f"microgpt prepare {shlex.quote(str(path))} --out {shlex.quote(str(out))}"
    if records is None:
        return (f"{path} is {packed}text, and train and eval read plain text; prepare decompresses it into a dataset "
                f"directory, which they take: {command}")
    raw = " (or give the file a .txt name to train on the JSON itself)" if kind == "jsonl" and not compression else ""
    return (f"{path} holds {packed}{records} records, not plain text (read as text, a model would learn their "
            f"syntax); prepare their text into a dataset directory, which train and eval take: {command}{raw}")


def default_corpus() -> tuple[str, str]:
    """(text, description): the Python documentation topics bundled with every CPython (pydoc_data)."""
    from pydoc_data import topics

    text = "\n\n".join(topics.topics[key] for key in sorted(topics.topics))
    return text, f"the Python documentation topics bundled with this interpreter (pydoc_data, {len(text):,} characters)"


def held_out_count(val_tokens: int | None, n_tokens: int, seq_len: int) -> int:
    """How many tokens to hold out: `val_tokens` when given; else a DEFAULT_HELD_OUT_SHARE-th of the text, up to
    DEFAULT_HELD_OUT_MAX, or none where the text is too short to leave a window on each side."""
    if val_tokens is not None:
        return val_tokens
    count = min(n_tokens // DEFAULT_HELD_OUT_SHARE, DEFAULT_HELD_OUT_MAX)
    return count if count >= seq_len + 1 and n_tokens - count >= seq_len + 1 else 0


def split_validation(tokens: np.ndarray, val_tokens: int, seq_len: int) -> tuple[np.ndarray, np.ndarray | None]:
    """(train, validation): the last val_tokens tokens are held out; both must fit a window of seq_len + 1."""
    if val_tokens == 0:
        check_length(tokens, seq_len, "the training text")
        return tokens, None
    if val_tokens < seq_len + 1:
        raise DataError(Named("val_tokens", val_tokens), f" is shorter than one window (seq_len + 1 = {seq_len + 1})")
    train, val = tokens[:-val_tokens], tokens[-val_tokens:]
    check_length(train, seq_len, f"the training text left after holding out {val_tokens} validation tokens")
    return train, val


def check_length(tokens: np.ndarray, seq_len: int, what: str) -> None:
    if len(tokens) < seq_len + 1:
        raise DataError(f"{what} has {len(tokens)} tokens, fewer than seq_len + 1 = {seq_len + 1}; use a longer "
                        "text or a smaller ", Named("seq_len"))


DEFAULT_CORPUS_NAME = "python-docs"  # the default checkpoint name of a run on the bundled docs


def corpus_name(file: str | None) -> str:
    """The default checkpoint name for a corpus: its file's stem (a dataset directory's name), or the docs'."""
    return DEFAULT_CORPUS_NAME if file is None else Path(file).stem


@dataclass
class Corpus:
    text: str  # "" for a dataset
    description: str  # "FILE (N characters)", for messages and the checkpoint
    name: str  # the default checkpoint name
    file: str | None  # None: the bundled Python docs
    sha256: str  # of the text, or of a dataset's manifest
    dataset: Dataset | None = None
    validation: dict | None = None  # {"tokens", "characters"} of the held-out tokens, once `split` has chosen them
    made: dict = field(default_factory=dict, repr=False, compare=False)  # (kind, size) -> the tokenizer made

    @classmethod
    def load(cls, file: str | None, max_bytes: int, verify: bool = True) -> Corpus:
        """The text of `file` (or the bundled docs), or the prepared dataset there (its shards' checksums read
        where `verify`)."""
        if is_dataset(file):
            dataset = open_dataset(file, verify)
            return cls("", dataset.description, corpus_name(file), file, dataset.identity, dataset)
        if file is None:
            text, description = default_corpus()
        else:
            text = read_corpus(file, max_bytes)
            description = f"{file} ({len(text):,} characters)"
        return cls(text, description, corpus_name(file), file, hashlib.sha256(text.encode("utf-8")).hexdigest())

    def run_info(self, train_config, best_val_loss: float | None = None) -> dict:
        """What a run keeps in train_state.json besides the step and data position: its corpus (the file as an
        absolute path, so a resume finds it from any directory) and settings."""
        absolute = None if self.file is None else str(Path(self.file).resolve())
        return {"corpus": self.description, "corpus_file": absolute, "corpus_sha256": self.sha256,
                "best_val_loss": best_val_loss, "train_config": vars(train_config), "validation_text": self.validation}

    def new_tokenizer(self, kind: str, vocab_size: int | None) -> Tokenizer:
        """A new run's tokenizer: learnt from the text (once for each kind and size), or the dataset's."""
        if self.dataset:
            return self.dataset.tokenizer
        if (kind, vocab_size) not in self.made:
            self.made[(kind, vocab_size)] = learn_tokenizer(kind, self.text, vocab_size)
        return self.made[(kind, vocab_size)]

    def largest_vocabulary(self, kind: str, vocab_size: int | None) -> int:
        """The most tokens a tokenizer of `kind` learnt from this text can have: what `vocab_size` asks (else the
        kind's default), and no more than its bytes can merge into (bpe.most_tokens)."""
        return most_tokens(self.text, vocab_size or tokenizer_kind(kind).default_vocab_size)

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

    def split(self, tokenizer: Tokenizer, config, seq_len: int):
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
            raise DataError(Named("val_tokens", config.val_tokens), f" is more than {self.file} holds out "
                            f"({0 if held is None else len(held):,} tokens); give at most that, or prepare it with a "
                            "larger --val-fraction")
        if 0 < count < seq_len + 1:
            raise DataError(f"{self.file} holds out {count} tokens, fewer than one window (seq_len + 1 = "
                            f"{seq_len + 1}); prepare it with more held out, or give ", Named("val_tokens", 0),
                            key="val_tokens")
        val = np.asarray(held[:count], dtype=np.int32) if count else None  # (count,): small, read once
        self.validation = validation_text(tokenizer, val)
        if len(self.dataset.train) < seq_len + 1:
            raise DataError(f"{self.file} has {len(self.dataset.train)} training tokens, fewer than seq_len + 1 = "
                            f"{seq_len + 1}; prepare a larger input or use a smaller ", Named("seq_len"))
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


def with_held_out(config, n_tokens: int, seq_len: int):
    """The config with its held-out count resolved for this text (held_out_count), so that a
    checkpoint records the split it was trained on and a resume keeps it."""
    return dataclasses.replace(config, val_tokens=held_out_count(config.val_tokens, n_tokens, seq_len))
