"""Inside a model (use/inspect, issue 51): a trace's logits are the model's own, bit for bit, for every family on the
numpy and cpu backends; the logit lens's last point is the model's prediction; attention rows sum to 1 and weigh
nothing in the future (and mix the values into the heads' outputs); an ablation through `ablate=` is the graph
document with that head multiplied by zero; a patch from the same text changes nothing; a bad path names the
near ones.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from microgpt.backends import get_backend
from microgpt.core.errors import ConfigError
from microgpt.data.tokenizer import CharTokenizer
from microgpt.model.family import family
from microgpt.model.graph.from_family import document_for
from microgpt.model.graph.library import with_library
from microgpt.use.evaluate import nll_rows
from microgpt.use.inspect.lens import lens_heads, lens_logits, stream_points
from microgpt.use.inspect.paths import head_columns, node_paths
from microgpt.use.loaded import LoadedModel

TOKENIZER = CharTokenizer("abcdefghijklmnopqrs ")
SEQ_LEN = 16
TEXT = "abcdefghij klmnopqrs " * 2  # 42 tokens: two whole windows and a part one
FAMILIES = {
    "gpt": ("gpt", {"d_model": 24, "n_layers": 2, "head_dims": (4, 8, 12), "d_ff": 40}),
    "ensemble": ("ensemble", {"cooperative": "d16n1,d24n2"}),
    "mtp": ("lookahead", {"lookahead": 2, "lookahead_mode": "mtp"}),
    "gap": ("lookahead", {"lookahead": 2, "lookahead_mode": "gap"}),
    "hydra": ("lookahead", {"lookahead": 2, "lookahead_mode": "hydra"}),
    "graph": ("graph", {}),
}


def loaded(case: str, backend: str = "numpy", seed: int = 3) -> LoadedModel:
    """A model of the case's family with weights moved off their init (so every head attends somewhere)."""
    name, settings = FAMILIES[case]
    if name == "graph":
        gpt_config = family("gpt").Config(vocab_size=20, seq_len=SEQ_LEN, **FAMILIES["gpt"][1])
        config = family("graph").Config(vocab_size=20, graph=document_for("gpt", gpt_config), seq_len=SEQ_LEN)
    else:
        config = family(name).Config(vocab_size=20, seq_len=SEQ_LEN, **settings)
    model = family(name).build(config, get_backend(backend), TOKENIZER, seed)
    rng = np.random.default_rng(seed)
    model.params.from_host({n: v + rng.normal(0, 0.3, v.shape) * spec.trainable
                            for (n, v), spec in zip(model.params.to_host().items(), model.params.specs.values())})
    return LoadedModel(model, name, TOKENIZER, Path("model"), 2**30)


def own_logits(m: LoadedModel, ids: np.ndarray) -> np.ndarray:
    """The family's own logits for ids, in the windows a trace runs (whole windows together, then the rest)."""
    whole = len(ids) // SEQ_LEN * SEQ_LEN
    parts = [m.model.logits(ids[:whole].reshape(-1, SEQ_LEN)), m.model.logits(ids[whole:].reshape(1, -1))]
    return np.concatenate([m.model.be.to_host(p) for p in parts])


@pytest.mark.parametrize("backend", ["numpy", "cpu"])
@pytest.mark.parametrize("case", list(FAMILIES))
def test_traced_logits_are_the_models_own_bit_for_bit(case, backend):
    m = loaded(case, backend)
    t = m.trace(TEXT)
    assert len(t.ids) == len(t.tokens) == len(TEXT) and "".join(t.tokens) == TEXT
    np.testing.assert_array_equal(t.logits, own_logits(m, t.ids))
    for path, width in t.widths().items():
        assert t[path].shape == (len(TEXT), width), path


def test_the_paths_are_the_graphs_for_each_family():
    assert {"tok_emb", "blocks.1.attn.heads", "final_norm", "head"} <= set(loaded("gpt").trace("ab").paths())
    assert {"router", "mix", "expert1.head", "expert2.blocks.1.attn.heads"} <= set(loaded("ensemble").trace("ab").paths())
    assert {"head", "head1.out", "head2.final_norm"} <= set(loaded("mtp").trace("ab").paths())


@pytest.mark.parametrize("case", ["gpt", "mtp", "ensemble"])
def test_the_logit_lens_at_the_last_point_is_the_models_prediction(case):
    m = loaded(case)
    t = m.trace(TEXT)
    lens = t.logit_lens(top=3)
    program = m.graph.program
    head = lens_heads(program)[0]
    norm, points = stream_points(program, head)
    assert len(lens.points) == len(points) > 2 and lens.head == program.nodes[head].name
    last = lens_logits(t, norm, head, points[-1])
    np.testing.assert_array_equal(last, t[lens.head])  # the final stream through the norm and head: the head's output
    if case != "ensemble":  # the ensemble's prediction is the mix of its experts' heads
        np.testing.assert_array_equal(last, t.logits)
        assert lens.mean_loss()[-1] == pytest.approx(m.loss(TEXT), rel=1e-12)
    np.testing.assert_array_equal(lens.top_ids[-1][:, 0], np.argmax(last, axis=1))
    np.testing.assert_allclose(lens.loss[-1, :-1], nll_rows(last[:-1], t.ids[1:]))
    assert np.isnan(lens.loss[:, -1]).all()


