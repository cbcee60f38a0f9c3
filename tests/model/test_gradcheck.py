"""Hand-written backward passes against central finite differences, in float64.

Three levels, each on the NumPy backend and on the cpu backend (numba's kernels), both in float64
(`get_backend(name, dtype=np.float64)`):
- ops: every backward op of docs/ops.md (softmax, fused attention softmax, layer
  norm incl. dgamma/dbeta, ReLU, RoPE's inverse as the transpose of RoPE, the
  fused cross-entropy gradient, embedding scatter-add as the adjoint of gather),
  and causal and gap attention's backward;
- layers: Linear, LayerNorm, FeedForward, Attention (equal, unequal, odd and
  width-1 heads) and Block, each under a random projection loss sum(out * R),
  checking the returned input gradient and every accumulated parameter gradient;
- the whole GPT: every entry of every parameter's gradient from
  `loss_and_backward` against central differences of its loss, and gradients
  accumulating (two backward passes give twice the gradient).

The differences, their tolerances and the layer check are tests/finite_differences.py's.
"""

from __future__ import annotations

import numpy as np
import pytest

from finite_differences import assert_grad, check_layer, make_params, numeric_grad
from microgpt.model.gpt import GPTConfig
from microgpt.model.rope import RopeTables, rope_tables
from microgpt.model.transformer import (
    GPT,
    Attention,
    Block,
    FeedForward,
    LayerNorm,
    Linear,
    layer_norm_specs,
    linear_specs,
)

# ---- ops ----------------------------------------------------------------------------------


@pytest.mark.parametrize("rows,cols", [(1, 1), (3, 7), (2, 33)])
def test_softmax_backward(be, rows, cols):
    rng = np.random.default_rng(0)
    x = rng.normal(scale=2.0, size=(rows, cols))
    r = rng.normal(size=(rows, cols))
    analytic = be.softmax_backward(be.softmax_rows(x), r)
    numeric = numeric_grad(lambda: np.sum(be.softmax_rows(x) * r), x)
    assert_grad(analytic, numeric, "softmax_backward", allow_zero=cols == 1)  # one column: softmax is 1


@pytest.mark.parametrize("blocks,t,scale", [(1, 1, 1.0), (3, 4, 0.6), (2, 7, 1 / np.sqrt(3))])
def test_fused_attn_softmax_backward(be, blocks, t, scale):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(blocks * t, t))
    r = rng.normal(size=(blocks * t, t))
    analytic = be.fused_attn_softmax_backward(be.fused_attn_softmax(x, scale), r, scale)
    numeric = numeric_grad(lambda: np.sum(be.fused_attn_softmax(x, scale) * r), x)
    assert_grad(analytic, numeric, "fused_attn_softmax_backward", allow_zero=t == 1)  # one position: prob 1
    future = np.arange(t)[None, :] > (np.arange(blocks * t) % t)[:, None]
    np.testing.assert_array_equal(analytic[future], 0.0)  # masked scores get no gradient


@pytest.mark.parametrize("n,t,w", [(1, 1, 2), (2, 4, 3), (1, 6, 1)])
def test_causal_attention_backward(be, n, t, w):
    rng = np.random.default_rng(5)
    q, k, v = (rng.normal(size=(n, t, w)) for _ in range(3))
    r = rng.normal(size=(n, t, w))
    scale = 0.7

    def f():
        return np.sum(be.causal_attention(q, k, v, scale)[0] * r)

    _, saved = be.causal_attention(q, k, v, scale)
    dq, dk, dv = be.causal_attention_backward(r, saved, scale)
    assert_grad(dq, numeric_grad(f, q), "causal_attention dq", allow_zero=t == 1)  # one key: q has no effect
    assert_grad(dk, numeric_grad(f, k), "causal_attention dk", allow_zero=t == 1)
    assert_grad(dv, numeric_grad(f, v), "causal_attention dv")


