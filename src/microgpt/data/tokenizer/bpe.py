"""Byte-level BPE: the text's UTF-8 bytes, merged into tokens learnt from the training text.

`BPETokenizer.train(text, vocab_size)` trains one with the Hugging Face `tokenizers` library: the GPT-2
pre-tokenizer regex (words, numbers, punctuation and whitespace runs; no prefix space) and a vocabulary that
starts from all 256 bytes, so any Unicode text encodes, characters unseen in training included, with no
unknown token. The library writes each byte as a printable character (`byte_alphabet`); a token's text in
its vocabulary is the characters of its bytes.

Decoding works on bytes: `token_bytes[id]` is what a token stands for, and text is their concatenation read
as UTF-8 (an invalid sequence reads as U+FFFD). A token can end inside a multi-byte character, so the
incremental decoder (`ByteDecoder`) holds such a tail back until the token that completes it.

Long texts are cut into pieces (`pieces`) at places the pre-tokenizer always splits, so the library can
train on and encode them in parallel with the same result as on the whole.
"""

from __future__ import annotations

import codecs
import json
import re
import sys
from collections.abc import Callable, Iterator

import numpy as np
from tokenizers import Tokenizer as LibraryTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

from microgpt.core.errors import ConfigError, DataError

MIN_VOCAB = 257  # the 256 bytes and at least one merge
MAX_VOCAB = 2**31 - 1  # what the ids' type (int32) holds
DEFAULT_VOCAB = 512  # --tokenizer bpe without --vocab-size
PIECE_CHARS = 1 << 16  # about how long a piece of a long text is (the unit of the library's parallel work)
BATCH_PIECES = 64  # pieces encoded per library call: bounds the memory its per-token records take at once
LONE_SURROGATE = re.compile("[\ud800-\udfff]")
PROGRESS_SHARE = 0.25  # training's progress lines: one as each quarter of the text is counted


def byte_alphabet() -> list[str]:
    """The character standing for each byte 0..255 (GPT-2's table): a printable byte of Latin-1 stands for
    itself; the others (controls, space, NBSP, soft hyphen) take U+0100, U+0101, ... in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    others = (b for b in range(256) if b not in printable)
    chars = {b: chr(b) for b in printable} | {b: chr(0x100 + k) for k, b in enumerate(others)}
    return [chars[b] for b in range(256)]


def pieces(text: str, piece_chars: int = PIECE_CHARS) -> list[str]:
    """text cut into pieces of at least piece_chars characters (the last may be shorter), each cut just
    before a newline that follows a character other than whitespace.

    The GPT-2 pre-tokenizer always splits there (no pattern joins a non-space to the whitespace after it,
    and none looks behind), so the pieces' pre-tokens are the whole text's, and so are their tokens and
    their training counts. (Checked against the library's pre-tokenizer for every code point before the
    newline.) A text with no such newline stays whole.
    """
    out = []
    start = 0
    while start < len(text):
        cut = text.find("\n", start + piece_chars)
        while cut != -1 and text[cut - 1].isspace():  # isspace holds for all the regex's \s matches
            cut = text.find("\n", cut + 1)
        end = len(text) if cut == -1 else cut
        out.append(text[start:end])
        start = end
    return out


def _reporting(cut: list[str], vocab_size: int, on_progress: Callable[[str], None]) -> Iterator[str]:
    """The pieces, one by one, saying how much of the text the library has read (it reads ahead of its counting,
    so the last line says what is left: counting and merging)."""
    total, done, step = sum(map(len, cut)), 0, max(1, round(sum(map(len, cut)) * PROGRESS_SHARE))
    next_line = step
    for piece in cut:
        yield piece
        done += len(piece)
        if next_line <= done < total:
            on_progress(f"read {done:,} of {total:,} characters")
            next_line = done + step
    on_progress(f"read all {total:,} characters; counting their words and learning up to "
                f"{vocab_size - MIN_VOCAB + 1:,} merges")


def untrained() -> LibraryTokenizer:
    """The library's tokenizer as this kind configures it, before any training: byte-level BPE, no prefix
    space, no normaliser, post-processor or added tokens."""
    tokenizer = LibraryTokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def settings_of(tokenizer: LibraryTokenizer) -> dict:
    """The tokenizer's JSON without its vocabulary and merges: everything that says how it tokenizes."""
    data = json.loads(tokenizer.to_str())
    for learnt in ("vocab", "merges"):
        data["model"].pop(learnt, None)  # a model of another kind may lack merges
    return data


