"""Tiny graph documents for the ensemble's primitives (ops/ensemble.py), for the graph family's op tests
(test_graph_ops.py merges them with graph_cases.py's, in the same shape).

`OP_CASES` gives `zeros`, `prior` (the counter), `router` (global) and `mix` (grad routed) a case each;
`VARIANT_CASES` every other prior kind (bigram, trigram, calculator), each with and without `until_step`, the
context and gated routers, and the mix with grad equal. `PARITY_ONLY_CASES` names the grad-equal mix: its
backward gives each expert dmixed / n, the family's rule against collapse and not the objective's gradient, so
it is held to cpu/numpy parity only. A bigram or trigram prior's table is a frozen parameter (counted by
learn_from, never trained): the gradient check leaves it out, and here it keeps its init plus the checks' noise.

The op tests train nothing, so every case runs at optimiser step 0, training step 1: a prior with until_step 2
gives its signal (its last step on) and one with until_step 1 gives zeros. Such a switched-off prior feeds only
parameter-free nodes (add, concat): a weight reading its zeros would have a gradient of 0, which the gradient
check refuses for a trainable parameter. For the same reason the counter has no switched-off case (its signal
is its parameter); it shares the off path with every other kind.

The calculator needs a char tokenizer over digits, '+', '=', ' ' and newlines, so this module's CHARS is that
alphabet (out of sorted order, so an id is not a character's rank), a vocabulary of 14, for every case here.
The op tests' windows are random ids, which hardly ever hold a whole `X + Y =` line after a newline, so there
the calculator's features are its uniform rows; test_graph_ensemble.py checks it on real sums.

Every case is causal and passes the family's causality check. The shapes are awkward as in graph_cases.py:
odd widths, seq_len 5 or 7, two or three experts, one expert's logits given to a mix twice, values read by
several nodes.
"""

from __future__ import annotations

from graph_cases import document, emb, lin, with_head

CHARS = " \n+=0123456789"  # the calculator's characters and nothing else: a vocabulary of 14
VOCAB = len(CHARS)
OFF = 1  # until_step: off from step 1, so zeros in the op tests' (untrained) passes
LAST_ON = 2  # until_step: on in step 1 only, the op tests' step


def prior(node_id: str, kind: str, **params) -> dict:
    return {"id": node_id, "op": "prior", "params": {"kind": kind, **params}}


# ---- zeros ------------------------------------------------------------------------------------------


def zeros_case():
    """Two empty streams, one stream_dim (5) wide by default, one 3 wide: the first is the library stream_add's
    stream (a linear's write added, then narrowed to 4 columns) and is also added to the result; the second
    joins it by a concat."""
    nodes = [emb("emb", 4), {"id": "empty", "op": "zeros"}, {"id": "thin", "op": "zeros", "params": {"width": 3}},
             lin("write", "stream_dim"), {"id": "stream", "group": "stream_add", "params": {"active": 4}},
             {"id": "sum", "op": "add"}, {"id": "cat", "op": "concat"}]
    wires = ["tokens -> emb.ids", "emb.out -> write.x", "empty.out -> stream.stream", "write.out -> stream.write",
             "stream.stream -> sum.in", "empty.out -> sum.in", "sum.out -> cat.in", "thin.out -> cat.in"]
    return with_head(nodes, wires, "cat.out", dims={"stream_dim": 5})


# ---- prior ------------------------------------------------------------------------------------------


def counter_case():
    """A counter's learned signal per position (width stream_dim, 5) added to the embedding, read again by a
    linear; seq_len 7, the signal's rows."""
    nodes = [emb("emb", "stream_dim"), prior("count", "counter", width="stream_dim"), {"id": "sum", "op": "add"},
             lin("lin", 3), {"id": "cat", "op": "concat"}]
    wires = ["tokens -> emb.ids", "tokens -> count.ids", "emb.out -> sum.in", "count.out -> sum.in",
             "count.out -> lin.x", "sum.out -> cat.in", "lin.out -> cat.in"]
    return with_head(nodes, wires, "cat.out", dims={"stream_dim": 5}), 7


def counter_until_case():
    """The library counter_prior (width 3) with until_step 2: on in the step the op tests run, its last."""
    nodes = [emb("emb", 3), {"id": "count", "group": "counter_prior", "params": {"until_step": LAST_ON}},
             {"id": "sum", "op": "add"}]
    wires = ["tokens -> emb.ids", "tokens -> count.tokens", "emb.out -> sum.in", "count.write -> sum.in"]
    return with_head(nodes, wires, "sum.out", dims={"stream_dim": 3})


def ngram_case(kind: str):
    """The library ngram_prior of `kind` (its table row through a linear to stream_dim, 5) added to the
    embedding; seq_len 7."""
    nodes = [emb("emb", "stream_dim"), {"id": "table", "group": "ngram_prior", "params": {"kind": kind}},
             {"id": "sum", "op": "add"}]
    wires = ["tokens -> emb.ids", "tokens -> table.tokens", "emb.out -> sum.in", "table.write -> sum.in"]
    return with_head(nodes, wires, "sum.out", dims={"stream_dim": 5}), 7


def trigram_logits_case():
    """A trigram prior (until_step never, the word) through a logits node of its own, added to a model's
    logits as the bigram is added to a GPT's; its table row also read by a linear of width 3."""
    nodes = [emb("emb", 3), {"id": "main", "op": "logits"}, prior("tri", "trigram", until_step="never"),
             {"id": "tri_head", "op": "logits"}, lin("lin", 3, bias=False), {"id": "cat", "op": "concat"},
             {"id": "side", "op": "logits"}, {"id": "sum", "op": "add"}, {"id": "loss", "op": "cross_entropy"}]
    wires = ["tokens -> emb.ids", "tokens -> tri.ids", "emb.out -> main.x", "tri.out -> tri_head.x",
             "tri.out -> lin.x", "emb.out -> cat.in", "lin.out -> cat.in", "cat.out -> side.x",
             "main.out -> sum.in", "tri_head.out -> sum.in", "side.out -> sum.in", "sum.out -> logits",
             "sum.out -> loss.logits"]
    return document(nodes, wires)


