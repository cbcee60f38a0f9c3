"""Building a graph model from a test case and checking its gradients, for test_graph_ops.py and
test_graph_random.py.

The objective a graph trains is the sum of its losses, each times its cross_entropy node's `weight`;
`objective` reads the losses from what loss_and_backward returns (the main loss and the
others by metric name) and weights them from the program. `check_gradients` holds the analytic gradient
(params.grad after one loss_and_backward) against central differences of that objective: on a sample of
coordinates of every parameter, and along one random direction through all of them at once (which sees
every coordinate, sampled or not).

Tolerances (float64 on the NumPy backend): central differences with step H = 1e-6 have a truncation error
of about H^2 |f'''| (~1e-12 for these O(1) objectives) and a rounding error of about 1e-16 |f| / H (~1e-9
for |f| ~ 3, a little more where a pass sums hundreds of terms). ATOL = 1e-7 and RTOL = 1e-6 sit two orders
of magnitude above that and far below the error of a wrong backward (a missing or doubled term is off by
O(1e-3) or more on these shapes).
"""

from __future__ import annotations

import numpy as np

from microgpt.data.tokenizer import CharTokenizer
from microgpt.model.family import family
from microgpt.model.graph.model import GraphModel

H = 1e-6  # finite-difference step
ATOL = 1e-7  # see the module docstring: ~100x the finite-difference error, far below a real bug
RTOL = 1e-6


def case_document(result, default_seq_len: int) -> tuple[dict, int]:
    """(document, seq_len) of what a case function returns: a document, or a (document, seq_len) pair."""
    if isinstance(result, tuple):
        document, seq_len = result
        return document, seq_len
    return result, default_seq_len


def build(document: dict, seq_len: int, chars: str, backend, seed: int = 0, sound: bool = True):
    """The graph family's model of the document, for a char tokenizer of `chars` (its vocabulary);
    `sound=False` builds it past the family's causality check, for a graph that sees the future on purpose
    (an op test of the full and anticausal masks)."""
    kind = family("graph")
    config = kind.Config(vocab_size=len(chars), graph=document, seq_len=seq_len)
    tokenizer = CharTokenizer(chars)
    if not sound:
        return GraphModel(config, config.program, backend, tokenizer, seed)
    return kind.build(config, backend, tokenizer, seed)


def perturbed_weights(model, seed: int, scale: float = 0.3) -> dict[str, np.ndarray]:
    """The model's initial weights plus N(0, scale^2) noise in float64, so no bias sits at 0 and no gamma at 1."""
    rng = np.random.default_rng(seed)
    return {name: value.astype(np.float64) + rng.normal(scale=scale, size=value.shape)
            for name, value in model.params.to_host().items()}


def perturb(model, seed: int, scale: float = 0.3) -> dict[str, np.ndarray]:
    weights = perturbed_weights(model, seed, scale)
    model.params.from_host(weights)
    return weights


def random_windows(vocab: int, seq_len: int, batch: int, seed: int) -> np.ndarray:
    """(batch, seq_len + 1) token ids, the loss's windows."""
    return np.random.default_rng(seed).integers(0, vocab, size=(batch, seq_len + 1))


def loss_weights(model) -> list[tuple[str | None, float]]:
    """(metric name, or None for the main loss; weight) of every loss node of the model's program."""
    program = model.program
    return [(None if k == 0 else program.metric_name(i), float(program.nodes[i].params["weight"]))
            for k, i in enumerate(program.losses)]


def objective(model, windows: np.ndarray, passes=None) -> float:
    """The sum of the losses, each times its weight, from loss_and_backward's return (it adds gradients too), of
    `passes` (the model's own, or a ThreadSplit over it)."""
    main, others = (passes or model).loss_and_backward(windows)
    weights = loss_weights(model)
    assert set(others) == {name for name, _ in weights[1:]}, "loss_and_backward names every other loss"
    return float(sum(weight * (main if name is None else others[name]) for name, weight in weights))


def analytic_gradients(model, windows: np.ndarray) -> dict[str, np.ndarray]:
    model.params.zero_grad()
    objective(model, windows)
    return model.params.to_host(model.params.grad)


def central_difference(f, flat: np.ndarray, index: int, h: float = H) -> float:
    old = flat[index]
    flat[index] = old + h
    f_plus = f()
    flat[index] = old - h
    f_minus = f()
    flat[index] = old
    return (f_plus - f_minus) / (2 * h)


def check_gradients(model, windows: np.ndarray, seed: int, per_parameter: int = 6,
                    structural_zero=lambda name: False) -> int:
    """Hold every trainable parameter's analytic gradient against central differences (float64 NumPy
    backend); returns how many coordinates were checked. A parameter whose whole analytic gradient is 0 must
    be one that `structural_zero(name)` allows, and its sampled differences must be ~0 too. A frozen
    parameter (a prior's counted table) is left out: no gradient of it is kept, by design."""
    params = model.params
    analytic = analytic_gradients(model, windows)
    trainable = [name for name, spec in params.specs.items() if spec.trainable]
    rng = np.random.default_rng(seed)
    f = lambda: objective(model, windows)
    checked, largest = 0, 0.0
    for name in trainable:
        grad = analytic[name]
        flat = params.value[name].reshape(-1)  # a view into the flat store (its slice is contiguous)
        assert np.shares_memory(flat, params.data), name
        g = grad.reshape(-1)
        picks = set(rng.choice(g.size, size=min(g.size, per_parameter), replace=False).tolist())
        picks.add(int(np.argmax(np.abs(g))))  # the largest entry too: the one a wrong scale shows most
        picks = sorted(picks)
        numeric = np.array([central_difference(f, flat, i) for i in picks])
        np.testing.assert_allclose(g[picks], numeric, atol=ATOL, rtol=RTOL, err_msg=f"gradient of {name}")
        if not np.any(g != 0.0):
            assert structural_zero(name), f"{name}: its whole gradient is 0; nothing reaches a loss through it"
        checked += len(picks)
        largest = max(largest, float(np.max(np.abs(numeric))))
    assert largest > 1e-3, "every sampled difference is ~0: the check is vacuous"
    # one direction through every trainable coordinate at once: <grad, u> against the difference along u
    flat_all = params.data[0]
    direction = rng.normal(size=flat_all.shape) * _flat({n: np.full(s.shape, float(s.trainable))
                                                          for n, s in params.specs.items()}, params)
    direction /= np.linalg.norm(direction)
    start = flat_all.copy()
    flat_all[:] = start + H * direction
    f_plus = f()
    flat_all[:] = start - H * direction
    f_minus = f()
    flat_all[:] = start
    along = (f_plus - f_minus) / (2 * H)
    predicted = float(np.dot(_flat(analytic, params), direction))
    np.testing.assert_allclose(predicted, along, atol=ATOL, rtol=RTOL, err_msg="the gradient along a direction")
    return checked


def _flat(grads: dict[str, np.ndarray], params) -> np.ndarray:
    """The gradients as one vector in the parameter store's order (its specs' order)."""
    return np.concatenate([grads[name].reshape(-1) for name in params.specs])
