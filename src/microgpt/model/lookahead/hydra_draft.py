"""Drafting with hydra heads (mode hydra) for speculative decoding: head k reads the trunk's state at the last
kept token and the embeddings of the next token and of the k - 1 tokens drafted before its own, so the heads
draft one after another. They mix no positions, so they keep no KV rings: only the trunk's state at the last
kept token is wanted.

On a host backend (numpy, cpu) the heads run from weights folded when the decoder is made (`HydraStack`): each
LayerNorm's gain and bias folded into the product after it (LN(x) W + b = norm(x) (gamma W) + (beta W + b)), each
token's product with its weights a row of a table (the embedding table times them: vocab x d_ff), and the
first layer's product of the state, which is the same for every head, one product for all of them. Its logits
differ from the heads' own forward in rounding only (within 1e-10 in float64, tests/model/test_hydra_draft.py); a draft
is only proposed, and the sampler checks it against the main head, which this does not touch. A GPU backend runs
each head's forward (heads.HydraHead).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from microgpt.backends.constants import LN_EPS
from microgpt.model.lookahead.draft_stack import folded
from microgpt.model.lookahead.speculative import TrunkDecoder


class HydraStack:
    """The hydra heads' weights folded on the host, and their forward for one row."""

    def __init__(self, model):
        be, config, heads = model.be, model.config, model.extra
        self.be, self.d_ff, self.vocab = be, config.d_ff, config.vocab_size
        dtype = np.dtype(be.dtype)
        table = np.asarray(model.tok_emb, dtype=np.float64)[:, : config.d_model]  # (vocab, d)

        def cast(*arrays):
            return tuple(np.ascontiguousarray(a, dtype=dtype) for a in arrays)

        folds = [[(*folded(layer.ln, (layer.state,)), np.asarray(layer.out.w), np.asarray(layer.out.b).reshape(1, -1))
                  for layer in head.blocks] for head in heads]  # per head, per layer: (state, bias, w2, b2)
        self.state_w, self.state_b, self.w2, self.b2 = cast(*(np.stack([[fold[i] for fold in layers]
                                                                         for layers in folds]) for i in range(4)))
        self.state_b, self.b2 = cast(self.state_b[:, :, 0], self.b2[:, :, 0])
        # (K, L, d, d_ff), (K, L, d_ff), (K, L, d_ff, d), (K, L, d)
        counts = [len(layer.tokens) for head in heads for layer in head.blocks]  # head k reads k tokens
        self.at = np.cumsum([0] + counts)[:-1].reshape(len(heads), config.head_layers)  # (K, L)
        self.tables = np.empty((sum(counts), config.vocab_size, config.d_ff), dtype=dtype)
        # every head's every layer's token tables (vocab, d_ff), head k's layer l's from self.at[k, l]
        for layer, at in zip([layer for head in heads for layer in head.blocks], self.at.reshape(-1)):
            for j, (w, _) in enumerate(layer.tokens):
                self.tables[at + j] = table @ np.asarray(w, dtype=np.float64)
        outs = [folded(head.final_norm, (head.out,)) for head in heads]
        self.out_w, self.out_b = cast(np.stack([w for w, _ in outs]), np.concatenate([b for _, b in outs]))
        # (K, d, vocab), (K, vocab)
        self.heads = [[(self.state_w[k, i], self.state_b[k, i], list(self.tables[at : at + k + 1]), self.w2[k, i],
                        self.b2[k, i]) for i, at in enumerate(self.at[k])] for k in range(len(heads))]
        # per head, per layer, views of the above: (state, bias, [token tables], w2, b2)
        self.first = (np.concatenate(list(self.state_w[:, 0]), axis=1), self.state_b[:, 0].reshape(1, -1))
        # every head's first product of the state side by side: (d, K x d_ff), (1, K x d_ff)
        self.unit = (np.ones((1, config.d_model), dtype=dtype), np.zeros((1, config.d_model), dtype=dtype))
        kernels = getattr(be, "kernels", None)  # the cpu backend's compiled kernels: a call for all heads or one
        self.kernels = None if kernels is None else kernels.hydra_draft
        self.eps = dtype.type(LN_EPS)

    def normalize(self, x: np.ndarray) -> np.ndarray:
        """LayerNorm without gain or bias over the rows of x (rows, d)."""
        return self.be.layer_norm_forward(x, *self.unit)[0]

    def draft(self, x: np.ndarray, token: int, count: int, pick) -> tuple[list[int], np.ndarray]:
        """(count drafts, their host logits (count, vocab)) after the trunk's state x (1, d) at the last kept
        token, `token` being the next one; pick None takes each head's argmax. On the cpu backend the heads run in
        compiled kernels (backends/cpu_kernels/hydra_draft.py); this loop is their specification."""
        found = np.empty((count, self.vocab), dtype=x.dtype)  # (count, vocab)
        if self.kernels is not None:
            return self.kernel_draft(np.ascontiguousarray(x[0]), token, count, pick, found)
        weights, bias = self.first
        firsts = self.normalize(x) @ weights  # (1, K x d_ff)
        firsts += bias
        tokens = [token]
        for k, layers in enumerate(self.heads[:count]):
            y = x
            for i, (state, state_b, tables, w2, b2) in enumerate(layers):
                if i == 0:
                    pre = firsts[:, k * self.d_ff : (k + 1) * self.d_ff]  # (1, d_ff), this head's alone
                else:
                    pre = self.normalize(y) @ state  # (1, d_ff)
                    pre += state_b
                for t, table in zip(tokens, tables):
                    pre += table[t]
                np.maximum(pre, 0, out=pre)
                y = y + pre @ w2  # (1, d)
                y += b2
            logits = self.normalize(y) @ self.out_w[k]  # (1, vocab)
            logits += self.out_b[k]
            found[k] = logits[0]
            tokens.append(int(np.argmax(found[k])) if pick is None else pick(found[k]))
        return tokens[1:], found

    def kernel_draft(self, x: np.ndarray, token: int, count: int, pick, found: np.ndarray):
        """draft's on the cpu backend, for x (d,), into found: with pick None every head in one kernel call, else
        one call a head, pick choosing each draft between them."""
        weights = (self.state_w, self.state_b, self.tables, self.at, self.w2, self.b2, self.out_w, self.out_b,
                   self.eps)
        tokens = np.empty(count + 1, dtype=np.int64)
        tokens[0] = token
        if pick is None:
            self.kernels.greedy_drafts(x, int(token), count, *weights, tokens[1:], found)
        else:
            for k in range(count):
                self.kernels.head_logits(x, tokens, k, *weights, found[k])
                tokens[k + 1] = pick(found[k])
        return tokens[1:].tolist(), found


