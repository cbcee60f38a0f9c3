"""The ensemble's algorithmic expert 0: a prior that writes into the stream alone (no logits, not routed).

- `counter`: a learned seq_len x B signal, row t written at position t;
- `bigram`, `trigram`: the next-token distribution given the last one or two tokens, counted once from the
  training tokens (`learn_from`) with add-one smoothing and kept as non-trainable parameters; a learned
  projection (vocab x B) writes it into the stream. The trigram's table has a row per (previous, current)
  pair and a last block of rows for "no previous token" (position 0 of a window), which hold the bigram's;
- `calculator`: where the current line so far is `X + Y =` (then a space and the digits of the answer written
  so far), the next character of `X + Y = Z` (the space, the next digit, or the newline after the last one)
  as a one-hot; uniform elsewhere, and on a window's first line, whose start (and so X) it cannot see; a
  learned projection writes it.

Every feature at position t reads the tokens at positions <= t only.
"""

from __future__ import annotations

import re

import numpy as np

from microgpt.core.errors import ConfigError
from microgpt.model.params import ParameterViews, ParamSpec

CALCULATOR_CHARACTERS = "0123456789+= \n"
COUNT_CHUNK = 1 << 24  # tokens counted at a time, so that counting a dataset needs no more memory than this
_SUM_SO_FAR = re.compile(r"(\d+) \+ (\d+) =( ?)(\d*)")  # a whole line so far, up to and including position t


def prior_specs(kind: str, vocab: int, stream_dim: int, seq_len: int) -> list[ParamSpec]:
    """The prior's parameters (none for "none")."""
    projection = ParamSpec("prior.proj.w", (vocab, stream_dim), 0.02, decay=True)
    return {
        "none": [],
        "counter": [ParamSpec("prior.signal", (seq_len, stream_dim), 0.02)],
        "bigram": [ParamSpec("prior.table", (vocab, vocab), 0.0, 1.0 / vocab, trainable=False), projection],
        "trigram": [ParamSpec("prior.table", ((vocab + 1) * vocab, vocab), 0.0, 1.0 / vocab, trainable=False),
                    projection],
        "calculator": [projection],
    }[kind]


def calculator_features(text: str) -> list[str]:
    """For each position t of a window's text, the character that `X + Y = Z` puts at t + 1, or "" where the
    line so far is no sum in progress (or began before the window)."""
    following = []
    line_start = None  # where the current line began, once a newline inside the window has been seen
    for t, ch in enumerate(text):
        if ch == "\n":
            line_start = t + 1
            following.append("")
            continue
        match = None if line_start is None else _SUM_SO_FAR.fullmatch(text[line_start : t + 1])
        if match is None:
            following.append("")
            continue
        answer, written = str(int(match.group(1)) + int(match.group(2))), match.group(4)
        if not match.group(3):
            following.append(" ")  # after "=" comes the space
        elif answer.startswith(written):
            following.append(answer[len(written)] if len(written) < len(answer) else "\n")
        else:
            following.append("")  # a wrong answer so far: no opinion
    return following


