"""Parameters: every named parameter and gradient is a view into the one flat buffer, so writes land there."""

from __future__ import annotations

from dataclasses import replace

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


def test_a_prefix_names_a_sub_models_parameters_as_they_are_without_it():
    """param_specs takes a prefix (the family protocol's), so several sub-models can share one flat store."""
    config = GPTConfig(vocab_size=7, d_model=6, n_layers=1, head_dims=(2, 4), d_ff=8, seq_len=5)
    plain = param_specs(config)
    assert param_specs(config, "a.") == [replace(spec, name="a." + spec.name) for spec in plain]
    shared = Parameters(get_backend("numpy"), param_specs(config, "a.") + param_specs(config, "b."))
    assert shared.total == 2 * sum(spec.size for spec in plain)
