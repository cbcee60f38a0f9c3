"""The lookahead family as a graph (model/graph/from_family/lookahead.py): for the same seed the graph draws the
family's initial weights, in the family's order, and trains like it (mode mtp bit for bit, modes gap and hydra
within 1e-5); its gap heads pass the leak check; and the original µGPT's zebra and future heads, written as graph
documents, leak (tests/head_leaks.py's check) and are refused before training by the graph's causality check
(model/graph/causality.py), which names the node where the future enters.
"""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pytest

from head_leaks import leaks
from microgpt.backends import get_backend
from microgpt.core.errors import ConfigError
from microgpt.data.tokenizer import CharTokenizer
from microgpt.model.family import family
from microgpt.model.graph.compile import compile_graph
from microgpt.model.graph.from_family import document_for
from microgpt.model.graph.library import with_library
from microgpt.model.graph.model import GraphModel
from microgpt.model.heads import HeadLogits
from training_steps import cut_windows, train_steps

VOCAB = 11
SHAPE = {"d_model": 8, "n_layers": 2, "head_dims": (2, 6), "d_ff": 12, "seq_len": 8, "lookahead": 2,
         "lookahead_weight": 0.7}
CONFIGURATIONS = [("mtp", 0), ("mtp", 1), ("mtp", 2), ("gap", 1), ("gap", 2), ("hydra", 1), ("hydra", 2)]
# (mode, head_layers)
STEPS, BATCH, LR, SEED = 60, 4, 3e-3, 7
# Mode mtp sums every gradient as the family does, so it trains bit for bit. In mode gap the token embedding
# is read by the trunk and, as the memory, by every gap block; the graph sums those gradients and scatters
# them into the table once, where the family scatters the trunk's and then the heads' sum: the same terms,
# associated differently, in the last float32 bit of a few rows. 60 Adam steps carry that to at most 2e-6 in
# any loss (seeds 0-4, these shapes; at lr 1e-2 these tiny models turn chaotic and amplify rounding 1e5-fold,
# in float64 too, hence the lower lr). A wrong graph (a missing head, a wrong offset, weight or gap) moves the
# losses by 1e-2 or more within the first steps. Mode hydra reads the embedding through shift nodes, summed
# the same way, and adds its first layer's products in another order than the family's (LN(x) W_x + b1, then
# the stacked tokens' one product, where the family adds each token's product and then b1): rounding as well.
TOLERANCE = 1e-5


def models(mode: str, head_layers: int, dtype=np.float32, seed: int = SEED):
    """(the family's model, the graph's) with the same shape and seed on the numpy backend."""
    lookahead, graph = family("lookahead"), family("graph")
    config = lookahead.Config(vocab_size=VOCAB, **SHAPE, lookahead_mode=mode, head_layers=head_layers)
    tokenizer = CharTokenizer("abcdefghijk")
    graph_config = graph.Config(vocab_size=VOCAB, graph=document_for("lookahead", config), seq_len=config.seq_len)
    return (lookahead.build(config, get_backend("numpy", dtype=dtype), tokenizer, seed),
            graph.build(graph_config, get_backend("numpy", dtype=dtype), tokenizer, seed))


def token_windows(seq_len: int) -> list[np.ndarray]:
    """STEPS batches (BATCH, seq_len + 1) cut at random places from one seeded random token stream."""
    rng = np.random.default_rng(11)
    return cut_windows(rng.integers(0, VOCAB, size=2000), seq_len, STEPS, BATCH, rng)


@pytest.mark.parametrize(("mode", "head_layers"), CONFIGURATIONS)
def test_the_graph_starts_with_the_familys_weights(mode, head_layers):
    family_model, graph_model = models(mode, head_layers)
    ours, theirs = graph_model.params.to_host(), {}
    for family_name, family_value in family_model.params.to_host().items():
        # the trunk's names are gpt's; head k's are lookahead.<k>.<rest> there and head<k>.<rest> here
        theirs.setdefault(_family_name(family_name), []).append(family_value)
    assert list(ours) == list(theirs)
    for name, value in ours.items():
        np.testing.assert_array_equal(value, np.concatenate(theirs[name]))


