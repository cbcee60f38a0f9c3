"""A graph's KV-cache decoder (model/graph/decode.py): gpt's graph decodes as the gpt family's own Decoder, bit for
bit, from a prompt through steps past seq_len (the rings slide); a graph whose logits read a position-mixing op a
cache cannot hold (a prefix mean) falls back to the exact rerun; and sampling (microgpt.use.sample) runs on
either."""

from __future__ import annotations

import numpy as np
import pytest

from microgpt.backends import get_backend
from microgpt.data.tokenizer import CharTokenizer
from microgpt.model.decode import Rerun
from microgpt.model.family import family
from microgpt.model.graph.decode import GraphDecoder, blocker
from microgpt.model.graph.from_family import document_for
from microgpt.use.sample import generate

TOKENIZER = CharTokenizer("abcdefghijk")
VOCAB = TOKENIZER.size
SEQ_LEN = 8
GPT_SHAPE = {"d_model": 12, "n_layers": 3, "head_dims": (4, 8), "d_ff": 16, "seq_len": SEQ_LEN}


def gpt_pair(backend_name: str, seed: int = 3):
    """(the gpt family's model, its graph's) with the same seed, weights moved off their init."""
    gpt, graph = family("gpt"), family("graph")
    config = gpt.Config(vocab_size=VOCAB, **GPT_SHAPE)
    be = get_backend(backend_name)
    ours = graph.build(graph.Config(vocab_size=VOCAB, graph=document_for("gpt", config), seq_len=SEQ_LEN), be,
                       TOKENIZER, seed)
    return gpt.build(config, be, TOKENIZER, seed), ours


def decoded(decoder, prompt: np.ndarray, tokens: list[int]) -> list[np.ndarray]:
    """Host logits (1, vocab) after the prompt, then after each token stepped in."""
    be = decoder.model.be
    found = [be.to_host(decoder.prefill(prompt))]
    found += [be.to_host(decoder.step(token)) for token in tokens]
    return found


@pytest.mark.parametrize("backend_name", ["numpy", "cpu"])
@pytest.mark.parametrize("prompt_length", [1, 5, SEQ_LEN, SEQ_LEN + 3])  # the last is cropped to seq_len
def test_gpts_graph_decodes_as_gpt_bit_for_bit(backend_name, prompt_length):
    theirs, ours = gpt_pair(backend_name)
    decoder = ours.decoder()
    assert isinstance(decoder, GraphDecoder)
    rng = np.random.default_rng(prompt_length)
    prompt = rng.integers(0, VOCAB, size=prompt_length)  # (n,)
    tokens = [int(t) for t in rng.integers(0, VOCAB, size=2 * SEQ_LEN + 3)]  # past seq_len: the rings slide
    expected = decoded(theirs.decoder(), prompt, tokens)
    got = decoded(decoder, prompt, tokens)
    assert decoder.consumed == prompt_length + len(tokens) and decoder.length == SEQ_LEN
    for want, have in zip(expected, got, strict=True):
        assert have.shape == (1, VOCAB)
        np.testing.assert_array_equal(have, want)


def test_the_decoder_agrees_with_the_full_forward_while_the_context_fits():
    _, model = gpt_pair("numpy")
    ids = np.random.default_rng(0).integers(0, VOCAB, size=SEQ_LEN)  # (T,)
    full = model.be.to_host(model.logits(ids[None, :]))  # (T, vocab)
    got = decoded(model.decoder(), ids[:3], [int(t) for t in ids[3:]])
    np.testing.assert_allclose(np.concatenate(got), full[2:], rtol=0, atol=1e-5)


def test_lookaheads_graph_caches_its_trunk_and_decodes_as_the_family():
    """The gap heads (gap masks, not cacheable) lie off the path to the logits, so they do not stop the cache."""
    lookahead, graph = family("lookahead"), family("graph")
    config = lookahead.Config(vocab_size=VOCAB, **GPT_SHAPE, lookahead=2, lookahead_mode="gap")
    be = get_backend("numpy")
    theirs = lookahead.build(config, be, TOKENIZER, 5)
    ours = graph.build(graph.Config(vocab_size=VOCAB, graph=document_for("lookahead", config), seq_len=SEQ_LEN), be,
                       TOKENIZER, 5)
    prompt, tokens = np.array([1, 2, 3]), [4, 5, 6, 7, 8, 9, 10, 0, 1, 2]
    decoder = ours.decoder()
    assert isinstance(decoder, GraphDecoder)
    for want, have in zip(decoded(theirs.decoder(), prompt, tokens), decoded(decoder, prompt, tokens), strict=True):
        np.testing.assert_array_equal(have, want)


def prefix_mean_graph() -> dict:
    """gpt's graph of GPT_SHAPE with the token embedding's causal prefix mean added to it before the blocks."""
    config = family("gpt").Config(vocab_size=VOCAB, **GPT_SHAPE)
    document = document_for("gpt", config)
    document["nodes"][1:1] = [{"id": "context", "op": "prefix_mean"}, {"id": "mixed", "op": "add"}]
    document["edges"] = [e for e in document["edges"] if e != {"from": "tok_emb.out", "to": "blocks.x"}] + [
        {"from": "tok_emb.out", "to": "context.x"}, {"from": "tok_emb.out", "to": "mixed.in"},
        {"from": "context.out", "to": "mixed.in"}, {"from": "mixed.out", "to": "blocks.x"}]
    return document


