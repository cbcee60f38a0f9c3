"""Which documents are held out: a seeded hash of each document's number, against a threshold.

Document n is held out when bucket(n) < k, where bucket(n) is the top BUCKET_BITS bits of SplitMix64 of n
mixed with the seed: uniform, the same on every machine, and known the moment a document is read, so the
split streams and does not depend on the number of workers. A document goes to one split whole.

k comes from the first pass, which adds each document's length to a histogram over the buckets:
`--val-fraction F` is k = round(F x BUCKETS); the default (about a tenth of the text's characters, at most
DEFAULT_HELD_OUT_CHARS) takes the k whose held-out text is nearest that many characters, so it depends on the
documents alone: a char, a bpe and a tokenizer.json dataset of one corpus hold out the same documents, and
their held-out bits per character compare. `--val-tokens N` takes the k nearest N tokens, a token taken as
the tokenizer's characters per token (so it depends on the tokenizer, as asked).

The manifest records the choice (`held_out`: the seed, k, BUCKETS and what asked for it); a dataset
prepared before it (without the record) loads as it always did.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from microgpt.core.errors import ConfigError
from microgpt.data.prepare.settings import DEFAULT_HELD_OUT_CHARS, DEFAULT_HELD_OUT_SHARE, PrepareSettings

BUCKET_BITS = 20
BUCKETS = 1 << BUCKET_BITS
_MASK = (1 << 64) - 1


def _splitmix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser, element-wise on uint64 (wrapping)."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def buckets(slots: np.ndarray, seed: int) -> np.ndarray:
    """(n,) int64 in [0, BUCKETS): each document number's bucket."""
    key = _splitmix(np.array([seed & _MASK], dtype=np.uint64))[0]
    mixed = _splitmix(np.asarray(slots, dtype=np.int64).astype(np.uint64) ^ key)
    return (mixed >> np.uint64(64 - BUCKET_BITS)).astype(np.int64)


@dataclass
class Split:
    held: int  # k: a document is held out when its bucket is below it
    note: str | None = None  # what the summary says about the choice, where it is not what was asked

    def held_out(self, slots: np.ndarray, seed: int) -> np.ndarray:
        """(n,) bool: which of these documents are held out."""
        return buckets(slots, seed) < self.held

    def record(self, settings: PrepareSettings) -> dict:
        """The manifest's `held_out`: the rule, so that another dataset of the corpus can be checked against it."""
        asked = (f"--val-fraction {settings.val_fraction}" if settings.val_fraction is not None else
                 f"--val-tokens {settings.val_tokens}" if settings.val_tokens is not None else
                 f"a tenth of the characters, at most {DEFAULT_HELD_OUT_CHARS:,}")
        return {"seed": settings.seed, "threshold": self.held, "buckets": BUCKETS, "asked": asked}


def choose_split(settings: PrepareSettings, chars: np.ndarray, docs: np.ndarray, chars_per_token: float) -> Split:
    """The threshold, from the histograms of characters and documents over the buckets (BUCKETS,).

    A ConfigError where the asked-for split leaves no training document; with the defaults, nothing is held
    out then instead (a corpus of one document), and the note says so.
    """
    total_chars, total_docs = int(chars.sum()), int(docs.sum())
    if settings.val_fraction is not None:
        held = round(settings.val_fraction * BUCKETS)
    else:
        wanted = settings.val_tokens * chars_per_token if settings.val_tokens is not None else min(
            total_chars / DEFAULT_HELD_OUT_SHARE, DEFAULT_HELD_OUT_CHARS)  # characters
        cumulative = np.concatenate([[0], np.cumsum(chars)])  # (BUCKETS + 1,): the characters held out at each k
        held = int(np.argmin(np.abs(cumulative - wanted))) if wanted > 0 else 0
    held_docs = int(docs[:held].sum())
    if held_docs == total_docs and held > 0:
        if settings.val_fraction is None and settings.val_tokens is None:
            return Split(0, f"nothing held out: the corpus is {total_docs} document{'s' if total_docs != 1 else ''}, "
                         "and the held-out split takes whole ones")
        asked = f"--val-fraction {settings.val_fraction}" if settings.val_fraction is not None else \
            f"--val-tokens {settings.val_tokens}"
        raise ConfigError(f"{asked} holds out all {total_docs:,} documents, leaving none to train on; hold out less")
    documents = f"{total_docs:,} document{'s' if total_docs != 1 else ''}"
    if held_docs == 0 and settings.val_fraction is None and settings.val_tokens is None:
        return Split(0, f"nothing held out: the corpus is {documents}, too few for about a tenth of it in whole "
                     "documents; give --val-fraction or --val-tokens to hold some out anyway")
    if held_docs == 0 and settings.val_fraction != 0 and settings.val_tokens != 0:
        return Split(0, f"nothing held out: none of the {documents} fell in the held-out share (it takes whole "
                     "documents); give a larger --val-fraction or --val-tokens, or more documents")
    return Split(held)