def most_tokens(text: str, vocab_size: int) -> int:
    """The most tokens a tokenizer learnt from `text` can have of the `vocab_size` asked: a merge joins a pair of
    neighbours, so a text of N bytes gives at most N merges. Asking the trainer for more only makes it allocate
    for them (a billion aborts the interpreter); the run notes the shortfall (data/corpus.py short_vocabulary),
    and plans its memory for this many (training/plan.py)."""
    return min(vocab_size, MIN_VOCAB - 1 + len(text.encode("utf-8")))


class BPETokenizer:
    """A byte-level BPE around a trained `tokenizers.Tokenizer` (`library_tokenizer`).

    `token_bytes[id]` is the bytes a token stands for; `size` may be below the vocab_size asked of `train`
    when the training text runs out of pairs to merge.
    """

    kind = "bpe"
    default_vocab_size = DEFAULT_VOCAB  # takes --vocab-size

    def __init__(self, library_tokenizer: LibraryTokenizer):
        if settings_of(library_tokenizer) != settings_of(untrained()):
            raise DataError("the bpe tokenizer's data is not a byte-level BPE as microgpt trains one (a BPE "
                            "model after the ByteLevel pre-tokenizer without a prefix space, no dropout, "
                            "normaliser, post-processor or added tokens)")
        vocab = library_tokenizer.get_vocab()  # token text -> id
        if sorted(vocab.values()) != list(range(len(vocab))):
            raise DataError("the bpe tokenizer's vocabulary skips or repeats ids; they must run from 0 "
                            "without gaps")
        if not set(byte_alphabet()) <= vocab.keys():
            raise DataError("the bpe tokenizer's vocabulary lacks some of the 256 single bytes, so not every "
                            "text could be encoded")
        byte_of = {ch: b for b, ch in enumerate(byte_alphabet())}
        try:
            self.token_bytes = [bytes(byte_of[ch] for ch in token) for token in sorted(vocab, key=vocab.get)]
        except KeyError as exc:
            raise DataError(f"the bpe tokenizer's vocabulary has a token with {exc.args[0]!r}, which stands "
                            "for no byte") from None
        self.library_tokenizer = library_tokenizer
        # (size,) how many characters each token starts: its bytes that are not UTF-8 continuation bytes
        self._characters_started = np.array(
            [sum((b & 0xC0) != 0x80 for b in token) for token in self.token_bytes], dtype=np.int64
        )

    @classmethod
    def train(cls, text: str, vocab_size: int, on_progress: Callable[[str], None] | None = None) -> BPETokenizer:
        """A tokenizer of up to vocab_size tokens learnt from text, with progress when `on_progress` is given:
        where stderr is a terminal, the library's own bars (its words counted, its merges learnt); elsewhere,
        where they would be blank lines, `on_progress` hears a line as the library reads each PROGRESS_SHARE of
        the text and one as it has read all of it.

        Deterministic: the same text and vocab_size give the same tokenizer, in any process and with any
        number of threads (checked in separate processes, so with different hash seeds, under
        RAYON_NUM_THREADS=1, 2, 16 and unset). No setting is needed for it: the library's trainer breaks
        ties between equally frequent pairs by their token ids, which come from the sorted alphabet and the
        order of merges. Its one known run-to-run difference (huggingface/tokenizers#1794: the ids of
        continuing_subword_prefix / end_of_word_suffix tokens follow hash-map order) needs those options,
        which stay unset here.
        """
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < MIN_VOCAB:
            raise ConfigError(f"--vocab-size must be a whole number of at least {MIN_VOCAB} for a bpe tokenizer "
                              f"(its 256 bytes and one merge), got {vocab_size!r}")
        if vocab_size > MAX_VOCAB:
            raise ConfigError(f"--vocab-size must be at most {MAX_VOCAB:,}, what the token ids (int32) hold, got "
                              f"{vocab_size:,}")
        vocab_size = most_tokens(text, vocab_size)
        tokenizer = untrained()
        bars = on_progress is not None and sys.stderr.isatty()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=byte_alphabet(), show_progress=bars)
        cut = pieces(text)
        read = cut if on_progress is None or bars else _reporting(cut, vocab_size, on_progress)
        tokenizer.train_from_iterator(read, trainer=trainer, length=len(cut))
        return cls(tokenizer)

    @property
    def size(self) -> int:
        return len(self.token_bytes)

    def encode(self, text: str, source: str = "the text") -> np.ndarray:
        """int32 ids (n,); a lone surrogate (which UTF-8 cannot hold) is an error naming it and where it is."""
        found = LONE_SURROGATE.search(text)
        if found:
            index = found.start()
            line = text.count("\n", 0, index) + 1
            raise DataError(f"{source} has the character {found.group()!r} (U+{ord(found.group()):04X}) at "
                            f"offset {index} (line {line}), a lone surrogate, which UTF-8 cannot encode")
        cut = pieces(text)
        parts = [np.zeros(0, dtype=np.int32)]  # each (tokens of one piece,)
        for first in range(0, len(cut), BATCH_PIECES):
            encodings = self.library_tokenizer.encode_batch(cut[first : first + BATCH_PIECES])
            parts.extend(np.array(encoding.ids, dtype=np.int32) for encoding in encodings)
        return np.concatenate(parts)  # (n,)

    def decode(self, ids) -> str:
        """The ids' bytes read as UTF-8; an invalid sequence (a character cut at either end) reads as U+FFFD."""
        return b"".join(self.token_bytes[int(i)] for i in ids).decode("utf-8", errors="replace")

    def decoder(self) -> ByteDecoder:
        return ByteDecoder(self.token_bytes)

    def to_json(self) -> dict:
        return {"kind": self.kind, "data": self.library_tokenizer.to_str()}

    @classmethod
    def from_json(cls, data: dict) -> BPETokenizer:
        text = data.get("data")
        if not isinstance(text, str):
            raise DataError("the bpe tokenizer's JSON has no 'data' string (the tokenizers library's JSON)")
        try:
            library_tokenizer = LibraryTokenizer.from_str(text)
        except Exception as exc:  # noqa: BLE001 - the library raises a bare Exception for any unreadable input
            raise DataError(f"the bpe tokenizer's data is not a tokenizer the tokenizers library can read "
                            f"({exc})") from None
        return cls(library_tokenizer)

    def describe(self) -> str:
        return f"bpe: {self.size} tokens (byte-level)"

    def extended_for(self, text: str) -> BPETokenizer:
        """Itself: its bytes already cover any text."""
        return self

    def count_characters(self, ids) -> int:
        """How many characters the ids' bytes start: for whole UTF-8 text, the length of its decoding.

        A character split at an edge counts where its first byte is: once, in the ids holding its lead byte,
        and not at all in those holding only its continuation bytes. So the counts of the pieces of a token
        sequence add up to the count of the whole, wherever it is cut.
        """
        return int(self._characters_started[np.asarray(ids, dtype=np.int64)].sum())

    def start_text(self) -> str:
        return "\n"


class ByteDecoder:
    """Text as ids arrive: each token's bytes go through an incremental UTF-8 decoder, which holds back a
    character's first bytes until the rest arrive."""

    def __init__(self, token_bytes: list[bytes]):
        self.token_bytes = token_bytes
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def add(self, token_id: int) -> str:
        """The text this token completes ("" while a character is still incomplete)."""
        return self._utf8.decode(self.token_bytes[int(token_id)])

    def flush(self) -> str:
        """What is held back, as U+FFFD for an incomplete character ("" when nothing is)."""
        return self._utf8.decode(b"", final=True)