# (heads, T, width, gap): one position; a gap of 1 and of 2 with keys seen after it; a gap past the end (causal)
@pytest.mark.parametrize("n,t,w,gap", [(1, 1, 2, 1), (2, 4, 3, 1), (1, 6, 1, 2), (2, 5, 2, 3), (1, 3, 3, 5)])
def test_gap_attention_backward(be, n, t, w, gap):
    rng = np.random.default_rng(7)
    q, k, v = (rng.normal(size=(n, t, w)) for _ in range(3))
    r = rng.normal(size=(n, t, w))
    scale = 0.7

    def f():
        return np.sum(be.gap_attention(q, k, v, scale, gap)[0] * r)

    _, saved = be.gap_attention(q, k, v, scale, gap)
    dq, dk, dv = be.gap_attention_backward(r, saved, scale, gap)
    assert_grad(dq, numeric_grad(f, q), "gap_attention dq", allow_zero=t == 1)  # one key: q has no effect
    assert_grad(dk, numeric_grad(f, k), "gap_attention dk", allow_zero=t == 1)
    assert_grad(dv, numeric_grad(f, v), "gap_attention dv")


@pytest.mark.parametrize("rows,cols", [(1, 1), (4, 5), (3, 33)])
def test_layer_norm_backward(be, rows, cols):
    rng = np.random.default_rng(2)
    x = rng.normal(loc=1.0, size=(rows, cols))
    gamma = rng.normal(loc=1.0, size=(1, cols))
    beta = rng.normal(size=(1, cols))
    r = rng.normal(size=(rows, cols))

    def loss():
        return np.sum(be.layer_norm_forward(x, gamma, beta)[0] * r)

    _, norm, std_inv = be.layer_norm_forward(x, gamma, beta)
    dx, dgamma, dbeta = be.layer_norm_backward(r, norm, std_inv, gamma)
    # one column: norm is 0 whatever x is, so dx and dgamma are 0 by structure
    assert_grad(dx, numeric_grad(loss, x), "layer_norm dx", allow_zero=cols == 1)
    assert_grad(dgamma, numeric_grad(loss, gamma), "layer_norm dgamma", allow_zero=cols == 1)
    assert_grad(dbeta, numeric_grad(loss, beta), "layer_norm dbeta")


def test_relu_backward(be):
    rng = np.random.default_rng(3)
    x = rng.normal(size=(4, 9))
    x[np.abs(x) < 0.01] = 0.5  # keep every entry away from the kink at 0 (central differences step over it)
    r = rng.normal(size=(4, 9))
    _, mask = be.relu_forward(x)
    assert_grad(be.relu_backward(r, mask), numeric_grad(lambda: np.sum(be.relu_forward(x)[0] * r), x), "relu")


@pytest.mark.parametrize("dim,rows,n_cache", [(8, 12, 4), (5, 7, 3), (1, 4, 2), (3, 1, 1)])
def test_rope_inverse_is_the_transpose_of_rope(be, dim, rows, n_cache):
    """rope_apply is linear in x, so its backward is its transpose; the spec says that is rope_apply_inverse."""
    rng = np.random.default_rng(4)
    cos, sin = rope_tables(dim, n_cache + 3, first_position=2)
    cos, sin = cos[1 : 1 + n_cache], sin[1 : 1 + n_cache]  # a slice, as the model passes
    x = rng.normal(size=(rows, dim))
    r = rng.normal(size=(rows, dim))

    def loss():
        y = x.copy()
        be.rope_apply(y, cos, sin)
        return np.sum(y * r)

    back = r.copy()
    be.rope_apply_inverse(back, cos, sin)
    assert_grad(back, numeric_grad(loss, x), "rope_apply_inverse")
    # the adjoint identity <rope(x), r> = <x, rope_inverse(r)>, exactly what a transpose means
    assert loss() == pytest.approx(np.sum(x * back), rel=1e-12, abs=1e-12)  # float64 sums of ~100 terms


@pytest.mark.parametrize("rows,cols", [(1, 1), (1, 5), (6, 7)])
def test_fused_softmax_ce_grad_dlogits(be, rows, cols):
    rng = np.random.default_rng(5)
    logits = rng.normal(scale=2.0, size=(rows, cols))
    targets = be.ids(rng.integers(0, cols, size=rows))
    _, dlogits = be.fused_softmax_ce_grad(logits, targets)
    numeric = numeric_grad(lambda: be.fused_softmax_ce_grad(logits, targets)[0], logits)
    if cols == 1:  # the loss is identically 0: the gradient must be 0 too
        np.testing.assert_allclose(dlogits, 0.0, atol=1e-15)
        np.testing.assert_allclose(numeric, 0.0, atol=1e-15)
    else:
        assert_grad(dlogits, numeric, "fused_softmax_ce_grad")


