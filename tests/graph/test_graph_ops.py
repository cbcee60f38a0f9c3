"""Every primitive of the graph family, and the compiler's backward, against central differences in float64;
then each case on the cpu backend (numba) against the NumPy backend in float32.

The cases are the OP_CASES (one per op of microgpt.model.graph.ops.ALL, the fused ones included) and the
VARIANT_CASES of every tests/graph_cases*.py module, gathered by tests/graph_case_registry.py; an op without a
case fails here, so a new op cannot skip the checks. Also here: the fusion rules (what is fused and what is
left alone), the gradients summed at a fan-out in the readers' forward order, and a node that reaches no loss
being skipped.
"""

from __future__ import annotations

import numpy as np
import pytest

import graph_cases
from graph_case_registry import CASES, OP_CASES, PARITY_ONLY, UNSOUND, case, case_seed, chars_of
from graph_gradcheck import (
    build,
    case_document,
    check_gradients,
    objective,
    perturb,
    perturbed_weights,
    random_windows,
)
from microgpt.backends import BackendUnavailable, get_backend
from microgpt.core.errors import ConfigError
from microgpt.model.graph.ops import ALL
from microgpt.model.thread_split import ThreadSplit

BATCH = 2  # sequences per gradient check: repeated ids across them, and the mean over both
PARITY_BATCH = 3  # odd: the cpu backend's threads cut it into unequal slices


def key_bias(name: str) -> bool:
    """A key bias adds q . b to every score of a query's row, a constant the softmax ignores: its gradient is 0."""
    parts = name.split(".")
    return len(parts) >= 2 and parts[-1] == "b" and parts[-2] in ("k", "wk")


def op_names(model) -> list[str]:
    return [node.op.name for node in model.program.nodes]


# ---- coverage and the fusion rules ----------------------------------------------------------------------


def test_every_op_has_a_case():
    missing = sorted(set(ALL) - set(OP_CASES))
    assert not missing, f"add a case for {missing} to OP_CASES in a tests/graph_cases*.py module"


@pytest.mark.parametrize("name", sorted(OP_CASES))
def test_each_op_case_runs_its_op(name):
    model, _ = case(name, get_backend("numpy", dtype=np.float64))
    assert name in op_names(model), f"the case for {name} compiles to {op_names(model)}"


def test_fusion_rules():
    be = get_backend("numpy", dtype=np.float64)
    fused = op_names(case("linear_relu", be)[0])
    assert "linear_relu" in fused and "relu" not in fused  # a linear with bias read by a relu alone
    unfused = op_names(case("relu", be)[0])  # no bias; with bias but read by an add too
    assert unfused.count("relu") == 2 and "linear_relu" not in unfused
    rope = op_names(case("rope", be)[0])  # one rope read twice, one with other heads than the attention's
    assert rope.count("rope") == 2 and "attention" in rope and "rope_attention" not in rope
    folded = op_names(case("rope_attention", be)[0])  # the library's attention, in a block repeated twice
    assert folded.count("rope_attention") == 2 and folded.count("linear_relu") == 2 and "rope" not in folded
    gap = case("variant:rope_attention_gap", be)[0]
    (node,) = [n for n in gap.program.nodes if n.op.name == "rope_attention"]
    assert node.params["mask"] == "gap" and node.params["gap"] == 2 and "rope" not in op_names(gap)


@pytest.mark.parametrize("name", sorted(UNSOUND))
def test_the_family_refuses_the_unsound_cases(name):
    """The cases built past the causality check are the ones it refuses, not any other."""
    document, seq_len = case_document(CASES[name][1](), graph_cases.DEFAULT_SEQ_LEN)
    with pytest.raises(ConfigError, match="sees the future"):
        build(document, seq_len, chars_of(name), get_backend("numpy", dtype=np.float64))


# ---- gradients in float64 --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(set(CASES) - PARITY_ONLY))
def test_gradients_against_central_differences(name):
    """Tolerances: graph_gradcheck's ATOL/RTOL (float64, step 1e-6; see its docstring)."""
    seed = case_seed(name)
    model, seq_len = case(name, get_backend("numpy", dtype=np.float64), seed)
    perturb(model, seed)
    windows = random_windows(len(chars_of(name)), seq_len, BATCH, seed)
    before = model.params.data.copy()
    checked = check_gradients(model, windows, seed, structural_zero=key_bias)
    np.testing.assert_array_equal(model.params.data, before)  # the check put every weight back
    assert checked >= len(model.params.specs)


# ---- cpu (numba) against numpy, float32 ------------------------------------------------------------------


def cpu_backend():
    try:
        return get_backend("cpu")
    except BackendUnavailable as exc:
        pytest.skip(f"the cpu backend is unavailable: {exc}")


