"""No head of any family sees the token it is asked to predict: perturbing the input at a head's target, or at
any position the head must not see (`HeadLogits.hidden`, model/heads.py), never changes that head's logits at
that position. Checked for every head of every registered family and mode (tests/family_shapes.py).

The check is shown to catch the original µGPT's lookahead heads: a "zebra" head that hides the k positions
after t but predicts the token at t + k + 1, and the "future" head whose mask lets t see t + 1, the token it
predicts (docs/lookahead.md). Both are built here from the masks alone, in plain numpy.
"""

from __future__ import annotations

import numpy as np
import pytest

from family_shapes import GRAPH_HEADS, TINY, VARIANTS, VOCAB
from head_leaks import leaks
from microgpt.backends import get_backend
from microgpt.core.registry import FAMILIES
from microgpt.data.tokenizer import CharTokenizer
from microgpt.model.family import family
from microgpt.model.heads import HeadLogits, heads_of


def family_heads(name: str, shape: dict):
    kind = family(name)
    be = get_backend("numpy", dtype=np.float64)
    model = kind.build(kind.Config(vocab_size=VOCAB, **shape), be, CharTokenizer("abcdefghijk"), 3)
    rng = np.random.default_rng(1)
    model.params.from_host({n: v + rng.normal(0, 0.3, v.shape) for n, v in model.params.to_host().items()})
    return lambda ids: [HeadLogits(h.name, h.offset, h.hidden, be.to_host(h.logits)) for h in heads_of(model, ids)]


def test_every_family_is_checked():
    assert set(FAMILIES) <= set(TINY) and {name for name, _ in VARIANTS} == set(TINY)


@pytest.mark.parametrize(("name", "shape"), VARIANTS)
def test_no_head_sees_its_target(name, shape):
    heads = family_heads(name, shape)
    ids = np.random.default_rng(2).integers(0, VOCAB, size=(2, shape["seq_len"]))  # (B, T)
    expected = GRAPH_HEADS if name == "graph" else 1 + shape.get("lookahead", 0)
    assert len(heads(ids)) == expected  # every head is looked at
    assert leaks(heads, ids) == []


def test_gap_heads_do_see_past_their_gap():
    """The check is not passed by heads that see nothing: a gap head's logits at t move with the tokens at
    t + k + 1 and later, its right context."""
    shape = {**TINY["lookahead"], "lookahead_mode": "gap"}
    heads = family_heads("lookahead", shape)
    ids = np.random.default_rng(3).integers(0, VOCAB, size=(2, shape["seq_len"]))  # (B, T)
    before = {h.name: h.logits.reshape(2, shape["seq_len"], -1) for h in heads(ids)}
    for k in range(1, shape["lookahead"] + 1):
        changed = ids.copy()
        changed[:, k + 1] = (ids[:, k + 1] + 1) % VOCAB  # position 0's first token after its gap
        after = heads(changed)[k].logits.reshape(2, shape["seq_len"], -1)
        assert not np.allclose(after[:, 0], before[f"lookahead {k}"][:, 0])


class MaskedHead:
    """One attention layer over token embeddings under an explicit (T, T) mask (True: key seen), then an output
    layer: enough to show what a mask lets a head read."""

    def __init__(self, mask: np.ndarray, seed: int = 0, width: int = 8):
        rng = np.random.default_rng(seed)
        self.mask = mask
        self.emb = rng.normal(size=(VOCAB, width))  # (V, d)
        self.wq, self.wk, self.wv = (rng.normal(size=(width, width)) for _ in range(3))  # each (d, d)
        self.out = rng.normal(size=(width, VOCAB))  # (d, V)

    def logits(self, ids: np.ndarray) -> np.ndarray:
        x = self.emb[ids]  # (B, T, d)
        scores = (x @ self.wq) @ (x @ self.wk).transpose(0, 2, 1)  # (B, T, T)
        scores = np.where(self.mask, scores, -np.inf)
        probs = np.exp(scores - scores.max(axis=2, keepdims=True))
        probs /= probs.sum(axis=2, keepdims=True)  # (B, T, T)
        return (probs @ (x @ self.wv)) @ self.out  # (B, T, V)


def zebra_mask(seq_len: int, k: int) -> np.ndarray:
    """The original's mask for lookahead head k: position t sees j <= t and j >= t + k + 1."""
    after = np.arange(seq_len)[None, :] - np.arange(seq_len)[:, None]  # (T, T): j - t
    return (after <= 0) | (after >= k + 1)


@pytest.mark.parametrize("k", [1, 2])
def test_the_check_catches_the_originals_zebra_heads(k):
    """Head k of the original predicts the token at t + k + 1, which its zebra mask leaves visible."""
    seq_len = 9
    head = MaskedHead(zebra_mask(seq_len, k))
    ids = np.random.default_rng(4).integers(0, VOCAB, size=(2, seq_len))

    def heads(x):
        return [HeadLogits(f"zebra {k}", k + 1, (1, k), head.logits(x).reshape(-1, VOCAB))]

    found = leaks(heads, ids)
    assert found and {offset for _, _, offset in found} == {k + 1}  # the target, and only it
    # the same mask with our pairing (the target at t + 1, inside the gap) passes
    assert leaks(lambda x: [HeadLogits("gap", 1, (1, k), head.logits(x).reshape(-1, VOCAB))], ids) == []


def test_the_check_catches_the_originals_future_head():
    """--lookahead -1's future head: an anti-causal mask (t sees j >= t) and the target at t + 1."""
    seq_len = 9
    after = np.arange(seq_len)[None, :] - np.arange(seq_len)[:, None]  # (T, T)
    head = MaskedHead(after >= 0)
    ids = np.random.default_rng(5).integers(0, VOCAB, size=(2, seq_len))
    found = leaks(lambda x: [HeadLogits("future", 1, (1, None), head.logits(x).reshape(-1, VOCAB))], ids)
    assert (("future", 0, 1)) in found


def test_hydra_heads_do_see_the_tokens_before_their_target():
    """A hydra head k's logits at t move with each token at t + 1 .. t + k, the tokens it is given."""
    shape = {**TINY["lookahead"], "lookahead_mode": "hydra"}
    heads = family_heads("lookahead", shape)
    ids = np.random.default_rng(3).integers(0, VOCAB, size=(2, shape["seq_len"]))  # (B, T)
    before = {h.name: h.logits.reshape(2, shape["seq_len"], -1) for h in heads(ids)}
    for k in range(1, shape["lookahead"] + 1):
        for j in range(1, k + 1):
            changed = ids.copy()
            changed[:, j] = (ids[:, j] + 1) % VOCAB  # position 0's token j after it
            after = heads(changed)[k].logits.reshape(2, shape["seq_len"], -1)
            assert not np.allclose(after[:, 0], before[f"lookahead {k}"][:, 0]), (k, j)