def test_embedding_scatter_add_is_the_adjoint_of_gather(be):
    rng = np.random.default_rng(6)
    vocab, d = 5, 4
    ids = be.ids(np.array([2, 0, 2, 4, 2, 0]))  # repeats; id 1 and 3 never
    table = rng.normal(size=(vocab, d))
    r = rng.normal(size=(len(ids), d))
    d_table = np.zeros((vocab, d))
    be.embedding_scatter_add(r, ids, d_table, len(ids), d)
    numeric = numeric_grad(lambda: np.sum(be.embedding_gather(table, ids, len(ids), d) * r), table)
    assert_grad(d_table, numeric, "embedding_scatter_add")
    np.testing.assert_array_equal(d_table[[1, 3]], 0.0)


# ---- layers -------------------------------------------------------------------------------


def test_linear_backward(be):
    params = make_params(be, linear_specs("lin", 5, 3), seed=10)
    layer = Linear(be, params, "lin")
    x = np.random.default_rng(11).normal(size=(4, 5))
    check_layer(params, lambda x: (layer.forward(x), x), lambda dy, x_saved: layer.backward(dy, x_saved), x, 12)


@pytest.mark.parametrize("cols", [1, 6])
def test_layer_norm_layer_backward(be, cols):
    params = make_params(be, layer_norm_specs("ln", cols), seed=13)
    layer = LayerNorm(be, params, "ln")
    x = np.random.default_rng(14).normal(size=(5, cols))
    check_layer(params, layer.forward, layer.backward, x, 15, zero_dx=cols == 1)  # one column: out = beta


def test_feed_forward_backward(be):
    params = make_params(be, FeedForward.specs("ff", 6, 5), seed=16)
    layer = FeedForward(be, params, "ff")
    x = np.random.default_rng(17).normal(size=(4, 6))
    check_layer(params, layer.forward, layer.backward, x, 18)


HEAD_LAYOUTS = {
    "equal": (4, 4),
    "unequal": (1, 3, 2, 2),
    "odd": (3, 5, 1),
    "width-1": (1, 1, 1),
    "mixed-groups": (2, 3, 3, 2),
}


@pytest.mark.parametrize("layout", sorted(HEAD_LAYOUTS))
@pytest.mark.parametrize("batch,seq_len", [(2, 5), (1, 1), (3, 2)])
def test_attention_backward(be, layout, batch, seq_len):
    head_dims = HEAD_LAYOUTS[layout]
    d = sum(head_dims)
    params = make_params(be, Attention.specs("attn", d), seed=19)
    attn = Attention(be, params, "attn", head_dims, RopeTables(be, seq_len))
    x = np.random.default_rng(20).normal(size=(batch * seq_len, d))
    check_layer(
        params,
        lambda x: attn.forward(x, batch, seq_len),
        lambda dy, saved: attn.backward(dy, saved, batch, seq_len),
        x,
        21,
    )


def block_specs(name: str, config: GPTConfig):
    d = config.d_model
    return (
        layer_norm_specs(f"{name}.ln1", d)
        + Attention.specs(f"{name}.attn", d)
        + layer_norm_specs(f"{name}.ln2", d)
        + FeedForward.specs(f"{name}.ff", d, config.d_ff)
    )


@pytest.mark.parametrize("head_dims", [(1, 3, 2, 2), (4, 4)])
def test_block_backward(be, head_dims):
    config = GPTConfig(vocab_size=7, d_model=8, n_layers=1, head_dims=head_dims, d_ff=5, seq_len=6)
    batch, seq_len = 2, 4  # shorter than config.seq_len: the RoPE tables are sliced
    params = make_params(be, block_specs("blk", config), seed=22)
    block = Block(be, params, "blk", config.head_dims, RopeTables(be, config.seq_len))
    x = np.random.default_rng(23).normal(size=(batch * seq_len, 8))
    check_layer(
        params,
        lambda x: block.forward(x, batch, seq_len),
        lambda dy, saved: block.backward(dy, saved, batch, seq_len),
        x,
        24,
    )