# float32 (eps 6e-8) through a handful of matmuls, norms and softmaxes, summed in other orders (numba's kernels,
# BLAS, the batch cut into slices over threads): results agree to ~1e-6 relative. Logits and losses O(1) get
# 2e-5 absolute; a gradient entry gets 2e-5 of the largest entry of its parameter plus 2e-4 of itself, since a
# small entry is a difference of larger terms. A wrong kernel is off by far more (1e-2 and up).
LOGITS_ATOL = 2e-5
GRAD_RTOL = 2e-4
GRAD_ATOL_OF_LARGEST = 2e-5
GRAD_ATOL_FLOOR = 1e-6  # a gradient that is 0 in exact arithmetic (a key bias without RoPE) is float32's
# rounding of O(0.1) terms that cancel, ~1e-7; every gradient that is not 0 here is O(1e-3) or more


@pytest.mark.parametrize("name", sorted(CASES))
def test_cpu_agrees_with_numpy_in_float32(name):
    cpu = cpu_backend()
    seed = case_seed(name)
    reference, seq_len = case(name, get_backend("numpy"), seed)
    other, _ = case(name, cpu, seed)
    weights = perturbed_weights(reference, seed)
    windows = random_windows(len(chars_of(name)), seq_len, PARITY_BATCH, seed)
    results = []
    for model in (reference, other):
        model.params.from_host(weights)
        logits = model.be.to_host(model.logits(windows[:, :-1])).astype(np.float64)  # (B*T, vocab)
        model.params.zero_grad()
        loss = objective(model, windows, ThreadSplit(model))  # the batch over the cpu backend's threads
        results.append((logits, loss, model.params.to_host(model.params.grad)))
    (logits_np, loss_np, grads_np), (logits_cpu, loss_cpu, grads_cpu) = results
    np.testing.assert_allclose(logits_cpu, logits_np, rtol=0, atol=LOGITS_ATOL, err_msg="logits")
    assert loss_cpu == pytest.approx(loss_np, abs=LOGITS_ATOL)
    for param, expected in grads_np.items():
        atol = max(GRAD_ATOL_OF_LARGEST * float(np.max(np.abs(expected))), GRAD_ATOL_FLOOR)
        np.testing.assert_allclose(grads_cpu[param], expected, rtol=GRAD_RTOL, atol=atol, err_msg=f"gradient of {param}")


# ---- the compiler's backward: fan-out order, and nodes that reach no loss ----------------------------------


def fan_out_document() -> dict:
    """One embedding read by three linears (a, b, c in forward order), their outputs concatenated."""
    nodes = [graph_cases.emb("emb", 5), graph_cases.lin("a", 4), graph_cases.lin("b", 3, bias=False),
             graph_cases.lin("c", 4), {"id": "act", "op": "gelu"}, {"id": "cat", "op": "concat"}]
    wires = ["tokens -> emb.ids", "emb.out -> a.x", "emb.out -> b.x", "emb.out -> c.x", "a.out -> act.x",
             "act.out -> cat.in", "b.out -> cat.in", "c.out -> cat.in"]
    return graph_cases.with_head(nodes, wires, "cat.out")


def record_backward(kernel, calls: list, label: str) -> None:
    """Make the kernel (the same object: a loss kernel keys its loss by itself) note its douts and dins."""
    inner = kernel.backward

    def backward(douts, saved, run):
        dins = inner(douts, saved, run)
        calls.append((label, [None if d is None else np.array(d) for d in douts],
                      [None if d is None else np.array(d) for d in dins]))
        return dins

    kernel.backward = backward


def test_fan_out_gradients_are_summed_in_the_readers_forward_order():
    be = get_backend("numpy")  # float32: the order of a sum shows in its last bits
    model = build(fan_out_document(), 5, graph_cases.CHARS, be, seed=4)
    weights = perturb(model, 5)
    passes, nodes = model.passes, model.program.nodes
    index = {node.name: i for i, node in enumerate(nodes)}
    assert [index[r] for r in ("a", "b", "c")] == sorted(index[r] for r in ("a", "b", "c"))  # forward order a, b, c
    calls: list = []
    for name in ("emb", "a", "b", "c"):
        record_backward(passes.kernels[index[name]], calls, name)
    model.params.zero_grad()
    model.loss_and_backward(random_windows(graph_cases.VOCAB, 5, 2, 6))
    seen = {label: (douts, dins) for label, douts, dins in calls}
    assert [label for label, _, _ in calls] == ["c", "b", "a", "emb"]  # backward runs in reverse
    for reader in ("a", "b", "c"):  # each reader's input gradient is dy @ w^T, by hand
        (dy,), (dx,) = seen[reader]
        np.testing.assert_allclose(dx, dy @ weights[f"{reader}.w"].T, rtol=1e-5, atol=1e-6)  # float32 products
    da, db, dc = (seen[reader][1][0] for reader in ("a", "b", "c"))
    (given,), _ = seen["emb"]
    np.testing.assert_array_equal(given, (da + db) + dc)  # bit for bit: the forward order's sum
    assert not np.array_equal((dc + db) + da, (da + db) + dc)  # and another order would show


