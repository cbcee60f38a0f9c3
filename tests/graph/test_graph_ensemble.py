"""The ensemble family as a graph (model/graph/from_family/ensemble.py, ops/ensemble.py, library/ensemble.yaml):
for the same seed the graph draws the family's initial weights in the family's order and trains like it under
every router, prior and expert-gradient rule, with --active-dims, --prior-off-at and --expert-init torch; the new ops (zeros,
prior, router, mix) are gradient-checked in float64; a bigram prior added to a GPT's logits trains.

Gradient checks compare the backward against central differences of the loss, (L(x + h) - L(x - h)) / 2h
with h = 1e-6 in float64: the difference is then near 1e-9 relative for these smooth functions, so 1e-6 is a
bound a wrong term (off by a factor, a sign or a missing path) cannot meet (tests/model/test_ensemble.py's reasoning).
"""

from __future__ import annotations

import numpy as np
import pytest

from finite_differences import RTOL, H, numeric
from microgpt.backends import get_backend
from microgpt.core.errors import ConfigError
from microgpt.data.tokenizer import CharTokenizer
from microgpt.model.family import family
from microgpt.model.graph.document import FORMAT_VERSION, VERSION_KEY
from microgpt.model.graph.from_family import document_for
from microgpt.model.graph.from_family.gpt import edge
from microgpt.model.graph.ops.ensemble import MixKernel
from training_steps import cut_windows, train_steps

TOKENIZER = CharTokenizer("0123456789+= \n")  # the calculator's characters, nothing else
V = TOKENIZER.size
TEXT = "".join(f"{x} + {y} = {x + y}\n" for x in range(0, 60, 3) for y in range(0, 60, 7))  # sums, for the calculator
TOKENS = TOKENIZER.encode(TEXT)
EXPERTS = "d8n1,d2+4n2ff10"  # experts of different widths, head splits, depths and FFN widths
STEPS, BATCH, SEQ_LEN, LR, SEED = 60, 4, 12, 1e-2, 3

PRIORS = ("none", "counter", "bigram", "trigram", "calculator")
ROUTERS = ("global", "context", "gated")
# every router with every prior, the two expert-gradient rules alternating so that each router and each prior
# trains under both; then --prior-off-at for every prior kind (mid-run, so both halves count) and --active-dims
CONFIGURATIONS = [
    {"router": router, "prior": prior, "expert_grad": ("equal", "routed")[(i + j) % 2]}
    for i, router in enumerate(ROUTERS) for j, prior in enumerate(PRIORS)
] + [
    {"prior": "counter", "prior_off_at": 25, "router": "gated"},
    {"prior": "bigram", "prior_off_at": 25, "expert_grad": "routed"},
    {"prior": "trigram", "prior_off_at": 40, "router": "context"},
    {"prior": "calculator", "prior_off_at": 10, "router": "global", "expert_grad": "routed"},
    {"active_dims": 4},
    {"active_dims": 3, "prior": "bigram", "prior_off_at": 30, "router": "gated", "expert_grad": "routed"},
    {"expert_init": "he"},  # the default is torch's, which every configuration above starts at
    {"expert_init": "he", "prior": "calculator", "router": "context"},
]


def label(settings: dict) -> str:
    return "-".join(f"{key}={value}" for key, value in settings.items())


def models(settings: dict, dtype=np.float32, experts: str = EXPERTS, stream_dim: int = 6, seq_len: int = SEQ_LEN):
    """(the family's ensemble, its graph) with the same shape and seed on the numpy backend, tables counted."""
    ensemble, graph = family("ensemble"), family("graph")
    config = ensemble.Config(vocab_size=V, cooperative=experts, stream_dim=stream_dim, seq_len=seq_len, **settings)
    graph_config = graph.Config(vocab_size=V, graph=document_for("ensemble", config), seq_len=seq_len)
    return (ensemble.build(config, get_backend("numpy", dtype=dtype), TOKENIZER, SEED),
            graph.build(graph_config, get_backend("numpy", dtype=dtype), TOKENIZER, SEED))