@pytest.mark.parametrize("backend", ["numpy", "cpu"])
@pytest.mark.parametrize("case", ["gpt", "ensemble", "mtp"])
def test_attention_rows_sum_to_1_and_see_no_future(case, backend):
    """Every head of every attention node (unequal widths, an ensemble's experts, lookahead heads' blocks)."""
    m = loaded(case, backend)
    t = m.trace(TEXT)
    n = len(TEXT)
    window = np.arange(n) // SEQ_LEN
    other_window = window[:, None] != window[None, :]
    seen = 0
    for layer, path in enumerate(t.attention_paths()):
        kernel = m.graph.passes.kernels[node_paths(m.graph.program)[path][0]]
        for head in range(len(head_columns(kernel))):
            weights = t.attention(path if head % 2 else layer, head)  # by index or by path
            np.testing.assert_allclose(weights.sum(axis=1), 1.0, atol=1e-5)
            assert (weights[np.triu_indices(n, 1)] == 0).all()  # nothing in the future, exactly
            assert (weights[other_window] == 0).all()  # a window sees only itself
            assert (weights[np.tril_indices(n)][~other_window[np.tril_indices(n)]] > 0).any()
            seen += 1
    assert seen >= len(t.attention_paths()) >= 2


def test_the_weights_are_the_ones_the_heads_mixed_their_values_with():
    """heads[i] (the head's output) = its weights @ its values: unequal widths, read through the trace's columns."""
    m = loaded("gpt")
    t = m.trace(TEXT)
    for layer, path in enumerate(t.attention_paths()):
        values = t[path.replace("heads", "wv")]
        for head, (first, width) in enumerate([(0, 4), (4, 8), (12, 12)]):
            mixed = t.attention(layer, head) @ values[:, first : first + width]
            np.testing.assert_allclose(t[f"{path}[{head}]"], mixed, rtol=1e-4, atol=1e-5)


def test_a_gap_heads_weights_are_0_on_its_hidden_positions():
    m = loaded("gap")
    t = m.trace(TEXT[:SEQ_LEN])
    gap_layers = [i for i, p in enumerate(t.attention_paths()) if p.startswith("head2")]
    weights = t.attention(gap_layers[0], 0)
    for query in range(SEQ_LEN):
        assert (weights[query, query + 1 : query + 3] == 0).all()  # head 2 hides the 2 positions after each query
    assert (np.triu(weights, 3) > 0).any()  # and sees past them


def ablated_document(config) -> dict:
    """gpt's graph with head 1 of the (one) block's attention multiplied by 0: split into the heads, scale, concat."""
    document = with_library(document_for("gpt", config))
    attention = document["groups"]["attention"]
    attention["nodes"] += [{"id": "per_head", "op": "split", "params": {"widths": list(config.head_dims)}},
                           {"id": "silence", "op": "scale", "params": {"by": 0}},
                           {"id": "together", "op": "concat"}]
    attention["edges"] = [e for e in attention["edges"] if e != {"from": "heads.out", "to": "wo.x"}] + [
        {"from": "heads.out", "to": "per_head.x"}, {"from": "per_head.out0", "to": "together.in"},
        {"from": "per_head.out1", "to": "silence.x"}, {"from": "silence.out", "to": "together.in"},
        {"from": "per_head.out2", "to": "together.in"}, {"from": "together.out", "to": "wo.x"}]
    return document


@pytest.mark.parametrize("backend", ["numpy", "cpu"])
def test_an_ablation_is_the_document_with_that_head_multiplied_by_zero(backend):
    """Two routes to one number: ablate= on the gpt, and a graph document scaling that head's columns by 0."""
    config = family("gpt").Config(vocab_size=20, seq_len=SEQ_LEN, d_model=24, n_layers=1, head_dims=(4, 8, 12),
                                  d_ff=40)
    gpt = family("gpt").build(config, get_backend(backend), TOKENIZER, 5)
    m = LoadedModel(gpt, "gpt", TOKENIZER, Path("model"), 2**30)
    graph = family("graph")
    edited = graph.build(graph.Config(vocab_size=20, graph=ablated_document(config), seq_len=SEQ_LEN),
                         get_backend(backend), TOKENIZER, 0)
    edited.params.from_host(gpt.params.to_host())
    other = LoadedModel(edited, "graph", TOKENIZER, Path("edited"), 2**30)
    ablated = m.trace(TEXT, ablate=["blocks.0.attn.heads[1]"])
    np.testing.assert_array_equal(ablated.logits, own_logits(other, ablated.ids))
    assert m.loss(TEXT, ablate=["blocks.0.attn.heads[1]"]) == other.loss(TEXT) != m.loss(TEXT)
    assert (ablated["blocks.0.attn.heads[1]"] == 0).all() and (ablated["blocks.0.attn.heads[2]"] != 0).any()


