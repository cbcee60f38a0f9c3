"""The ensemble's algorithmic expert 0: a prior that writes into the stream alone (no logits, not routed).

- `counter`: a learned seq_len x B signal, row t written at position t;
- `bigram`, `trigram`: the next-token distribution given the last one or two tokens, counted once from the
  training tokens (`learn_from`) with add-one smoothing and kept as non-trainable parameters; a learned
  projection (vocab x B, and a bias) writes it into the stream. The trigram's table has a row per (previous,
  current) pair and a last block of rows for "no previous token" (position 0 of a window), which hold the
  bigram's;
- `calculator`: after an `=` that follows `X + Y ` (read back from the `=`, wherever the sum starts: no
  newline needed before it, nor a line start inside the window), the next character of ` Z` and the newline
  after it, while what follows the `=` so far agrees with them, as a one-hot; uniform elsewhere. A learned
  projection (and a bias) writes it.

The projection starts as the original's does: He init, N(0, 2/V), and a zero bias. Every feature at position
t reads the tokens at positions <= t only.
"""

from __future__ import annotations

import math
import re

import numpy as np

from microgpt.core.errors import ConfigError
from microgpt.model.params import ParameterViews, ParamSpec

CALCULATOR_CHARACTERS = "0123456789+= \n"
COUNT_CHUNK = 1 << 24  # tokens counted at a time, so that counting a dataset needs no more memory than this
_OPERANDS = re.compile(r"(\d+) \+ (\d+) \Z")  # what comes before a sum's "=", read back from it
OLD_PROJECTION_STD = 0.02  # the projection's init in checkpoints saved before it had a bias (prior_bias False)


def prior_specs(kind: str, vocab: int, stream_dim: int, seq_len: int, bias: bool = True) -> list[ParamSpec]:
    """The prior's parameters (none for "none"); `bias`: the projection has one and starts as the original's."""
    projection = [ParamSpec("prior.proj.w", (vocab, stream_dim), math.sqrt(2.0 / vocab) if bias
                            else OLD_PROJECTION_STD, decay=True)]
    if bias:
        projection.append(ParamSpec("prior.proj.b", (stream_dim,), 0.0))
    return {
        "none": [],
        "counter": [ParamSpec("prior.signal", (seq_len, stream_dim), 0.02)],
        "bigram": [ParamSpec("prior.table", (vocab, vocab), 0.0, 1.0 / vocab, trainable=False), *projection],
        "trigram": [ParamSpec("prior.table", ((vocab + 1) * vocab, vocab), 0.0, 1.0 / vocab, trainable=False),
                    *projection],
        "calculator": projection,
    }[kind]


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


class Prior:
    """The prior's write into the stream, bound to one set of gradient buffers."""

    def __init__(self, backend, views: ParameterViews, kind: str, vocab: int, stream_dim: int, tokenizer):
        self.be, self.kind, self.vocab, self.stream_dim = backend, kind, vocab, stream_dim
        self.views = views
        self.bias = "prior.proj.b" in views.value
        if kind == "calculator":
            self.ids_of = check_calculator_tokenizer(tokenizer)

    def write(self, ids_host: np.ndarray, ids, on: bool = True) -> tuple[object, object]:
        """(the write (B*T, B_stream), what backward needs) for host ids (B, T) and their device copy (B*T,).
        Switched off (`on` False, past --prior-off-at), the features are zeros, so a projection writes its bias
        alone (model.py asks only a prior with a bias for it)."""
        be, value = self.be, self.views.value
        batch, seq_len = ids_host.shape
        rows = batch * seq_len
        if not on:
            features = be.zeros((rows, self.vocab))  # (B*T, V)
            return self._project(features), features
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
        return self._project(features), features  # (B*T, B_stream)

    def write_rows(self, context: np.ndarray, start: int, ids, on: bool = True) -> tuple[object, object]:
        """The write for the context's last tokens, positions start .. len(context) - 1 of one sequence (host
        context (start + n,) and the new tokens' device ids (n,)), as `write` computes them in a window."""
        be, value = self.be, self.views.value
        n = len(context) - start
        if not on:
            features = be.zeros((n, self.vocab))  # (n, V)
            return self._project(features), features
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
        return self._project(features), features

    def _project(self, features):
        """features @ W (+ b): the write (rows, B_stream) of features (rows, V)."""
        write = self.be.matmul(features, self.views.value["prior.proj.w"])  # (rows, B_stream)
        if self.bias:
            self.be.bias_add(write, self.views.value["prior.proj.b"])  # as model/layers.py's Linear adds it
        return write

    def backward(self, dwrite, saved) -> None:
        """Add the trainable parameters' gradients for dwrite (B*T, B_stream)."""
        gradient = self.views.gradient
        if self.kind == "counter":
            self.be.embedding_scatter_add(dwrite, saved, gradient["prior.signal"], dwrite.shape[0], self.stream_dim)
        else:
            self.be.matmul_into(saved, dwrite, gradient["prior.proj.w"], transpose_a=True, accumulate=True)
            if self.bias:
                self.be.add_(gradient["prior.proj.b"], self.be.sum_rows(dwrite))  # (1, B_stream)

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