def calculator_case():
    """The library calculator_prior (its features through a linear to stream_dim, 3) added to the embedding."""
    nodes = [emb("emb", "stream_dim"), {"id": "calc", "group": "calculator_prior"}, {"id": "sum", "op": "add"}]
    wires = ["tokens -> emb.ids", "tokens -> calc.tokens", "emb.out -> sum.in", "calc.write -> sum.in"]
    return with_head(nodes, wires, "sum.out", dims={"stream_dim": 3})


def switched_off_case(kind: str):
    """A prior of `kind` with until_step 1 (zeros: the op tests run step 1), [T, vocab], joined to a 3-wide
    embedding by a concat and added to a vocab-wide linear of it (parameter-free readers: see the docstring)."""
    nodes = [emb("emb", 3), prior("off", kind, until_step=OFF), lin("wide", VOCAB), {"id": "sum", "op": "add"},
             {"id": "cat", "op": "concat"}]
    wires = ["tokens -> emb.ids", "tokens -> off.ids", "emb.out -> wide.x", "wide.out -> sum.in",
             "off.out -> sum.in", "emb.out -> cat.in", "off.out -> cat.in", "sum.out -> cat.in"]
    return with_head(nodes, wires, "cat.out")


def calculator_until_case():
    """A calculator that stays on (until_step 2) through a linear of width 3, beside one switched off (until_step
    1) added to a vocab-wide linear; seq_len 7."""
    nodes = [emb("emb", 3), prior("calc", "calculator", until_step=LAST_ON), lin("proj", 3, bias=False),
             prior("off", "calculator", until_step=OFF), lin("wide", VOCAB), {"id": "sum", "op": "add"},
             {"id": "cat", "op": "concat"}]
    wires = ["tokens -> emb.ids", "tokens -> calc.ids", "tokens -> off.ids", "calc.out -> proj.x",
             "emb.out -> wide.x", "wide.out -> sum.in", "off.out -> sum.in", "emb.out -> cat.in",
             "proj.out -> cat.in", "sum.out -> cat.in"]
    return with_head(nodes, wires, "cat.out"), 7


# ---- router and mix ---------------------------------------------------------------------------------


def experts(mixed: list[str]) -> tuple[list[dict], list[str]]:
    """An embedding of width 5 and the experts' logits among `mixed`: of the embedding (a), of a GELU of a
    3-wide linear of it (b; the linear's output is the router's stream either way), of its causal prefix mean
    (c). An expert left out is not built: its weights would reach no loss."""
    nodes = [emb("emb", 5), {"id": "a", "op": "logits"}, lin("down", 3), {"id": "act", "op": "gelu"},
             {"id": "b", "op": "logits"}, {"id": "pm", "op": "prefix_mean"}, {"id": "c", "op": "logits"}]
    wires = ["tokens -> emb.ids", "emb.out -> a.x", "emb.out -> down.x", "down.out -> act.x", "act.out -> b.x",
             "emb.out -> pm.x", "pm.out -> c.x"]
    unused = {"a", "b", "c"} - set(mixed)
    return ([n for n in nodes if n["id"] not in unused],
            [w for w in wires if w.split(" -> ")[1].split(".")[0] not in unused])


def routed_case(kind: str, mixed: list[str], epsilon: float | None = None, grad: str = "routed", seq_len: int = 5):
    """A router of `kind` over len(mixed) experts reading the 3-wide stream, its weights mixing the experts'
    logits `mixed` (in order; one may come twice) under `grad`: the graph's logits and its loss."""
    nodes, wires = experts(mixed)
    params = {"kind": kind, "experts": len(mixed)}
    if epsilon is not None:
        params["epsilon"] = epsilon
    nodes += [{"id": "router", "op": "router", "params": params}, {"id": "mix", "op": "mix", "params": {"grad": grad}},
              {"id": "loss", "op": "cross_entropy"}]
    wires += ["tokens -> router.ids", "down.out -> router.stream", "router.weights -> mix.weights",
              *(f"{name}.out -> mix.logits" for name in mixed), "mix.out -> logits", "mix.out -> loss.logits"]
    return document(nodes, wires), seq_len


OP_CASES = {
    "zeros": zeros_case,
    "prior": counter_case,
    "router": lambda: routed_case("global", ["a", "b", "c"]),  # epsilon 0.2, the default
    "mix": lambda: routed_case("context", ["b", "a", "b"], epsilon=0.35, seq_len=7),  # b twice
}

VARIANT_CASES = {
    "prior_counter_until": counter_until_case,
    "prior_bigram": lambda: ngram_case("bigram"),
    "prior_bigram_off": lambda: switched_off_case("bigram"),
    "prior_trigram": trigram_logits_case,
    "prior_trigram_off": lambda: switched_off_case("trigram"),
    "prior_calculator": calculator_case,
    "prior_calculator_until": calculator_until_case,
    "router_context": lambda: routed_case("context", ["c", "b"], epsilon=0.0),  # two experts
    "router_gated": lambda: routed_case("gated", ["a", "b", "c"], epsilon=0.1, seq_len=7),
    "mix_equal": lambda: routed_case("gated", ["b", "a", "b"], grad="equal", seq_len=7),
}

# grad equal gives each expert's logits dmixed / n by design, not their gradient: parity only
PARITY_ONLY_CASES = {"mix_equal"}