def _family_name(name: str) -> str:
    """A family parameter's name in the graph: lookahead.<k>.<rest> is head<k>.<rest>, and a hydra layer's
    token<j>.w (j = 1 .. k) is one token.w, the rows of each stacked in j's order; the rest as they are."""
    if name.startswith("lookahead."):
        k, rest = name.removeprefix("lookahead.").split(".", 1)
        return re.sub(r"\.token\d+\.w$", ".token.w", f"head{k}.{rest}")
    return name


@pytest.mark.parametrize(("mode", "head_layers"), CONFIGURATIONS)
def test_the_graph_trains_like_the_family(mode, head_layers):
    family_model, graph_model = models(mode, head_layers)
    windows = token_windows(SHAPE["seq_len"])
    theirs, ours = train_steps(family_model, windows, LR), train_steps(graph_model, windows, LR)
    if mode == "mtp":
        assert ours == theirs  # the same sums in the same order: bit for bit
    for (family_main, family_heads), (graph_main, graph_heads) in zip(theirs, ours):
        assert set(graph_heads) == set(family_heads) == {f"head{k}_loss" for k in range(1, SHAPE["lookahead"] + 1)}
        assert abs(graph_main - family_main) <= TOLERANCE
        for key, value in family_heads.items():
            assert abs(graph_heads[key] - value) <= TOLERANCE
    assert theirs[-1][0] < theirs[0][0] - 0.05  # it learned something, so the comparison is of moving weights


def host_heads(model, be, hidden_of=lambda head: head.hidden):
    """`heads(ids)` for the leak check: host logits, each head's hidden offsets from `hidden_of`."""
    return lambda ids: [HeadLogits(h.name, h.offset, hidden_of(h), be.to_host(h.logits)) for h in model.heads(ids)]


def perturbed(model) -> None:
    """Weights moved off their init (zero biases, unit gains), so that every path carries a signal."""
    rng = np.random.default_rng(1)
    model.params.from_host({n: v + rng.normal(0, 0.3, v.shape) for n, v in model.params.to_host().items()})


@pytest.mark.parametrize("head_layers", [1, 2])
def test_the_graphs_gap_heads_pass_the_leak_check(head_layers):
    """Gap head k (node head<k>) must not see t + 1 .. t + k; the graph's heads() knows only each loss's offset,
    so the hidden span is given here from the head's name."""
    _, model = models("gap", head_layers, dtype=np.float64)
    perturbed(model)

    def hidden(head):
        return (1, None) if head.name == "main" else (1, int(head.name.split("/")[0].removeprefix("head")))

    heads = host_heads(model, model.be, hidden)
    ids = np.random.default_rng(2).integers(0, VOCAB, size=(2, SHAPE["seq_len"]))  # (B, T)
    assert [h.name for h in heads(ids)] == ["main", "head1/loss", "head2/loss"]
    assert leaks(heads, ids) == []
    # and they do see past their gap: head k's logits at 0 move with the token at k + 1
    before = heads(ids)
    for k in (1, 2):
        changed = ids.copy()
        changed[:, k + 1] = (ids[:, k + 1] + 1) % VOCAB
        moved = heads(changed)[k].logits.reshape(2, SHAPE["seq_len"], -1)[:, 0]
        assert not np.allclose(moved, before[k].logits.reshape(2, SHAPE["seq_len"], -1)[:, 0])