def test_a_mean_ablation_puts_the_texts_mean_at_every_position():
    m = loaded("gpt")
    clean = m.trace(TEXT)["blocks.1.attn.heads[2]"]
    meaned = m.trace(TEXT, ablate=["blocks.1.attn.heads[2]"], mode="mean")["blocks.1.attn.heads[2]"]
    np.testing.assert_allclose(meaned, np.broadcast_to(clean.mean(axis=0), clean.shape), rtol=1e-6)
    assert m.loss(TEXT, ablate="blocks.1.attn.heads[2]", mode="mean") != m.loss(TEXT)


@pytest.mark.parametrize("case", ["gpt", "ensemble", "hydra"])
def test_a_patch_from_the_same_text_changes_nothing(case):
    m = loaded(case)
    same = m.trace(TEXT)
    paths = same.paths()[1:4] + [same.attention_paths()[-1] + "[0]"]
    assert m.loss(TEXT, patch={p: same for p in paths}) == m.loss(TEXT)
    other_text = "srqponmlk jihgfedcba " * 2
    changed = m.loss(TEXT, patch={paths[0]: m.trace(other_text)})
    assert changed != m.loss(TEXT) and math.isfinite(changed)


def test_a_patch_of_another_length_or_model_is_refused_in_one_line():
    m = loaded("gpt")
    with pytest.raises(ConfigError, match="has 3 tokens and the text 42"):
        m.loss(TEXT, patch={"tok_emb": m.trace("abc")})
    narrower = family("gpt").Config(vocab_size=20, seq_len=SEQ_LEN, d_model=16, n_layers=1, head_dims=(4, 4, 8),
                                    d_ff=16)
    other = LoadedModel(family("gpt").build(narrower, get_backend("numpy"), TOKENIZER, 1), "gpt", TOKENIZER,
                        Path("other"), 2**30)
    with pytest.raises(ConfigError, match="16 wide, this model's 24"):
        m.loss(TEXT, patch={"blocks.0.ln1": other.trace(TEXT)})


@pytest.mark.parametrize(("path", "said"), [
    ("blocks.0.attn.head", "did you mean blocks.0.attn.heads"),
    ("blocks.0.ln1[0]", "[i] picks a head of an attention node"),
    ("blocks.0.attn.heads[3]", "has heads 0 .. 2"),
    ("final_nrom", "did you mean final_norm"),
])
def test_a_bad_path_names_the_near_ones(path, said):
    m = loaded("gpt")
    with pytest.raises(ConfigError, match=said.replace("[", r"\[").replace(".", r"\.")) as error:
        m.loss(TEXT, ablate=[path])
    assert "\n" not in str(error.value)


def test_every_head_is_scored_and_the_most_harmful_ranks_first():
    from microgpt.use.inspect import score_heads

    m = loaded("gpt")
    clean, heads = score_heads(m.graph, TEXT)
    assert clean == m.loss(TEXT)
    assert [(h.layer, h.head) for h in sorted(heads, key=lambda h: (h.layer, h.head))] == [
        (layer, head) for layer in range(2) for head in range(3)]
    assert [h.delta for h in heads] == sorted((h.delta for h in heads), reverse=True)
    assert all(h.loss == m.loss(TEXT, ablate=[h.path]) and h.delta == h.loss - clean for h in heads)
    assert {h.width for h in heads} == {4, 8, 12}


def test_on_the_cuda_backends_kernels_the_trace_is_the_models_own(emulated):
    """The cuda backend (its kernels on the CPU emulator): device values copied to the host, the attention
    weights by its masked softmax, an ablation through its arrays."""
    backend = emulated[0]
    config = family("gpt").Config(vocab_size=20, seq_len=SEQ_LEN, **FAMILIES["gpt"][1])
    m = LoadedModel(family("gpt").build(config, backend, TOKENIZER, 3), "gpt", TOKENIZER, Path("model"), 2**30)
    t = m.trace(TEXT)
    np.testing.assert_array_equal(t.logits, own_logits(m, t.ids))
    weights = t.attention(1, 2)
    np.testing.assert_allclose(weights.sum(axis=1), 1.0, atol=1e-5)
    assert (weights[np.triu_indices(len(TEXT), 1)] == 0).all()
    assert m.loss(TEXT, ablate=["blocks.0.attn.heads[1]"]) != m.loss(TEXT)