def grouped_fan_out_document() -> dict:
    """One embedding read by a linear a, then by two linears p and q inside a group instance, then by c."""
    pair = {"inputs": {"x": "stream[5]"}, "outputs": {"y": "stream[4]"},
            "nodes": [graph_cases.lin("p", 4), graph_cases.lin("q", 4, bias=False), {"id": "sum", "op": "add"}],
            "edges": graph_cases.edges("x -> p.x", "x -> q.x", "p.out -> sum.in", "q.out -> sum.in",
                                       "sum.out -> y")}
    nodes = [graph_cases.emb("emb", 5), graph_cases.lin("a", 4), {"id": "pair", "group": "pair"},
             graph_cases.lin("c", 3), {"id": "cat", "op": "concat"}]
    wires = ["tokens -> emb.ids", "emb.out -> a.x", "emb.out -> pair.x", "emb.out -> c.x", "a.out -> cat.in",
             "pair.y -> cat.in", "c.out -> cat.in"]
    return graph_cases.with_head(nodes, wires, "cat.out", groups={"pair": pair})


def test_readers_inside_a_group_instance_are_summed_first():
    """model.py's rule: a group instance's readers give one gradient, as a hand-written module returns one,
    and it takes their place in the forward order: a + (p + q) + c."""
    be = get_backend("numpy")  # float32, as above
    model = build(grouped_fan_out_document(), 5, graph_cases.CHARS, be, seed=10)
    perturb(model, 11)
    index = {node.name: i for i, node in enumerate(model.program.nodes)}
    calls: list = []
    for name in ("emb", "a", "pair.p", "pair.q", "c"):
        record_backward(model.passes.kernels[index[name]], calls, name)
    model.loss_and_backward(random_windows(graph_cases.VOCAB, 5, 2, 12))
    seen = {label: (douts, dins) for label, douts, dins in calls}
    da, dp, dq, dc = (seen[reader][1][0] for reader in ("a", "pair.p", "pair.q", "c"))
    (given,), _ = seen["emb"]
    np.testing.assert_array_equal(given, (da + (dp + dq)) + dc)
    assert not np.array_equal(((da + dp) + dq) + dc, (da + (dp + dq)) + dc)  # the flat order would show


def dead_branch_document(dead: bool) -> dict:
    """A live chain to the loss; with `dead`, branches whose outputs reach no loss: a linear into a GELU, a
    split whose parts are read by nothing, and a logits node with no loss."""
    nodes = [graph_cases.emb("emb", 5), graph_cases.lin("live", 5), {"id": "sum", "op": "add"}]
    wires = ["tokens -> emb.ids", "emb.out -> live.x", "emb.out -> sum.in", "live.out -> sum.in"]
    if dead:
        nodes += [graph_cases.lin("unused", 3), {"id": "act", "op": "gelu"},
                  {"id": "cut", "op": "split", "params": {"widths": [2, 3]}}, {"id": "scores", "op": "logits"}]
        wires += ["emb.out -> unused.x", "unused.out -> act.x", "sum.out -> cut.x", "live.out -> scores.x"]
    return graph_cases.with_head(nodes, wires, "sum.out")


def test_a_node_that_reaches_no_loss_is_skipped():
    be = get_backend("numpy", dtype=np.float64)
    model = build(dead_branch_document(dead=True), 5, graph_cases.CHARS, be, seed=7)
    plain = build(dead_branch_document(dead=False), 5, graph_cases.CHARS, be, seed=7)
    weights = perturb(model, 8)
    plain.params.from_host({name: weights[name] for name in plain.params.specs})
    calls: list = []
    passes, nodes = model.passes, model.program.nodes
    for i, node in enumerate(nodes):
        record_backward(passes.kernels[i], calls, node.name)
    windows = random_windows(graph_cases.VOCAB, 5, 2, 9)
    for m in (model, plain):
        m.params.zero_grad()
    assert objective(model, windows) == objective(plain, windows)
    ran = {label for label, _, _ in calls}
    assert not ran & {"unused", "act", "cut", "scores"}  # none of the dead nodes' backwards ran
    assert {"emb", "live", "sum", "head"} <= ran
    grads, plain_grads = model.params.to_host(model.params.grad), plain.params.to_host(plain.params.grad)
    for name in ("unused.w", "unused.b", "scores.w", "scores.b"):
        np.testing.assert_array_equal(grads[name], 0.0)
    for name, expected in plain_grads.items():
        np.testing.assert_array_equal(grads[name], expected)  # the dead branches change no live gradient