def prefix_mean_model():
    graph = family("graph")
    return graph.build(graph.Config(vocab_size=VOCAB, graph=prefix_mean_graph(), seq_len=SEQ_LEN),
                       get_backend("numpy"), TOKENIZER, 0)


def test_a_graph_with_an_op_no_cache_holds_reruns():
    model = prefix_mean_model()
    assert blocker(model.program).where == "context"
    decoder = model.decoder()
    assert isinstance(decoder, Rerun)
    ids = np.random.default_rng(1).integers(0, VOCAB, size=SEQ_LEN + 4)  # (T + 4,)
    got = decoded(decoder, ids[:2], [int(t) for t in ids[2:]])
    for end, logits in zip(range(2, len(ids) + 1), got, strict=True):  # each the model on the last seq_len tokens
        window = ids[max(0, end - SEQ_LEN) : end][None, :]  # (1, <= T)
        np.testing.assert_array_equal(logits, model.be.to_host(model.logits(window))[-1:])


def test_sampling_runs_through_either_decoder():
    theirs, ours = gpt_pair("numpy")
    n_tokens = 3 * SEQ_LEN  # past seq_len, where the cache slides
    text = generate(ours, TOKENIZER, "abc", n_tokens, temperature=0.0)
    assert len(text) == n_tokens and text == generate(theirs, TOKENIZER, "abc", n_tokens, temperature=0.0)
    drawn = generate(ours, TOKENIZER, "ab", n_tokens, temperature=1.0, seed=4)
    assert drawn == generate(theirs, TOKENIZER, "ab", n_tokens, temperature=1.0, seed=4)
    rerun = prefix_mean_model()
    cached_face = generate(rerun, TOKENIZER, "abc", n_tokens, temperature=0.8, seed=2)
    assert len(cached_face) == n_tokens
    assert cached_face == generate(rerun, TOKENIZER, "abc", n_tokens, temperature=0.8, seed=2, cache=False)


def one_layer_graph() -> dict:
    """One layer of two attention nodes side by side over LN(embedding): one with a stand-alone RoPE on queries
    and keys (its heads cut differently from the attention's, so the compiler leaves it unfused), one without."""
    def edges(*pairs: str) -> list[dict]:
        return [{"from": a, "to": b} for a, b in (pair.split(" -> ") for pair in pairs)]

    nodes = [{"id": "emb", "op": "embedding"}, {"id": "ln", "op": "layer_norm"}]
    wiring = ["tokens -> emb.ids", "emb.out -> ln.x"]
    for name, rope in (("rotated", True), ("plain", False)):
        nodes += [{"id": f"{name}_{p}", "op": "linear", "params": {"out": "d"}} for p in "qkv"]
        nodes.append({"id": f"{name}_attn", "op": "attention", "params": {"heads": 2}})
        wiring += [f"ln.out -> {name}_{p}.x" for p in "qkv"] + [f"{name}_v.out -> {name}_attn.v"]
        if rope:
            nodes += [{"id": f"{name}_rope_{p}", "op": "rope", "params": {"heads": 1}} for p in "qk"]
            wiring += [f"{name}_{p}.out -> {name}_rope_{p}.x" for p in "qk"]
            wiring += [f"{name}_rope_{p}.out -> {name}_attn.{p}" for p in "qk"]
        else:
            wiring += [f"{name}_{p}.out -> {name}_attn.{p}" for p in "qk"]
    nodes += [{"id": "sum", "op": "add"}, {"id": "head", "op": "logits"}, {"id": "loss", "op": "cross_entropy"}]
    wiring += ["emb.out -> sum.in", "rotated_attn.out -> sum.in", "plain_attn.out -> sum.in", "sum.out -> head.x",
               "head.out -> loss.logits", "head.out -> logits"]
    return {"microgpt_graph": 1, "dims": {"d": 8}, "nodes": nodes, "edges": edges(*wiring)}


def test_a_stand_alone_rope_and_attention_without_rope_are_cached():
    """With one layer of position mixing, the sliding cache is the cropped rerun at every length (RoPE scores
    depend on distances alone), so the two agree to rounding well past seq_len."""
    graph = family("graph")
    model = graph.build(graph.Config(vocab_size=VOCAB, graph=one_layer_graph(), seq_len=SEQ_LEN),
                        get_backend("numpy", dtype=np.float64), TOKENIZER, 1)
    assert {node.op.name for node in model.program.nodes} >= {"rope", "attention"}  # unfused, as meant
    decoder = model.decoder()
    assert isinstance(decoder, GraphDecoder) and len(decoder.rings) == 2
    ids = np.random.default_rng(6).integers(0, VOCAB, size=3 * SEQ_LEN)  # (3T,)
    cached = decoded(decoder, ids[:4], [int(t) for t in ids[4:]])
    rerun = decoded(Rerun(model), ids[:4], [int(t) for t in ids[4:]])
    np.testing.assert_allclose(np.concatenate(cached), np.concatenate(rerun), rtol=0, atol=1e-10)
