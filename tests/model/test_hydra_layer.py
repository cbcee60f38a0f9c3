"""The hydra head's layer (model/lookahead/hydra_layer.py) against central differences in float64, on the numpy
and cpu backends: the gradient of its states, of every token embedding it reads and of every parameter, under a
random projection loss (finite_differences.check_layer, its tolerances); its parameter gradients accumulate; and the
cpu backend's forward and backward agree with numpy's."""

from __future__ import annotations

import numpy as np
import pytest

from finite_differences import check_layer, make_params
from microgpt.backends import get_backend
from microgpt.model.lookahead.hydra_layer import HydraLayer, hydra_layer_specs

D, D_FF, ROWS = 5, 7, 4


def split_layer(backend, k: int, seed: int):
    """(params, forward, backward) of a hydra layer whose one input is the states and the k embeddings side by
    side (rows, (k + 1) x D), so that check_layer checks every input's gradient at once."""
    params = make_params(backend, hydra_layer_specs("hydra", D, D_FF, k), seed=seed)
    layer = HydraLayer(backend, params, "hydra", k)

    def forward(joined):
        parts = np.split(joined, k + 1, axis=1)  # k + 1 arrays (rows, D)
        return layer.forward(np.ascontiguousarray(parts[0]), [np.ascontiguousarray(p) for p in parts[1:]])

    def backward(dy, saved):
        dx, dembeddings = layer.backward(dy, saved)
        return np.concatenate([dx, *dembeddings], axis=1)  # (rows, (k + 1) x D)

    return params, forward, backward


@pytest.mark.parametrize("k", [1, 3])
def test_hydra_layer_backward(be, k):
    params, forward, backward = split_layer(be, k, seed=30 + k)
    joined = np.random.default_rng(40 + k).normal(size=(ROWS, (k + 1) * D))
    check_layer(params, forward, backward, joined, 50 + k)


def test_hydra_layer_gradients_accumulate(be):
    params, forward, backward = split_layer(be, 2, seed=60)
    rng = np.random.default_rng(61)
    joined = rng.normal(size=(ROWS, 3 * D))
    params.zero_grad()
    out, saved = forward(joined)
    r = rng.normal(size=out.shape)
    backward(r, saved)
    once = params.grad.copy()
    assert np.any(once != 0.0)
    backward(r, saved)
    np.testing.assert_allclose(params.grad, 2 * once, rtol=1e-12, atol=0)  # a float64 add of equal terms


def test_the_cpu_backend_agrees_with_numpy():
    found = []
    for name in ("numpy", "cpu"):
        params, forward, backward = split_layer(get_backend(name, dtype=np.float64), 2, seed=70)
        joined = np.random.default_rng(71).normal(size=(ROWS, 3 * D))
        params.zero_grad()
        out, saved = forward(joined)
        found.append((out, backward(np.random.default_rng(72).normal(size=out.shape), saved), params.grad.copy()))
    for got, want in zip(found[1], found[0]):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13)  # float64: rounding only