def family_name(name: str) -> str:
    """A graph parameter's name in the family: expert<i>.<rest> (numbered from 1, the prior being expert 0) is
    experts.<i - 1>.<rest>; the rest are the same."""
    if name.startswith("expert"):
        index, rest = name.removeprefix("expert").split(".", 1)
        return f"experts.{int(index) - 1}.{rest}"
    return name


def token_windows(seq_len: int = SEQ_LEN) -> list[np.ndarray]:
    """STEPS batches (BATCH, seq_len + 1) cut at seeded random places from the sums (the calculator's text)."""
    return cut_windows(TOKENS, seq_len, STEPS, BATCH, np.random.default_rng(11))


def train(model, windows: list[np.ndarray]) -> np.ndarray:
    """The loss of each step."""
    return np.array([loss for loss, _ in train_steps(model, windows, LR)])


@pytest.mark.parametrize("settings", CONFIGURATIONS, ids=label)
def test_the_graph_starts_with_the_familys_weights(settings):
    ensemble, graph = models(settings)
    for counted in (False, True):  # as drawn, then with the n-gram tables counted from the training tokens
        if counted:
            ensemble.learn_from(TOKENS)
            graph.learn_from(TOKENS)
        ours, theirs = graph.params.to_host(), ensemble.params.to_host()
        assert [family_name(name) for name in ours] == list(theirs)  # the same parameters in the same order
        for name, value in ours.items():
            np.testing.assert_array_equal(value, theirs[family_name(name)], err_msg=name)
        ours_specs, their_specs = graph.params.specs.values(), ensemble.params.specs.values()
        assert [(s.shape, s.decay, s.trainable) for s in ours_specs] == [(s.shape, s.decay, s.trainable)
                                                                          for s in their_specs]


# The graph runs the family's arithmetic kernel for kernel (the router's host NumPy, the mix, the stream's adds
# and narrows), and sums each fan-out's gradients in an order that is the family's where it matters (two terms
# add alike in either order). On numpy in float32 the 60 losses measured bit-identical under every
# configuration here; the bound is the 1e-5, which a wrong graph (a missing write, a wrong share, the
# prior on a step too long) misses by 1e-3 or more within a few steps.
TRAINING_TOLERANCE = 1e-5


@pytest.mark.parametrize("settings", CONFIGURATIONS, ids=label)
def test_the_graph_trains_like_the_family(settings):
    ensemble, graph = models(settings)
    ensemble.learn_from(TOKENS)
    graph.learn_from(TOKENS)
    windows = token_windows()
    theirs, ours = train(ensemble, windows), train(graph, windows)
    assert np.abs(ours - theirs).max() <= TRAINING_TOLERANCE, np.abs(ours - theirs).max()
    assert theirs[-1] < theirs[0] - 0.3  # it learned something, so the comparison compares training


def test_the_prior_switches_off_at_its_step_as_the_familys_does():
    """At --prior-off-at 3 the prior writes in steps 1 and 2 only, in the graph as in the family: their losses
    agree with a run whose prior never switches off for two steps, and part from it at step 3; a model that
    has finished is served with the prior off, as the next step would run."""
    settings = {"prior": "bigram", "prior_off_at": 3}
    ensemble, graph = models(settings)
    _, never = models({"prior": "bigram"})
    for model in (ensemble, graph, never):
        model.learn_from(TOKENS)
    windows = token_windows()[:5]
    theirs, ours, always = train(ensemble, windows), train(graph, windows), train(never, windows)
    np.testing.assert_array_equal(ours, theirs)  # bit-identical (see TRAINING_TOLERANCE's comment)
    np.testing.assert_array_equal(ours[:2], always[:2])  # the same first two steps
    assert not np.allclose(ours[2:], always[2:])  # then the prior is off in one of them
    assert graph.params.step == 5 and ensemble.passes.prior_on() is False  # served as it finished
    prior = next(k for k, n in zip(graph.passes.kernels, graph.program.nodes) if n.op.name == "prior")
    assert not prior.on(graph.passes.run_for(windows[0][:, :-1]))


# ---- gradient checks (float64) -------------------------------------------------------------------


