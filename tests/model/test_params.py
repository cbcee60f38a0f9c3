"""Parameters: every named parameter and gradient is a view into the one flat buffer, so writes land there."""

from __future__ import annotations

import numpy as np

from microgpt.backends import get_backend
from microgpt.model.gpt import GPTConfig, param_specs
from microgpt.model.params import Parameters


def test_writes_through_every_value_and_gradient_land_in_the_flat_buffers():
    config = GPTConfig(vocab_size=5, d_model=6, n_layers=1, head_dims=(2, 4), d_ff=7, seq_len=4)
    params = Parameters(get_backend("numpy"), param_specs(config))
    for i, name in enumerate(params.specs):
        params.value[name][...] = i + 1
        params.gradient[name][...] = -(i + 1)
    flat_values = params.to_host()
    flat_gradients = params.to_host(params.grad)
    for i, name in enumerate(params.specs):
        np.testing.assert_array_equal(flat_values[name], i + 1)
        np.testing.assert_array_equal(flat_gradients[name], -(i + 1))
    assert np.all(params.m == 0) and np.all(params.v == 0)


def test_two_prefixed_models_share_one_store_and_keep_their_own_gradients():
    """param_specs and Layers take a prefix, so sub-models (an ensemble's experts) live in one flat store."""
    from microgpt.model.gpt import GPT
    from microgpt.model.gpt.model import Layers
    from microgpt.model.params import ParameterViews
    from microgpt.model.rope import RopeTables

    be = get_backend("numpy", dtype=np.float64)
    config = GPTConfig(vocab_size=7, d_model=6, n_layers=1, head_dims=(2, 4), d_ff=8, seq_len=5)
    alone = [GPT(config, be, seed=seed) for seed in (1, 2)]
    shared = Parameters(be, param_specs(config, "a.") + param_specs(config, "b."))
    shared.from_host({f"{p}{name}": tensor for p, model in zip(("a.", "b."), alone)
                      for name, tensor in model.params.to_host().items()})
    rope = RopeTables(be, config.seq_len)
    windows = np.random.default_rng(0).integers(0, 7, size=(3, 6))
    for prefix, model in zip(("a.", "b."), alone):
        layers = Layers(be, config, rope, ParameterViews(shared.value, shared.gradient), prefix=prefix)
        shared.zero_grad()
        model.params.zero_grad()
        assert layers.loss_and_backward(windows) == model.loss_and_backward(windows)
        grads = shared.to_host(shared.grad)
        for name, grad in model.params.to_host(model.params.grad).items():
            np.testing.assert_array_equal(grads[prefix + name], grad)  # the same numbers, in its own slice
        other = "b." if prefix == "a." else "a."
        assert all(not grads[other + name].any() for name in model.params.specs)  # the other model's untouched
