"""The text a run trains on, and the part of its tokens held out for validation.

`read_corpus` reads a regular UTF-8 text file up to a size cap, with a clear
error for a missing, empty, binary, oversized or non-UTF-8 file, or one that
is not a regular file; `default_corpus` is the documentation text that every
Python installation carries (`pydoc_data.topics`). `held_out_count` and
`split_validation` hold out the last tokens of the text.
"""

from __future__ import annotations

import shlex
import stat
from pathlib import Path

import numpy as np

from microgpt.core.errors import DataError
from microgpt.data.prepare.inputs import kind_of

# Without --val-tokens, this share of the text is held out (1/10, as nanoGPT does), up to a number of tokens
# that keeps a validation pass near ten training steps of the default run; a text too short for it holds out none.
DEFAULT_HELD_OUT_SHARE, DEFAULT_HELD_OUT_MAX = 10, 20_000


def read_corpus(path: str | Path, max_bytes: int, wanted: str = "a text file with at least seq_len + 1 characters",
                prepared: bool = True) -> str:
    """The text of a regular UTF-8 file of at most max_bytes; a DataError naming the problem otherwise (an empty
    one's says to give `wanted`). With `prepared` (train and eval, which take a prepared dataset as well), what
    only `microgpt prepare` reads is refused naming the command that prepares it (`prepare_first`).

    Only a regular file is read: a FIFO would block forever, and /dev/zero or /dev/urandom never end.
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
    if not stat.S_ISREG(info.st_mode):
        raise DataError(f"{path} is not a regular file (a pipe, a device or a socket); give the path of a "
                        "UTF-8 text file")
    if info.st_size > max_bytes:
        raise DataError(f"{path} is {info.st_size:,} bytes, over the {max_bytes:,}-byte corpus cap; raise "
                        "--max-corpus if you mean it, or give a smaller file")
    try:
        with open(path, "rb") as f:
            raw = f.read(max_bytes + 1)  # the file may have grown since stat
    except OSError as exc:
        raise DataError(f"{path} cannot be read ({exc.strerror or exc})") from None
    if len(raw) > max_bytes:
        raise DataError(f"{path} is over the {max_bytes:,}-byte corpus cap; raise --max-corpus if you mean it")
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
        raise DataError(f"--val-tokens {val_tokens} is shorter than one window (seq_len + 1 = {seq_len + 1})")
    train, val = tokens[:-val_tokens], tokens[-val_tokens:]
    check_length(train, seq_len, f"the training text left after holding out {val_tokens} validation tokens")
    return train, val


def check_length(tokens: np.ndarray, seq_len: int, what: str) -> None:
    if len(tokens) < seq_len + 1:
        raise DataError(
            f"{what} has {len(tokens)} tokens, fewer than seq_len + 1 = {seq_len + 1}; "
            "use a longer text or a smaller --seq-len"
        )
