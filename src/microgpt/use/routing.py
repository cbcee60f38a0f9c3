"""Routing you can see: an ensemble's router weights and its prior's share at every position of a text.

Row p is the token at position p and how the model mixes its experts' predictions of the token after it: the
router weight of each transformer expert, 1 to n (they sum to 1, and mixing the experts' logits by them gives
the model's logits), and the share of expert 0, the prior, in what was written into the stream there (its
write's norm over the sum of every write's norm; 0 without a prior). Each position sees the context the model
samples and scores with: positions below seq_len the window from the text's start, later ones the seq_len
tokens up to them (with `stride` S, as `eval --stride` reads windows: each window gives its last S rows).
A family without a router (gpt, lookahead) has no routing: `routing_of` says so in one line.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass

import numpy as np

from microgpt.core.errors import ConfigError


@dataclass(frozen=True)
class Routing:
    tokens: list[str]  # each position's token as text ("" for a token inside a multi-byte character)
    weights: np.ndarray  # (positions, n): transformer experts 1..n, each row summing to 1
    prior: np.ndarray  # (positions,): expert 0's share of the writes into the stream
    prior_kind: str  # the prior's --prior ("none": no expert 0)

    @property
    def experts(self) -> list[str]:
        """The column names of the weights: "expert 1" .. "expert n"."""
        return [f"expert {k}" for k in range(1, self.weights.shape[1] + 1)]

    @property
    def dominant(self) -> np.ndarray:
        """(positions,) the number (1..n) of the expert with the largest weight at each position."""
        return self.weights.argmax(axis=1) + 1

    def csv_text(self) -> str:
        """One row per position: position, token, expert0_prior_share, expert1 .. expertN, dominant."""
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        n = self.weights.shape[1]
        writer.writerow(["position", "token", "expert0_prior_share", *(f"expert{k}" for k in range(1, n + 1)),
                         "dominant"])
        for p, token in enumerate(self.tokens):
            writer.writerow([p, token, f"{self.prior[p]:.6g}", *(f"{w:.6g}" for w in self.weights[p]),
                             int(self.dominant[p])])
        return out.getvalue()

    def as_json(self) -> dict:
        return {"tokens": self.tokens, "experts": self.experts, "weights": self.weights.round(6).tolist(),
                "prior": self.prior.round(6).tolist(), "prior_kind": self.prior_kind,
                "dominant": self.dominant.tolist()}


def no_routing(what: str, family_name: str) -> ConfigError:
    """The one line for a model without a router."""
    return ConfigError(f"{what} is a {family_name} model: one head predicts each position and no router mixes "
                       "experts, so it has no routing to show; its per-position predictions are "
                       "microgpt.load(DIR).logits(text) (a model trained with --cooperative SPECS has a router)")


def routing_of(model, tokenizer, ids, batch_size: int = 32, stride: int = 1, what: str = "the model",
               family_name: str = "") -> Routing:
    """The routing of host ids (n,) for a model with `routing(ids)` (the ensemble's), a window at a time."""
    if not hasattr(model, "routing"):
        raise no_routing(what, family_name or "non-ensemble")
    ids = np.asarray(ids, dtype=np.int32).reshape(-1)
    seq_len, n = model.config.seq_len, len(ids)
    if n == 0:
        raise ConfigError("the text is empty; give at least one token to route")
    if not 1 <= stride <= seq_len:
        raise ConfigError(f"the stride must be between 1 and the model's seq_len {seq_len}, got {stride}")
    first = min(seq_len, n)
    weights, prior = model.routing(ids[None, :first])  # (1, first, k), (1, first)
    weight_rows, prior_rows = [weights[0]], [prior[0]]
    lasts = np.minimum(np.arange(seq_len, n, stride) + stride, n) - 1  # the last position each later window has
    for i in range(0, len(lasts), batch_size):
        last = lasts[i : i + batch_size]  # (B,)
        windows = np.stack([ids[p - seq_len + 1 : p + 1] for p in last])  # (B, T)
        w, s = model.routing(windows)  # (B, T, k), (B, T)
        kept = np.diff(np.concatenate([[first - 1], lasts]))[i : i + batch_size]  # (B,) new rows per window
        for b, count in enumerate(kept):
            weight_rows.append(w[b, seq_len - count :])
            prior_rows.append(s[b, seq_len - count :])
    decoder = tokenizer.decoder()
    tokens = [decoder.add(int(t)) for t in ids]
    if tokens:
        tokens[-1] += decoder.flush()
    return Routing(tokens, np.concatenate(weight_rows), np.concatenate(prior_rows),
                   getattr(model.config, "prior", "none"))