def noisy(model) -> None:
    """Every trainable weight moved off its init (a router starting at zero hides a path), tables as they are."""
    rng = np.random.default_rng(0)
    model.params.from_host({name: value + rng.normal(0, 0.3, value.shape) * spec.trainable
                            for (name, value), spec in zip(model.params.to_host().items(),
                                                           model.params.specs.values())})


def check_gradients(model, windows, per_tensor: int = 3) -> None:
    """Every trainable tensor's analytic gradient against central differences of the loss, at a few entries."""
    model.params.zero_grad()
    model.loss_and_backward(windows)
    analytic = model.params.to_host(model.params.grad)
    rng = np.random.default_rng(7)
    for name, spec in model.params.specs.items():
        if not spec.trainable:
            np.testing.assert_array_equal(analytic[name], 0.0, err_msg=name)  # a table is never trained
            continue
        for index in rng.choice(spec.size, size=min(per_tensor, spec.size), replace=False):
            expected = numeric(model, lambda: model.loss(windows), name, int(index))
            got = analytic[name].reshape(-1)[index]
            assert got == pytest.approx(expected, rel=RTOL, abs=1e-9), (name, int(index))


def check_windows() -> np.ndarray:
    text = "12 + 34 = 46\n5 + 5 = 10\n7 + 1"  # whole sums in the window, so the calculator has its say
    ids = TOKENIZER.encode(text)
    starts = np.random.default_rng(1).integers(0, len(ids) - 8, 3)
    return np.stack([ids[s : s + 8] for s in starts])  # (3, T+1)


@pytest.mark.parametrize("settings", [
    {"router": "global"}, {"router": "context"}, {"router": "gated"},
    {"prior": "counter"}, {"prior": "bigram"}, {"prior": "trigram"}, {"prior": "calculator"},
    {"active_dims": 3, "prior": "counter", "router": "gated"},
], ids=label)
def test_the_graph_ensembles_gradient_is_the_losss(settings):
    """With expert_grad routed the mix passes the true gradient, so every op's backward (the prior's, the
    router's weights and stream gradients, the mix's) is checked through the whole graph."""
    _, graph = models({"expert_grad": "routed", **settings}, np.float64, experts="d4n1,d2+2n1", stream_dim=5,
                      seq_len=7)
    graph.learn_from(np.random.default_rng(0).integers(0, V, 300))
    noisy(graph)
    check_gradients(graph, check_windows())


@pytest.mark.parametrize("routed", [False, True])
def test_the_mix_gives_the_weights_their_gradient_and_each_expert_its_rule(routed):
    """dweights against central differences of <dmixed, mix(weights, logits)>; the experts' logits get
    weights_k * dmixed (routed: the same central differences) or dmixed / n (equal, by design)."""
    be = get_backend("numpy", dtype=np.float64)
    rng = np.random.default_rng(2)
    rows, n = 6, 3
    weights, dmixed = rng.random((rows, n)), rng.normal(size=(rows, V))  # (rows, n), (rows, V)
    logits = [rng.normal(size=(rows, V)) for _ in range(n)]  # each (rows, V)
    kernel = MixKernel(be, routed)

    def objective(w, ls) -> float:
        (mixed,), _ = kernel.forward([w, *ls], None)
        return float((dmixed * mixed).sum())

    (mixed,), saved = kernel.forward([weights, *logits], None)
    np.testing.assert_allclose(mixed, sum(weights[:, k : k + 1] * logits[k] for k in range(n)), rtol=1e-12)
    dweights, *dlogits = kernel.backward([dmixed], saved, None)
    for row, k in [(0, 0), (3, 1), (5, 2)]:
        up, down = weights.copy(), weights.copy()
        up[row, k] += H
        down[row, k] -= H
        assert dweights[row, k] == pytest.approx((objective(up, logits) - objective(down, logits)) / (2 * H),
                                                 rel=RTOL)
    for k in range(n):
        if routed:
            up, down = [x.copy() for x in logits], [x.copy() for x in logits]
            up[k][2, 4] += H
            down[k][2, 4] -= H
            assert dlogits[k][2, 4] == pytest.approx((objective(weights, up) - objective(weights, down)) / (2 * H),
                                                     rel=RTOL)
        else:
            np.testing.assert_array_equal(dlogits[k], dmixed * (1.0 / n))  # the family's product, exactly


