"""Central differences in float64, which the hand-written backward passes are held to.

Tolerances: central differences with step H = 1e-6 in float64 have a truncation error of about H^2 * f'''
(~1e-12) and a rounding error of about 1e-16 * |f| / H (~1e-9 for |f| ~ 10). ATOL/RTOL sit two orders of
magnitude above that, and far below the error of any real mistake (a wrong term in a backward pass is off by
O(0.01) or more).

- `numeric_grad(f, x)`: of f() with respect to every entry of an array;
- `numeric(model, f, name, index)`: of f() with respect to one entry of a model's parameter `name`;
- `assert_grad`: an analytic gradient against a numeric one;
- `make_params` and `check_layer`: a layer's input and parameter gradients under a random projection loss.
"""

from __future__ import annotations

import numpy as np

from microgpt.model.params import Parameters

H = 1e-6  # finite-difference step
ATOL = 1e-7  # see the module docstring: ~100x the finite-difference error, far below a real bug
RTOL = 1e-6


def numeric_grad(f, x: np.ndarray, h: float = H) -> np.ndarray:
    """Central differences of the scalar f() with respect to every entry of x (perturbed in place)."""
    grad = np.zeros(x.shape)
    flat = x.reshape(-1)  # a view: x is contiguous
    assert np.shares_memory(flat, x)
    for i in range(flat.size):
        old = flat[i]
        flat[i] = old + h
        f_plus = f()
        flat[i] = old - h
        f_minus = f()
        flat[i] = old
        grad.reshape(-1)[i] = (f_plus - f_minus) / (2 * h)
    return grad


def numeric(model, function, name: str, index: int) -> float:
    """Central difference of function() in entry `index` of the model's parameter `name` (restored after)."""
    values = model.params.to_host()
    original = values[name].reshape(-1)[index]
    out = []
    for step in (H, -H):
        values[name].reshape(-1)[index] = original + step
        model.params.from_host(values)
        out.append(function())
    values[name].reshape(-1)[index] = original
    model.params.from_host(values)
    return (out[0] - out[1]) / (2 * H)


def assert_grad(analytic, numeric, what: str, allow_zero: bool = False) -> None:
    """analytic == numeric within ATOL/RTOL; unless allow_zero, a check against an all-zero gradient fails."""
    analytic, numeric = np.asarray(analytic, dtype=np.float64), np.asarray(numeric)
    assert analytic.shape == numeric.shape, f"{what}: shape {analytic.shape}, expected {numeric.shape}"
    assert allow_zero or np.any(np.abs(numeric) > 1e-3), f"{what}: the numeric gradient is ~0, the check is vacuous"
    np.testing.assert_allclose(analytic, numeric, atol=ATOL, rtol=RTOL, err_msg=what)


# ---- ops ----------------------------------------------------------------------------------


def make_params(be, specs, seed: int) -> Parameters:
    """Parameters with every entry random (gammas near 1, biases non-zero), so no term hides behind a 0 or 1."""
    params = Parameters(be, specs)
    rng = np.random.default_rng(seed)
    params.data[0][:] = rng.normal(scale=0.5, size=params.total)
    for name in params.specs:
        if name.endswith(".gamma"):
            params.value[name] += 1.0
    return params


def check_layer(params: Parameters, forward, backward, x: np.ndarray, seed: int, zero_dx: bool = False) -> None:
    """forward(x) -> (out, saved); backward(dy, saved) -> dx. Loss sum(out * R) for a random R."""
    out, _ = forward(x)
    r = np.random.default_rng(seed).normal(size=out.shape)
    r_before = r.copy()
    params.zero_grad()
    out, saved = forward(x)
    dx = backward(r, saved)
    np.testing.assert_array_equal(r, r_before)  # backward must not clobber its incoming gradient
    dparams = params.to_host(params.grad)

    def loss():
        return np.sum(forward(x)[0] * r)

    assert_grad(dx, numeric_grad(loss, x), "input gradient", allow_zero=zero_dx)
    numeric_flat = numeric_grad(loss, params.data[0])
    numeric = params.to_host(numeric_flat.reshape(1, -1))
    assert set(dparams) == set(numeric)
    assert np.any(np.abs(numeric_flat) > 1e-3)  # the parameter check as a whole is not vacuous
    for name in numeric:
        # some gradients are 0 by structure (a key bias under width-1 heads only shifts a softmax row)
        assert_grad(dparams[name], numeric[name], f"gradient of {name}", allow_zero=True)
