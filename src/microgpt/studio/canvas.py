"""Each model family's settings as a chain of typed components, each owning some settings.

The node editor (static/editor_*.js) shows a family's shape components in its inspector, draws the family's
own graph for them (studio/graph_api.py), and saves a family run as this chain (studio/compose.py checks it).

A component has a kind, a title, the type of value it takes (`accepts`) and gives (`gives`), and the setting
keys it owns (the train flags' YAML keys, whose checks are the CLI's). A connection joins a component that
gives a type to one that accepts it. A model is one chain: the data (text, tokenizer, context), then the
family's components, then the training settings. A `repeated` component may appear several times in the
chain (the ensemble's experts); its one key takes each copy's value, joined by commas in chain order.

Each family is one entry of FAMILY_CANVAS. Adding a family is one entry here (with a `template` of values
that make a valid first model); only the families registered in registry.FAMILIES are offered.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from microgpt.core.checks import Choice, Switch
from microgpt.core.registry import FAMILIES
from microgpt.settings.known import known_settings


@dataclass(frozen=True)
class Component:
    kind: str  # unique across the canvas: "blocks", "expert"
    title: str
    accepts: str | None  # the type of its input (None: a source)
    gives: str | None  # the type of its output (None: the end of the chain)
    keys: tuple[str, ...] = ()  # the settings it owns
    repeated: bool = False  # may appear several times; its single key's values join with commas
    note: str = ""  # one line on what it is


@dataclass(frozen=True)
class FamilyCanvas:
    label: str
    components: tuple[Component, ...]  # in chain order, between the data and the training
    template: dict = field(default_factory=dict)  # kind -> values (a list of them for a repeated kind)


DATA = Component("data", "data", None, "tokens", ("file", "tokenizer", "vocab_size", "seq_len"),
                 note="the text, its tokenizer and the context length")
TRAINING = Component("training", "training", "logits", None,
                     ("steps", "batch_size", "lr", "warmup", "lr_schedule", "weight_decay", "grad_clip",
                      "val_tokens", "eval_every", "save_every", "seed", "backend", "threads", "gen"),
                     note="how the model trains, and where")
# Written into every new canvas: one thread per run, so that several runs share the cores.
TRAINING_TEMPLATE = {"threads": "1"}

FAMILY_CANVAS: dict[str, FamilyCanvas] = {
    "gpt": FamilyCanvas("GPT", (
        Component("embedding", "embedding", "tokens", "vectors", ("d_model",),
                  note="token embedding (rotary positions in attention)"),
        Component("blocks", "blocks", "vectors", "vectors", ("n_layers", "heads", "d_ff"),
                  note="pre-LayerNorm transformer blocks: attention heads and a ReLU feed-forward"),
        Component("head", "head", "vectors", "logits", (), note="final LayerNorm and the untied output head"),
    )),
    "ensemble": FamilyCanvas("cooperative ensemble", (
        Component("prior", "prior", "tokens", "stream", ("prior", "prior_off_at"),
                  note="a stream-only expert 0 (none, counter, bigram, trigram, calculator)"),
        Component("expert", "expert", "stream", "stream", ("cooperative",), repeated=True,
                  note="one transformer expert: a spec such as d4x16n2 (heads, layers, optional ff)"),
        Component("stream", "stream", "stream", "stream", ("stream_dim", "active_dims", "expert_init"),
                  note="the narrow stream the experts read and write, and how their weights start"),
        Component("router", "router", "stream", "logits", ("router", "router_epsilon", "expert_grad"),
                  note="mixes the experts' next-token logits per position"),
    ), template={"expert": ["d4x16n2", "d4x16n2"]}),
    "lookahead": FamilyCanvas("lookahead", (
        Component("trunk", "trunk", "tokens", "vectors", ("d_model", "n_layers", "heads", "d_ff"),
                  note="the shared transformer trunk"),
        Component("heads", "heads", "vectors", "logits",
                  ("lookahead", "lookahead_mode", "head_layers", "lookahead_weight", "lookahead_distill"),
                  note="K extra heads: each a token further ahead (mtp) or the next token behind a gap, and their loss weight"),
    )),
}


# Registered families with no chain of settings, and why.
NOT_ON_CANVAS = {"graph": "its model is its document, which the node editor draws and edits as nodes and wires; "
                          "it has no shape settings of its own"}


def offered_families() -> list[str]:
    """The families the canvas offers: those described here and registered."""
    return [name for name in FAMILY_CANVAS if name in FAMILIES]


def components_of(family_name: str) -> tuple[Component, ...]:
    """The whole chain's components for a family: the data, the family's own, the training."""
    return (DATA, *FAMILY_CANVAS[family_name].components, TRAINING)


def setting_description(key: str) -> dict:
    """A setting as the canvas shows it: its flag, help, default and the kind of input it takes."""
    f = known_settings()[key]
    entry = {"key": key, "flag": f.flag, "help": f.help, "default": f.default_text, "input": "text"}
    if isinstance(f.check, Switch):
        entry["input"] = "switch"
    elif isinstance(f.check, Choice):
        entry["input"], entry["options"] = "choice", list(f.check.options)
    return entry


def canvas_description() -> dict:
    """Everything the page needs to draw and type-check a canvas, as JSON."""
    families = {}
    for name in offered_families():
        described = FAMILY_CANVAS[name]
        families[name] = {"label": described.label,
                          "components": [asdict(c) for c in components_of(name)],
                          "template": {"training": TRAINING_TEMPLATE, **described.template}}
    keys = {key for name in families for c in components_of(name) for key in c.keys}
    return {"families": families, "settings": {key: setting_description(key) for key in sorted(keys)}}
