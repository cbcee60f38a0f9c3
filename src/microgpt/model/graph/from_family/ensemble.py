"""The cooperative ensemble as a graph, with the library groups of library/ensemble.yaml:

    prior (ngram_prior, calculator_prior or counter_prior; or `zeros` for --prior none) -> narrow
    expert1 -> stream1 (s + write, narrowed) -> expert2 -> stream2 -> ... -> router -> mix -> cross_entropy

Every expert reads the token ids and the stream so far; its logits go to the mix, in order, and the last stream
to the router. The prior's, the router's parameters have the family's names (prior.table, prior.proj.w,
prior.signal, router.*); transformer expert i (numbered from 1, the prior being expert 0, as the docs
number them) is expert<i>.<rest> here and experts.<i - 1>.<rest> there (a node id cannot be a number), in the family's order and with its inits, so the same seed draws the same weights (the prior's
projection without its bias and at the old init for a checkpoint saved before it had one).
"""

from __future__ import annotations

from microgpt.model.family import family
from microgpt.model.graph.document import FORMAT_VERSION, VERSION_KEY
from microgpt.model.graph.from_family.gpt import edge
from microgpt.model.priors import OLD_PROJECTION_STD

PRIOR_GROUPS = {"bigram": "ngram_prior", "trigram": "ngram_prior", "calculator": "calculator_prior",
                "counter": "counter_prior"}


def prior_nodes(config) -> tuple[list[dict], list[dict], str]:
    """(nodes, edges, the stream's first value) of what the stream holds before the first expert."""
    if config.prior == "none":
        return [{"id": "empty", "op": "zeros"}], [], "empty.out"
    params = {"until_step": config.prior_off_at}
    if config.prior in ("bigram", "trigram"):
        params["kind"] = config.prior
    if config.prior != "counter" and not config.prior_bias:  # a checkpoint saved before the projection had one
        params.update(proj_bias=False, proj_init=OLD_PROJECTION_STD)
    nodes = [{"id": "prior", "group": PRIOR_GROUPS[config.prior], "params": params},
             {"id": "prior_narrow", "op": "narrow", "params": {"keep": "active_dims"}}]
    edges = [edge("tokens", "prior.tokens"), edge("prior.write", "prior_narrow.x")]
    return nodes, edges, "prior_narrow.out"


def document(config) -> dict:
    """The graph document of an ensemble with this EnsembleConfig."""
    prior, edges, stream = prior_nodes(config)
    nodes = []
    for i, spec in enumerate(config.experts):
        expert, after = f"expert{i + 1}", f"stream{i + 1}"  # the prior is expert 0
        params = {"d": spec.d_model, "heads": list(spec.head_dims), "d_ff": config.d_ff(spec),
                  "n_layers": spec.n_layers}
        if config.expert_init == "torch":  # the group's defaults are He's (and the stream's N(0, 1/d_in))
            params.update(init="torch", stream_init="torch")
        nodes += [{"id": expert, "group": "expert", "params": params},
                  {"id": after, "group": "stream_add", "params": {"active": "active_dims"}}]
        edges += [edge("tokens", f"{expert}.tokens"), edge(stream, f"{expert}.stream"),
                  edge(stream, f"{after}.stream"), edge(f"{expert}.write", f"{after}.write")]
        stream = f"{after}.stream"
    experts = len(config.experts)
    nodes += [{"id": "router", "op": "router",
               "params": {"kind": config.router, "experts": experts, "epsilon": config.router_epsilon}},
              {"id": "mix", "op": "mix", "params": {"grad": config.expert_grad}},
              {"id": "loss", "op": "cross_entropy"},
              *prior]  # listed last, so its parameters are drawn last, as the family draws them
    edges += [edge("tokens", "router.ids"), edge(stream, "router.stream"), edge("router.weights", "mix.weights"),
              *(edge(f"expert{i}.logits", "mix.logits") for i in range(1, experts + 1)),
              edge("mix.out", "loss.logits"), edge("mix.out", "logits")]
    return {VERSION_KEY: FORMAT_VERSION, "description": f"from-family {family('ensemble').describe(config)}",
            "dims": {"stream_dim": config.stream_dim, "active_dims": config.active}, "nodes": nodes, "edges": edges}


def graph_name(name: str) -> str:
    """An ensemble parameter's name in its graph: experts.<i>.<rest> is expert<i + 1>.<rest>; the rest the same."""
    if name.startswith("experts."):
        index, rest = name.removeprefix("experts.").split(".", 1)
        return f"expert{int(index) + 1}.{rest}"
    return name
