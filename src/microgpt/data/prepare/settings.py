"""The settings of `microgpt prepare`, each declared once: its flag, help, default and check (core/fields.py).

The command's positional INPUTs, `--out`, `--overwrite` and `--quiet` say what to read and where to write, and
are cli/prepare.py's own; everything about how the corpus becomes a dataset is here, so that the command's
help and docs/data.md come from one place.
"""

from __future__ import annotations

from dataclasses import dataclass

from microgpt.core.checks import PATH, SIZE, Choice, ChoiceOrFile, Number, whole
from microgpt.core.errors import ConfigError
from microgpt.core.fields import check_fields, setting
from microgpt.data.tokenizer import KINDS, is_tokenizer_file
from microgpt.data.tokenizer.bpe import MAX_VOCAB, MIN_VOCAB, BPETokenizer

ERROR_MODES = ("strict", "replace", "skip")
DEFAULT_SHARD_TOKENS = 100_000_000  # llm.c's shard size: 200 MB of uint16, a few seconds to hash
DEFAULT_SAMPLE_BYTES = 64 * 1024**2  # the text a bpe tokenizer trains on: a minute or less of training
DEFAULT_HELD_OUT_SHARE = 10  # without --val-fraction or --val-tokens: about a tenth of the text's characters ...
DEFAULT_HELD_OUT_CHARS = 1_000_000  # ... and at most about this many, in whole documents: counted in characters,
# never tokens, so that datasets of one corpus hold out the same documents whatever their tokenizer


class Fraction(Number):
    """A share: a finite float from 0 (none) up to, not including, 1."""

    kind = "a number from 0 up to (not including) 1"

    def validate(self, value):
        value = super().validate(value)
        if not 0 <= value < 1:
            raise ValueError(self.kind)
        return value


@dataclass
class PrepareSettings:
    glob: str | None = setting(None, "in a directory, read the files whose path below it matches PATTERN (e.g. "
                               "'*.txt' or 'books/**/*.jsonl.gz'): .jsonl and .parquet ones as records, the others "
                               "as text", PATH, shown_default="its .txt, .jsonl and .parquet files, compressed or not",
                               metavar="PATTERN")
    text_field: str = setting("text", "the field of each JSON Lines record, or the Parquet column, that holds a "
                              "document's text", PATH, metavar="F")
    errors: str = setting("strict", "what undecodable (not UTF-8) bytes do: strict stops, naming the file and "
                          "byte; replace puts U+FFFD for them; skip drops their document. The counts are reported",
                          Choice(lambda: ERROR_MODES), metavar="MODE")
    tokenizer: str = setting("char", "how text becomes tokens: char (one per character of the corpus), bpe "
                             "(byte-level BPE trained on the first --tokenizer-sample of the text), or "
                             "PATH/tokenizer.json (any Hugging Face tokenizer, used as it is)",
                             ChoiceOrFile(lambda: tuple(KINDS), is_tokenizer_file, "a Hugging Face tokenizer.json"),
                             metavar="KIND")
    vocab_size: int | None = setting(None, "the BPE vocabulary: 256 bytes and the merges learnt on top of them",
                                     whole(MIN_VOCAB, MAX_VOCAB),
                                     shown_default=f"{BPETokenizer.default_vocab_size} with --tokenizer bpe")
    tokenizer_sample: int = setting(DEFAULT_SAMPLE_BYTES, "how many characters of the text, from its start, a "
                                    "bpe tokenizer is trained on (it then encodes all of it)", SIZE, metavar="SIZE")
    val_fraction: float | None = setting(None, "hold out this share of the documents for validation, chosen by a "
                                         "seeded hash of each document's number (0: hold out none)", Fraction(),
                                         shown_default=f"about a tenth of the text, at most about "
                                         f"{DEFAULT_HELD_OUT_CHARS:,} characters (the same documents for "
                                         "any tokenizer)", metavar="F")
    val_tokens: int | None = setting(None, "instead of --val-fraction, hold out about N tokens of whole documents, "
                                     "spread over the corpus by the same hash", whole(0),
                                     shown_default="--val-fraction's")
    seed: int = setting(0, "seeds the hash that chooses the held-out documents", whole(0), metavar="S")
    shard_tokens: int = setting(DEFAULT_SHARD_TOKENS, "tokens per shard file, at most", whole(1))
    workers: int | None = setting(None, "processes that decode and tokenize (1: all in this one); the output is "
                                  "the same for any number", whole(1), shown_default="the cores available")

    def __post_init__(self) -> None:
        check_fields(self)
        if self.val_fraction is not None and self.val_tokens is not None:
            raise ConfigError("--val-fraction and --val-tokens both say how much to hold out; give one of them")
        if self.tokenizer != "bpe" and self.vocab_size is not None:
            raise ConfigError(f"--vocab-size is for bpe; {'a char tokenizer' if self.tokenizer == 'char' else 'a tokenizer.json'}'s "
                              "vocabulary is " + ("the corpus's characters" if self.tokenizer == "char" else "its own"))
