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

from microgpt.model.lookahead.draft_stack import folded
from microgpt.model.lookahead.speculative import TrunkDecoder


class HydraStack:
    """The hydra heads' weights folded on the host, and their forward for one row."""

    def __init__(self, model):
        be, config, heads = model.be, model.config, model.extra
        self.be, self.d_ff, self.vocab = be, config.d_ff, config.vocab_size
        dtype = be.dtype
        table = np.asarray(model.tok_emb, dtype=np.float64)[:, : config.d_model]  # (vocab, d)

        def cast(*arrays):
            return tuple(np.ascontiguousarray(a, dtype=dtype) for a in arrays)

        self.heads = []  # per head, per layer: (state (d, d_ff), bias (1, d_ff), [token tables (vocab, d_ff)], w2, b2)
        for head in heads:
            layers = []
            for layer in head.blocks:
                state, bias = folded(layer.ln, (layer.state,))  # (d, d_ff), (1, d_ff)
                tables = [cast(table @ np.asarray(w, dtype=np.float64))[0] for w, _ in layer.tokens]  # (vocab, d_ff)
                w2, b2 = cast(np.asarray(layer.out.w), np.asarray(layer.out.b).reshape(1, -1))
                layers.append((*cast(state, bias), tables, w2, b2))
            self.heads.append((layers, cast(*folded(head.final_norm, (head.out,)))))
        firsts = [layers[0] for layers, _ in self.heads]
        self.first = (np.concatenate([f[0] for f in firsts], axis=1), np.concatenate([f[1] for f in firsts], axis=1))
        # every head's first product of the state side by side: (d, K x d_ff), (1, K x d_ff)
        self.unit = (np.ones((1, config.d_model), dtype=dtype), np.zeros((1, config.d_model), dtype=dtype))

    def normalize(self, x: np.ndarray) -> np.ndarray:
        """LayerNorm without gain or bias over the rows of x (rows, d)."""
        return self.be.layer_norm_forward(x, *self.unit)[0]

    def draft(self, x: np.ndarray, token: int, count: int, pick) -> tuple[list[int], np.ndarray]:
        """(count drafts, their host logits (count, vocab)) after the trunk's state x (1, d) at the last kept
        token, `token` being the next one."""
        weights, bias = self.first
        firsts = self.normalize(x) @ weights  # (1, K x d_ff)
        firsts += bias
        tokens, found = [token], np.empty((count, self.vocab), dtype=x.dtype)  # (count, vocab)
        for k, (layers, (out_w, out_b)) in enumerate(self.heads[:count]):
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
            logits = self.normalize(y) @ out_w  # (1, vocab)
            logits += out_b
            found[k] = logits[0]
            tokens.append(pick(found[k]))
        return tokens[1:], found


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

    def draft(self, token: int, count: int, pick: Callable[[np.ndarray], int]) -> tuple[list[int], np.ndarray]:
        """(count drafts, their heads' host logits (count, vocab)) for the tokens after `token`, the next one, which
        follows the last token kept: head k's draft is pick(head k's logits), the token k after `token`, head k
        reading `token` and the k - 1 drafts before its own."""
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
            tokens.append(pick(logits))
        return tokens[1:], np.stack(found)