def gpt_with_bigram_prior(d: int = 8) -> dict:
    """A graph no family offers: gpt's trunk and head, plus the bigram prior's table row through a logits node,
    added to its logits."""
    return {VERSION_KEY: FORMAT_VERSION, "dims": {"d": d, "d_ff": 4 * d, "heads": 2},
            "nodes": [{"id": "tok_emb", "op": "embedding"},
                      {"id": "blocks", "group": "transformer_block", "repeat": 1},
                      {"id": "final_norm", "op": "layer_norm"},
                      {"id": "head", "op": "logits"},
                      {"id": "bigram", "op": "prior", "params": {"kind": "bigram"}},
                      {"id": "bigram_head", "op": "logits", "params": {"init": "zero"}},
                      {"id": "sum", "op": "add"},
                      {"id": "loss", "op": "cross_entropy"}],
            "edges": [edge("tokens", "tok_emb.ids"), edge("tok_emb.out", "blocks.x"), edge("blocks.x", "final_norm.x"),
                      edge("final_norm.out", "head.x"), edge("tokens", "bigram.ids"), edge("bigram.out", "bigram_head.x"),
                      edge("head.out", "sum.in"), edge("bigram_head.out", "sum.in"), edge("sum.out", "loss.logits"),
                      edge("sum.out", "logits")]}


def test_a_bigram_prior_added_to_a_gpts_logits_counts_its_table_checks_and_trains():
    graph = family("graph")
    config = graph.Config(vocab_size=V, graph=gpt_with_bigram_prior(), seq_len=7)
    model = graph.build(config, get_backend("numpy", dtype=np.float64), TOKENIZER, SEED)
    model.learn_from(TOKENS)
    table = model.params.to_host()["bigram"]
    assert table.shape == (V, V) and np.allclose(table.sum(axis=1), 1.0)
    assert table[TOKENIZER.encode("=")[0]].argmax() == TOKENIZER.encode(" ")[0]  # after "=" comes " "
    noisy(model)
    check_gradients(model, check_windows())
    model = graph.build(config, get_backend("numpy"), TOKENIZER, SEED)
    model.learn_from(TOKENS)
    losses = train(model, token_windows(7))
    assert losses[-1] < losses[0] - 0.3


def test_the_zeros_op_is_an_empty_stream_that_passes_no_gradient():
    _, graph = models({})  # prior none: the stream starts from a zeros node
    node = next(n for n in graph.program.nodes if n.op.name == "zeros")
    kernel = graph.passes.kernels[graph.program.nodes.index(node)]
    run = graph.passes.run_for(token_windows()[0][:, :-1])
    (out,), saved = kernel.forward([], run)
    assert out.shape == (BATCH * SEQ_LEN, 6) and not out.any()
    assert kernel.backward([out], saved, run) == []


def params_of(document: dict, node_id: str) -> dict:
    """The params of the document's node `node_id`."""
    return next(node for node in document["nodes"] if node["id"] == node_id)["params"]


@pytest.mark.parametrize("change, words", [
    (lambda doc: params_of(doc, "router").update(experts=3),
     "mix: its weights are over 3 experts and 2 logits edges come in"),
    (lambda doc: params_of(doc, "prior").update(kind="fourgram"), "param kind must be one of counter, bigram"),
    (lambda doc: params_of(doc, "router").update(kind="soft"), "router: param kind must be one of global"),
    (lambda doc: params_of(doc, "mix").update(grad="half"), "mix: param grad must be one of equal, routed"),
    (lambda doc: params_of(doc, "prior").update(until_step=0), "param until_step must be a step of at least 1"),
])
def test_a_wrong_ensemble_graph_is_refused_naming_the_node(change, words):
    config = family("ensemble").Config(vocab_size=V, cooperative="d4n1,d4n1", stream_dim=4, seq_len=8,
                                       prior="bigram")
    document = document_for("ensemble", config)
    change(document)
    with pytest.raises(ConfigError, match=words):
        family("graph").Config(vocab_size=V, graph=document, seq_len=8)
