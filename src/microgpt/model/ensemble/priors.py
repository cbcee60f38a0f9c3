"""The ensemble's algorithmic expert 0: a prior that writes into the stream alone (no logits, not routed).

- `counter`: a learned seq_len x B signal, row t written at position t;
- `bigram`, `trigram`, `calculator`: the features of model/priors.py (a next-token table counted once from the
  training tokens, `learn_from`, kept as non-trainable parameters; or the next character of a sum), which a
  learned projection (vocab x B, and a bias) writes into the stream.

The projection starts as the original's does: He init, N(0, 2/V), and a zero bias. Every feature at position
t reads the tokens at positions <= t only.
"""

from __future__ import annotations

import math

import numpy as np

from microgpt.model.params import ParameterViews, ParamSpec
from microgpt.model.priors import (
    OLD_PROJECTION_STD,
    calculator_rows,
    check_calculator_tokenizer,
    window_features,
)


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


class Prior:
    """The prior's write into the stream, bound to one set of gradient buffers."""

    def __init__(self, backend, views: ParameterViews, kind: str, vocab: int, stream_dim: int, tokenizer):
        self.be, self.kind, self.vocab, self.stream_dim = backend, kind, vocab, stream_dim
        self.views = views
        self.bias = "prior.proj.b" in views.value
        self.ids_of = check_calculator_tokenizer(tokenizer) if kind == "calculator" else None

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
        features = window_features(be, self.kind, value.get("prior.table"), ids, ids_host, self.vocab,
                                   self.ids_of)  # (B*T, V)
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
            features = be.from_host(calculator_rows(context[None, :], self.ids_of, self.vocab, be.dtype)[start:])
        return self._project(features), features

    def _project(self, features):
        """features @ W (+ b): the write (rows, B_stream) of features (rows, V)."""
        write = self.be.matmul(features, self.views.value["prior.proj.w"])  # (rows, B_stream)
        if self.bias:
            self.be.bias_add(write, self.views.value["prior.proj.b"])  # as model/transformer.py's Linear adds it
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
