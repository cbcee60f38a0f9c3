"""The priors' computations, shared by the ensemble family (model/ensemble/priors.py) and the graph's `prior` op.

An algorithmic prior reads the token ids and gives, at each position t, a distribution over the next token
from the tokens at positions <= t alone:
- `bigram`, `trigram`: the row of a next-token table counted once from the training tokens with add-one
  smoothing (`ngram_table`). The trigram's table has a row per (previous, current) pair and a last block of
  rows for "no previous token" (position 0 of a window), which hold the bigram's;
- `calculator`: after an `=` that follows `X + Y ` (read back from the `=`, wherever the sum starts), the next
  character of ` Z` and the newline after it, while what follows the `=` so far agrees with them, as a
  one-hot; uniform elsewhere (`calculator_features`, `calculator_rows`).
`window_features` gives either, for windows of ids, on the backend.
"""

from __future__ import annotations

import re
import string

import numpy as np

from microgpt.core.errors import ConfigError, Named
from microgpt.data.tokenizer.char import CharTokenizer

CALCULATOR_CHARACTERS = "0123456789+= \n"
STAND_IN_VOCAB = 65  # tinyshakespeare's characters: the vocabulary a graph is checked for while the data is in doubt
COUNT_CHUNK = 1 << 24  # tokens counted at a time, so that counting a dataset needs no more memory than this
MAX_TRIGRAM_ENTRIES = 16 * 1024**2  # a trigram table past this (a BPE vocabulary's) is refused: it would dwarf the model
OLD_PROJECTION_STD = 0.02  # the projection's init in checkpoints saved before it had a bias (prior_bias False)
_OPERANDS = re.compile(r"(\d+) \+ (\d+) \Z")  # what comes before a sum's "=", read back from it


def calculator_features(text: str) -> list[str]:
    """For each position t of a window's text, the character that `X + Y = Z` puts at t + 1, or "" where no sum
    is in progress. At each "=" the operands are read back from it (`X + Y ` just before it, X as many digits as
    the text has there); from the "=" on, the features spell " Z" and a newline while the text written after
    it agrees with them."""
    following = [""] * len(text)
    for equals in (t for t, ch in enumerate(text) if ch == "="):
        operands = _OPERANDS.search(text, 0, equals)
        if operands is None:
            continue
        answer = f" {int(operands.group(1)) + int(operands.group(2))}\n"  # what follows the "=", in order
        for i, ch in enumerate(answer):
            t = equals + i  # position t predicts answer[i]; the text up to t must agree with answer[:i]
            if t >= len(text) or (i and text[t] != answer[i - 1]):
                break
            following[t] = ch
    return following


def calculator_rows(ids_host: np.ndarray, ids_of: dict[str, int], vocab: int, dtype) -> np.ndarray:
    """(B*T, vocab) host features of host ids (B, T): the one-hot of what the sum puts next, uniform where the
    calculator has no opinion (`calculator_features`, per window)."""
    characters = {i: ch for ch, i in ids_of.items()}
    out = np.full((ids_host.size, vocab), 1.0 / vocab, dtype=dtype)  # (B*T, vocab)
    for row, window in enumerate(ids_host):
        text = "".join(characters.get(int(i), "\x00") for i in window)  # a token it cannot read breaks a sum
        for t, ch in enumerate(calculator_features(text)):
            if ch:
                out[row * len(window) + t] = 0.0
                out[row * len(window) + t, ids_of[ch]] = 1.0
    return out


def window_features(backend, kind: str, table, ids, ids_host: np.ndarray, vocab: int, ids_of=None):
    """(B*T, vocab) on the backend: what a bigram, trigram or calculator prior gives at each position of the
    windows ids_host (B, T) on the host (ids (B*T,): their copy on the backend; table: the n-gram table, or
    None for the calculator, which reads ids_of, `check_calculator_tokenizer`'s)."""
    rows = ids_host.size
    if kind == "bigram":
        return backend.embedding_gather(table, ids, rows, vocab)  # (B*T, vocab)
    if kind == "trigram":
        previous = np.concatenate([np.full((ids_host.shape[0], 1), vocab), ids_host[:, :-1]], axis=1)  # (B, T)
        pairs = backend.ids((previous * vocab + ids_host).reshape(-1).astype(np.int32))  # (B*T,)
        return backend.embedding_gather(table, pairs, rows, vocab)  # (B*T, vocab)
    return backend.from_host(calculator_rows(ids_host, ids_of, vocab, backend.dtype))  # (B*T, vocab)


def stand_in_tokenizer(vocab: int = STAND_IN_VOCAB, characters: str | None = None) -> CharTokenizer:
    """A char tokenizer of `characters` (the text's own), or where the text is not known one of `vocab`
    characters: the calculator prior's first (digits, + = space newline), then letters and further characters
    to fill it. Only the calculator prior reads what the ids stand for (`graph check`, the studio's check)."""
    if characters is not None:
        return CharTokenizer(characters)
    filled = CALCULATOR_CHARACTERS + string.ascii_letters
    filled += "".join(chr(0x100 + i) for i in range(max(0, vocab - len(filled))))
    return CharTokenizer(filled[:vocab])


def check_calculator_tokenizer(tokenizer) -> dict[str, int]:
    """The ids of the characters the calculator reads, from a char tokenizer that has them all."""
    vocab = getattr(tokenizer, "vocab", None)
    if tokenizer.kind != "char" or vocab is None:
        raise ConfigError(Named("prior", "calculator"), " reads characters; train it with ",
                          Named("tokenizer", "char"))
    missing = [ch for ch in CALCULATOR_CHARACTERS if ch not in vocab]
    if missing:
        raise ConfigError(Named("prior", "calculator"), " needs the digits, '+', '=', ' ' and newlines in the "
                          f"text, and it has no {''.join(missing)!r}; train it on sums (examples/addition.py writes some)")
    return {ch: vocab.index(ch) for ch in CALCULATOR_CHARACTERS}


def ngram_table(kind: str, tokens, vocab: int) -> np.ndarray:
    """The add-one-smoothed next-token distribution: (V, V) for bigram, ((V + 1) * V, V) for trigram, from an
    array of tokens or a prepared dataset's (anything with `chunks(size)`), counted a chunk at a time."""
    order = 2 if kind == "bigram" else 3
    if len(tokens) < order:
        raise ConfigError(Named("prior", kind), f" counts runs of {order} tokens, and the training text has "
                          f"{len(tokens)}; give a longer text")
    chunks = tokens.chunks(COUNT_CHUNK) if hasattr(tokens, "chunks") else [np.asarray(tokens)]
    bigram = np.ones((vocab, vocab))  # (V, V): add-one smoothing
    trigram = np.ones((vocab * vocab, vocab)) if kind == "trigram" else None  # (V*V, V)
    carried = np.zeros(0, dtype=np.int64)  # the last two tokens of the chunk before: the runs across chunks
    for chunk in chunks:
        run = np.concatenate([carried, np.asarray(chunk, dtype=np.int64)])
        pairs = run[max(0, len(carried) - 1) :]  # the pair inside the carried tokens was counted already
        np.add.at(bigram, (pairs[:-1], pairs[1:]), 1.0)
        if trigram is not None:
            np.add.at(trigram, (run[:-2] * vocab + run[1:-1], run[2:]), 1.0)
        carried = run[-2:]
    bigram /= bigram.sum(axis=1, keepdims=True)
    if trigram is None:
        return bigram
    trigram /= trigram.sum(axis=1, keepdims=True)
    return np.concatenate([trigram, bigram])  # the last V rows: no previous token