class HydraDecoder(TrunkDecoder):
    """The trunk's rings, and the hydra heads, which draft one after another from the trunk's state at the last
    kept token."""

    def __init__(self, model, folded_weights: bool | None = None):
        """`folded_weights`: the heads as a HydraStack; by default on a host backend, not on a GPU."""
        super().__init__(model)
        folded_weights = not model.be.on_gpu if folded_weights is None else folded_weights
        self.stack = HydraStack(model) if folded_weights else None

    def catch_up(self) -> None:
        self.kept_states()  # the heads keep nothing of the tokens before the last one kept

    def draft(self, token: int, count: int, pick: Callable[[np.ndarray], int] | None) -> tuple[list[int], np.ndarray]:
        """(count drafts, their heads' host logits (count, vocab)) for the tokens after `token`, the next one, which
        follows the last token kept: head k's draft is pick(head k's logits) (pick None: their argmax), the token k
        after `token`, head k reading `token` and the k - 1 drafts before its own."""
        x = self.kept_states()[-1:]  # (1, d)
        if self.stack is not None:
            return self.stack.draft(x, token, count, pick)
        be, model, d = self.model.be, self.model, self.model.config.d_model
        embeddings, tokens, found = [], [token], []
        for head in model.extra[:count]:
            embeddings.append(be.embedding_gather(model.tok_emb, be.ids(np.array(tokens[-1:], dtype=np.int32)), 1,
                                                  d))  # (1, d): the token before the one this head drafts
            logits = be.to_host(head.forward(x, embeddings, 1, 1)[0])[0]  # (vocab,)
            found.append(logits)
            tokens.append(int(np.argmax(logits)) if pick is None else pick(logits))
        return tokens[1:], np.stack(found)
