"""The cooperative ensemble's settings, each declared once (core/fields.py), and its experts' shapes.

`--cooperative d64n3,d64n3,...` chooses this family (registry.FAMILIES "ensemble"), one transformer expert
per spec (model/specs.py), a width without a head count read as the original reads it (d64: four heads of 16),
and kept with its heads spelled out (d4x16n3). The other settings keep the original µGPT's names.
The experts start at torch's spread or He's (`expert_init`); a checkpoint saved before torch's became the
default says neither, and started at He's (`upgrade_saved` reads it so).
`prior_bias` is no setting: it is False only in a checkpoint saved before the prior's projection had a bias
(`upgrade_saved` reads such a config, and its one-head experts, as they were trained).
"""

from __future__ import annotations

from dataclasses import dataclass

from microgpt.core.checks import NUMBER, SPEC_LIST, Choice, whole
from microgpt.core.errors import ConfigError, Named, Placeholder
from microgpt.core.fields import check_model_fields, setting
from microgpt.model.priors import MAX_TRIGRAM_ENTRIES
from microgpt.model.router import KINDS as ROUTERS
from microgpt.model.specs import EXPERT_GRAMMAR, ModelSpec, expert_text, one_head_text, parse_spec_list

PRIORS = ("none", "counter", "bigram", "trigram", "calculator")
EXPERT_GRADS = ("equal", "routed")
EXPERT_INITS = ("he", "torch")
FF_PER_D_MODEL = 4  # an expert's d_ff without ff<d_ff> in its spec


@dataclass
class EnsembleConfig:
    vocab_size: int
    cooperative: str | None = setting(
        None, "train a cooperative ensemble: one transformer expert per spec, in order (the --compare syntax, e.g. "
        f"d64n3,d64n3,d64n3,d64n3), sharing a narrow stream; {EXPERT_GRAMMAR}; chooses --family ensemble", SPEC_LIST,
        shown_default="none (no ensemble)", metavar="SPECS")
    stream_dim: int = setting(64, "the width B of the stream the ensemble's experts read and write", whole(1),
                              metavar="B")
    active_dims: int | None = setting(None, "zero the stream beyond its first A columns after every expert (a "
                                      "narrower channel at the same shapes)", whole(1), shown_default="--stream-dim",
                                      metavar="A")
    prior: str = setting("none", "a stream-only expert 0 before the transformer experts: counter (a learned "
                         "positional signal), bigram or trigram (next-token tables counted from the training text, "
                         "never trained), calculator (the next digit of X + Y = ...), or none", Choice(lambda: PRIORS),
                         metavar="KIND")
    prior_off_at: int | None = setting(None, "from this step on, the prior no longer writes into the stream",
                                       whole(1), shown_default="never", metavar="STEP")
    router: str = setting("global", "how the experts' next-token logits are mixed per position: global (a map of "
                          "the mean of the stream so far), context (of a running sum of embeddings), gated (of a "
                          "running sum with a learned reset)", Choice(lambda: ROUTERS), metavar="KIND")
    router_epsilon: float = setting(0.2, "the router's floor: weights (1 - e) softmax + e / experts", NUMBER,
                                    metavar="E")
    expert_grad: str = setting("equal", "what each expert's logits get of the mixed logits' gradient: equal (a "
                               "share of 1/experts, the original's rule against collapse) or routed (its router "
                               "weight: the true gradient)", Choice(lambda: EXPERT_GRADS), metavar="RULE")
    expert_init: str = setting("torch", "how the experts' weight matrices start: torch (N(0, 1/(3 d_in)) for every "
                               "one, the spread of torch's default, which holds out better: docs/ensemble.md) or he "
                               "(N(0, 2/d_in), and N(0, 1/d_in) for the stream's read and write)",
                               Choice(lambda: EXPERT_INITS), metavar="KIND")
    seq_len: int = setting(64, "context length in tokens (characters with the char tokenizer)", whole(1),
                           metavar="T")
    prior_bias: bool = True  # the prior's projection has a bias (not in checkpoints saved before it)

    def __post_init__(self) -> None:
        check_model_fields(self)
        if self.cooperative is None:
            raise ConfigError("an ensemble needs its experts: ", Named("cooperative", Placeholder("SPECS")),
                              ", e.g. d64n3,d64n3", key="cooperative")
        if not isinstance(self.prior_bias, bool):
            raise ConfigError(f"prior_bias must be true or false, got {self.prior_bias!r}")
        self.cooperative = ",".join(expert_text(spec) for spec in self.experts)  # checked once, its heads spelled out
        if self.active_dims is not None and self.active_dims > self.stream_dim:
            raise ConfigError(Named("active_dims", self.active_dims), " is wider than the stream (",
                              Named("stream_dim", self.stream_dim), f"); give at most {self.stream_dim}")
        if self.active_dims == self.stream_dim:
            self.active_dims = None  # the whole stream: one way to say it, so a resume that says it agrees
        if self.prior == "trigram" and (self.vocab_size + 1) * self.vocab_size**2 > MAX_TRIGRAM_ENTRIES:
            raise ConfigError(Named("prior", "trigram"), " counts a table of (V + 1) x V x V = "
                              f"{(self.vocab_size + 1) * self.vocab_size**2:,} entries for this vocabulary of "
                              f"{self.vocab_size} tokens; use ", Named("prior", "bigram"), ", or the char tokenizer")
        if not 0 <= self.router_epsilon <= 1:
            raise ConfigError(Named("router_epsilon"), f" must be between 0 and 1, got {self.router_epsilon}")

    @property
    def experts(self) -> list[ModelSpec]:
        return parse_spec_list(self.cooperative, "cooperative", expert=True)

    @property
    def active(self) -> int:
        """The stream's columns in use."""
        return self.stream_dim if self.active_dims is None else self.active_dims

    @staticmethod
    def d_ff(spec: ModelSpec) -> int:
        return spec.d_ff or FF_PER_D_MODEL * spec.d_model


def upgrade_saved(model: dict) -> dict:
    """A saved config as this microgpt reads it. One saved without expert_init started its experts at He's
    spread, the default then, and says so here (a resume or a graph of it keeps its init). One saved before the
    prior's projection had a bias (it has no prior_bias) read a width without a head count as one head of that
    width: its experts are written so here, and its projection has no bias, so that it loads as it was
    trained."""
    if not isinstance(model.get("cooperative"), str):
        return model
    if "expert_init" not in model:
        model = {**model, "expert_init": "he"}
    if "prior_bias" in model:
        return model
    try:
        experts = ",".join(one_head_text(text) for text in model["cooperative"].split(","))
    except ConfigError:
        return model  # a damaged spec: the load says what is wrong with it
    return {**model, "cooperative": experts, "prior_bias": False}