class Prior:
    """The prior's write into the stream, bound to one set of gradient buffers."""

    def __init__(self, backend, views: ParameterViews, kind: str, vocab: int, stream_dim: int, tokenizer):
        self.be, self.kind, self.vocab, self.stream_dim = backend, kind, vocab, stream_dim
        self.views = views
        if kind == "calculator":
            self.ids_of = check_calculator_tokenizer(tokenizer)

    def write(self, ids_host: np.ndarray, ids) -> tuple[object, object]:
        """(the write (B*T, B_stream), what backward needs) for host ids (B, T) and their device copy (B*T,)."""
        be, value = self.be, self.views.value
        batch, seq_len = ids_host.shape
        rows = batch * seq_len
        if self.kind == "counter":
            positions = be.ids(np.tile(np.arange(seq_len, dtype=np.int32), batch))  # (B*T,)
            return be.embedding_gather(value["prior.signal"], positions, rows, self.stream_dim), positions
        if self.kind == "bigram":
            features = be.embedding_gather(value["prior.table"], ids, rows, self.vocab)  # (B*T, V)
        elif self.kind == "trigram":
            previous = np.concatenate([np.full((batch, 1), self.vocab), ids_host[:, :-1]], axis=1)  # (B, T)
            pairs = be.ids((previous * self.vocab + ids_host).reshape(-1).astype(np.int32))  # (B*T,)
            features = be.embedding_gather(value["prior.table"], pairs, rows, self.vocab)  # (B*T, V)
        else:  # calculator
            features = be.from_host(self._calculator(ids_host))  # (B*T, V)
        return be.matmul(features, value["prior.proj.w"]), features  # (B*T, B_stream)

    def write_rows(self, context: np.ndarray, start: int, ids) -> tuple[object, object]:
        """The write for the context's last tokens, positions start .. len(context) - 1 of one sequence (host
        context (start + n,) and the new tokens' device ids (n,)), as `write` computes them in a window."""
        be, value = self.be, self.views.value
        n = len(context) - start
        if self.kind == "counter":
            positions = be.ids(np.arange(start, start + n, dtype=np.int32))  # (n,)
            return be.embedding_gather(value["prior.signal"], positions, n, self.stream_dim), positions
        if self.kind == "bigram":
            features = be.embedding_gather(value["prior.table"], ids, n, self.vocab)  # (n, V)
        elif self.kind == "trigram":
            previous = np.concatenate([[self.vocab], context[:-1]])[start:]  # (n,)
            pairs = be.ids((previous * self.vocab + context[start:]).astype(np.int32))  # (n,)
            features = be.embedding_gather(value["prior.table"], pairs, n, self.vocab)  # (n, V)
        else:  # calculator
            features = be.from_host(self._calculator(context[None, :])[start:])  # (n, V)
        return be.matmul(features, value["prior.proj.w"]), features

    def backward(self, dwrite, saved) -> None:
        """Add the trainable parameters' gradients for dwrite (B*T, B_stream)."""
        gradient = self.views.gradient
        if self.kind == "counter":
            self.be.embedding_scatter_add(dwrite, saved, gradient["prior.signal"], dwrite.shape[0], self.stream_dim)
        else:
            self.be.matmul_into(saved, dwrite, gradient["prior.proj.w"], transpose_a=True, accumulate=True)

    def _calculator(self, ids_host: np.ndarray) -> np.ndarray:
        """(B*T, V) host features: one-hot of what the sum puts next, uniform where it has no opinion."""
        characters = {i: ch for ch, i in self.ids_of.items()}
        out = np.full((ids_host.size, self.vocab), 1.0 / self.vocab, dtype=self.be.dtype)  # (B*T, V)
        for row, window in enumerate(ids_host):
            text = "".join(characters.get(int(i), "\x00") for i in window)  # a token it cannot read breaks a sum
            for t, ch in enumerate(calculator_features(text)):
                if ch:
                    out[row * len(window) + t] = 0.0
                    out[row * len(window) + t, self.ids_of[ch]] = 1.0
        return out


def check_calculator_tokenizer(tokenizer) -> dict[str, int]:
    """The ids of the characters the calculator reads, from a char tokenizer that has them all."""
    vocab = getattr(tokenizer, "vocab", None)
    if tokenizer.kind != "char" or vocab is None:
        raise ConfigError("--prior calculator reads characters; train it with --tokenizer char")
    missing = [ch for ch in CALCULATOR_CHARACTERS if ch not in vocab]
    if missing:
        raise ConfigError(f"--prior calculator needs the digits, '+', '=', ' ' and newlines in the text, and it "
                          f"has no {''.join(missing)!r}; train it on sums (examples/addition.py writes some)")
    return {ch: vocab.index(ch) for ch in CALCULATOR_CHARACTERS}


def ngram_table(kind: str, tokens, vocab: int) -> np.ndarray:
    """The add-one-smoothed next-token distribution: (V, V) for bigram, ((V + 1) * V, V) for trigram, from an
    array of tokens or a prepared dataset's (anything with `chunks(size)`), counted a chunk at a time."""
    order = 2 if kind == "bigram" else 3
    if len(tokens) < order:
        raise ConfigError(f"--prior {kind} counts runs of {order} tokens, and the training text has {len(tokens)}; "
                          "give a longer text")
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