@pytest.mark.parametrize("make", ["linear", "feed_forward", "attention"])
def test_layer_parameter_gradients_accumulate(be, make):
    rng = np.random.default_rng(25)
    if make == "linear":
        params = make_params(be, linear_specs("lin", 5, 3), seed=26)
        layer = Linear(be, params, "lin")
        x = rng.normal(size=(4, 5))
        forward, backward = (lambda: (layer.forward(x), x)), layer.backward
    elif make == "feed_forward":
        params = make_params(be, FeedForward.specs("ff", 6, 5), seed=26)
        layer = FeedForward(be, params, "ff")
        x = rng.normal(size=(4, 6))
        forward, backward = (lambda: layer.forward(x)), layer.backward
    else:
        params = make_params(be, Attention.specs("attn", 8), seed=26)
        layer = Attention(be, params, "attn", (1, 3, 4), RopeTables(be, 3))
        x = rng.normal(size=(6, 8))
        forward = lambda: layer.forward(x, 2, 3)
        backward = lambda dy, saved: layer.backward(dy, saved, 2, 3)
    params.zero_grad()
    out, saved = forward()
    r = rng.normal(size=out.shape)
    backward(r, saved)
    once = params.grad.copy()
    assert np.any(once != 0.0)
    backward(r, saved)
    np.testing.assert_allclose(params.grad, 2 * once, rtol=1e-12, atol=0)  # a float64 add of equal terms


# ---- the whole GPT ------------------------------------------------------------------------


def tiny_gpt(be, head_dims, seed: int) -> GPT:
    config = GPTConfig(vocab_size=7, d_model=8, n_layers=2, head_dims=head_dims, d_ff=5, seq_len=6)
    model = GPT(config, be, seed=seed)
    rng = np.random.default_rng(seed + 1)
    model.params.data[0][:] += rng.normal(scale=0.3, size=model.n_params)  # gammas off 1, biases off 0
    return model


def cross_entropy(model: GPT, windows: np.ndarray) -> float:
    """Mean next-token loss from model.logits, computed here in float64."""
    logits = model.be.to_host(model.logits(windows[:, :-1])).astype(np.float64)
    targets = windows[:, 1:].reshape(-1)
    m = logits.max(axis=1)
    lse = m + np.log(np.exp(logits - m[:, None]).sum(axis=1))
    return float(np.mean(lse - logits[np.arange(len(targets)), targets]))


@pytest.mark.parametrize("head_dims,seq_len", [((1, 3, 2, 2), 6), ((4, 4), 4)])
def test_gpt_every_parameter_gradient(be, head_dims, seq_len):
    model = tiny_gpt(be, head_dims, seed=30)
    windows = np.random.default_rng(31).integers(0, 7, size=(2, seq_len + 1))  # batch 2, repeated ids
    before = model.params.data.copy()
    model.params.zero_grad()
    loss, _ = model.loss_and_backward(windows)
    np.testing.assert_array_equal(model.params.data, before)  # backward leaves the weights alone
    assert loss == pytest.approx(cross_entropy(model, windows), rel=1e-12)  # float64 both ways
    analytic = model.params.grad[0].copy()

    numeric = numeric_grad(lambda: model.loss_and_backward(windows)[0], model.params.data[0])
    grads = model.params.to_host(analytic.reshape(1, -1))
    numerics = model.params.to_host(numeric.reshape(1, -1))
    for name in numerics:
        # the key bias of a width-1 head shifts a softmax row by a constant: its gradient is 0 by structure
        assert_grad(grads[name], numerics[name], f"gradient of {name}", allow_zero=True)
    assert np.count_nonzero(np.abs(numeric) > 1e-6) > 0.8 * model.n_params  # the check is not vacuous
    # every id in the windows' inputs gets an embedding gradient; ids never seen as inputs get none
    unseen = sorted(set(range(7)) - set(windows[:, :-1].reshape(-1).tolist()))
    np.testing.assert_array_equal(grads["tok_emb"][unseen], 0.0)


def test_gpt_gradients_accumulate_and_zero_grad_clears(be):
    model = tiny_gpt(be, (1, 3, 2, 2), seed=32)
    windows = np.random.default_rng(33).integers(0, 7, size=(2, 7))
    model.params.zero_grad()
    model.loss_and_backward(windows)
    once = model.params.grad.copy()
    assert np.count_nonzero(once) > 0.9 * once.size  # nearly every parameter has a gradient
    model.loss_and_backward(windows)
    np.testing.assert_allclose(model.params.grad, 2 * once, rtol=1e-12, atol=1e-300)  # float64 2x, same terms
    model.params.zero_grad()
    np.testing.assert_array_equal(model.params.grad, 0.0)