def original_head(kind: str, k: int = 1) -> dict:
    """A gpt trunk with one of the original µGPT's heads as a graph: "zebra" (head k: gap attention hiding
    t + 1 .. t + k over the token embeddings, predicting the token at t + k + 1, which its mask shows) or
    "future" (anticausal attention over the trunk's states, predicting t + 1, which it sees)."""
    from microgpt.model.graph.from_family.gpt import edge

    config = family("lookahead").Config(vocab_size=VOCAB, **SHAPE, lookahead_mode="gap", head_layers=1)
    document = document_for("gpt", config)
    if kind == "zebra":
        head = {"id": "zebra", "group": "gap_head", "params": {"hidden": k}}
        document["groups"] = {"gap_head": _gap_head_predicting(k + 1)}
        document["nodes"].append(head)
        document["edges"] += [edge("blocks.x", "zebra.x"), edge("tok_emb.out", "zebra.memory")]
    else:
        document["nodes"] += [{"id": "future_attn", "op": "attention", "params": {"mask": "anticausal"}},
                              {"id": "future_out", "op": "logits"},
                              {"id": "future_loss", "op": "cross_entropy", "params": {"offset": 1}}]
        document["edges"] += [edge("blocks.x", "future_attn.q"), edge("blocks.x", "future_attn.k"),
                              edge("blocks.x", "future_attn.v"), edge("future_attn.out", "future_out.x"),
                              edge("future_out.out", "future_loss.logits")]
    return document


def _gap_head_predicting(offset: int) -> dict:
    """The library's gap_head with its loss's offset changed (the zebra's pairing of mask and target)."""
    from microgpt.model.graph.library import library_groups

    group = library_groups()["gap_head"]
    for node in group["nodes"]:
        if node["id"] == "loss":
            node["params"]["offset"] = offset
    return group


def _original_heads(kind: str, k: int = 1):
    """heads() of an original head's graph for the leak check, each head's hidden span as the original's mask
    has it (a zebra head k: t + 1 .. t + k; the future head: everything after t)."""
    be = get_backend("numpy", dtype=np.float64)
    seq_len = SHAPE["seq_len"]
    # compiled and built without family("graph").build, which refuses the document before a model exists
    program = compile_graph(with_library(original_head(kind, k)), VOCAB, seq_len)
    model = GraphModel(SimpleNamespace(seq_len=seq_len), program, be, CharTokenizer("abcdefghijk"), 3)
    perturbed(model)
    return host_heads(model, be, lambda h: (1, None) if h.name in ("main", "future_loss") else (1, k))


def assert_refused(document: dict, where: str) -> None:
    """The graph family refuses to build the document, naming where the future first enters."""
    graph = family("graph")
    config = graph.Config(vocab_size=VOCAB, graph=document, seq_len=SHAPE["seq_len"])
    with pytest.raises(ConfigError, match=f"the graph sees the future: .* it first enters at {where} "):
        graph.build(config, get_backend("numpy"), CharTokenizer("abcdefghijk"), 0)


@pytest.mark.parametrize("k", [1, 2])
def test_the_originals_zebra_head_as_a_graph_leaks_and_is_refused(k):
    heads = _original_heads("zebra", k)
    ids = np.random.default_rng(4).integers(0, VOCAB, size=(2, SHAPE["seq_len"]))  # (B, T)
    found = leaks(heads, ids)
    assert found and {(name, offset) for name, _, offset in found} == {("zebra/loss", k + 1)}  # its target alone
    assert_refused(original_head("zebra", k), "zebra/blocks/0/attn/heads")


def test_the_originals_future_head_as_a_graph_leaks_and_is_refused():
    heads = _original_heads("future")
    ids = np.random.default_rng(5).integers(0, VOCAB, size=(2, SHAPE["seq_len"]))  # (B, T)
    found = leaks(heads, ids)
    assert ("future_loss", 0, 1) in found and {name for name, _, _ in found} == {"future_loss"}
    assert_refused(original_head("future"), "future_attn")


def test_what_the_graph_library_cannot_express_is_refused_in_one_line():
    config = family("lookahead").Config(vocab_size=VOCAB, **SHAPE, lookahead_distill=0.5)
    with pytest.raises(ConfigError) as caught:
        document_for("lookahead", config)
    assert "--lookahead-distill has no graph" in str(caught.value) and "\n" not in str(caught.value)
