"""The lookahead family's settings: GPT's trunk (its settings, declared once in model/gpt/config.py) and the
extra heads, each setting declared once here.

`--lookahead K` adds K heads beside the main next-token head. In mode "mtp" head k predicts the token at
t + 1 + k from positions <= t (multi-token prediction); in mode "gap" head k predicts the token at t + 1
while the k positions after t are hidden from it and the positions after them are seen (fill in the
middle); in mode "hydra" head k predicts the token at t + 1 + k from the trunk's state at t and the embeddings
of the tokens t + 1 .. t + k (the true ones in training, the drafted ones while sampling: Ankner et al. 2024,
"Hydra"). No head reads the token it is asked for (docs/lookahead.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from microgpt.core.checks import Choice, NonNegativeNumber, Number, Whole, whole
from microgpt.core.errors import ConfigError, Named
from microgpt.core.fields import setting
from microgpt.model.attention import MAX_HEADS
from microgpt.model.gpt.config import GPTConfig
from microgpt.model.gpt.config import config_from as trunk_config_from

MODES = ("mtp", "gap", "hydra")


class HeadCount(Whole):
    """K, from 1 to MAX_HEADS; zero or a negative count is explained (the original's -1 is its leaky future head)."""

    def __init__(self):
        super().__init__(1, MAX_HEADS)

    def validate(self, value):
        if isinstance(value, int) and not isinstance(value, bool) and value < 1:
            raise ValueError(
                "a whole number K of at least 1 (the extra heads, head k predicting k tokens further ahead); "
                "0 would be a plain GPT (--family gpt), and the original µGPT's -1, a 'future' head whose mask "
                "shows it the token it predicts, is not offered because it learns nothing sound (docs/lookahead.md)")
        return super().validate(value)


class Share(Number):
    """A finite float from 0 to 1."""

    kind = "a number from 0 to 1"

    def validate(self, value):
        value = super().validate(value)
        if not 0 <= value <= 1:
            raise ValueError(self.kind)
        return value


@dataclass
class LookaheadConfig(GPTConfig):
    lookahead: int = setting(2, "extra heads K beside the next-token head: head k predicts the token k after the "
                             "next one (--lookahead-mode hydra or mtp), or the next token with it and the k - 1 after it "
                             "hidden (gap); chooses --family lookahead", HeadCount(), metavar="K")
    lookahead_mode: str = setting("hydra", "what the extra heads learn: hydra, the default (head k predicts the "
                                  "token at t+1+k from the trunk's state at t and the tokens t+1..t+k, drafted ones "
                                  "while sampling: drafts for sample --speculative that see the next token), mtp "
                                  "(head k predicts the token at t+1+k from positions up to t, and drafts for "
                                  "sample --speculative) or gap (head k predicts the token at t+1 seeing up to t "
                                  "and from t+k+1 on: fill in the middle)", Choice(lambda: MODES), metavar="MODE")
    head_layers: int = setting(1, "blocks in each extra head, between the shared trunk and the head's own "
                               "output layer (0, mode mtp only: a linear head on the trunk's last state; in mode "
                               "hydra, feed-forward layers that read the tokens)", whole(0),
                               metavar="N")
    lookahead_weight: float = setting(1.0, "the extra heads' share of the loss: main loss + W x their mean loss",
                                      NonNegativeNumber(), metavar="W")
    lookahead_distill: float = setting(0.0, "modes mtp and hydra: the share B of each extra head's loss taken "
                                       "against the main head's distribution at the token it predicts instead of the true "
                                       "token (self-distillation, for drafts that sample --speculative keeps): "
                                       "(1 - B) x CE(true token) + B x CE(main head's)", Share(), metavar="B")

    def __post_init__(self) -> None:
        super().__post_init__()  # the trunk's checks, and every setting's (config.check_fields)
        mtp, gap = Named("lookahead_mode", "mtp"), Named("lookahead_mode", "gap")
        distill = Named("lookahead_distill")
        if self.lookahead_distill and self.lookahead_mode == "gap":
            raise ConfigError(distill, " teaches mtp heads the main head's guess at the token they predict; a gap "
                              "head sees text after its token, so the main head has nothing to teach it: drop ",
                              distill, ", or use ", mtp)
        if self.head_layers == 0 and self.lookahead_mode in ("gap", "hydra"):
            reads = ("the block that reads past its gap, so it would only repeat the main head" if
                     self.lookahead_mode == "gap" else "the layer that reads the tokens after its position, so it "
                     "would only repeat an mtp head")
            raise ConfigError(Named("head_layers", 0), f" leaves a {self.lookahead_mode} head without {reads}; "
                              "give ", Named("head_layers", 1), " or more, or ", mtp)
        lookahead, seq_len = Named("lookahead", self.lookahead), Named("seq_len", self.seq_len)
        if self.lookahead_mode == "gap" and self.lookahead >= self.seq_len - 1:
            raise ConfigError(lookahead, " with ", gap, f" hides a gap of up to {self.lookahead} positions, so "
                              "large that the context (", seq_len, f") shows head {self.lookahead} nothing beyond "
                              "it; give a ", Named("lookahead"), f" below {self.seq_len - 1}, or a longer ",
                              Named("seq_len"))
        if self.lookahead >= self.seq_len:
            raise ConfigError(lookahead, f" asks head {self.lookahead} for the token {self.lookahead + 1} positions "
                              "ahead, past the end of every window of ", seq_len, "; give a ", Named("lookahead"),
                              f" below {self.seq_len}, or a longer ", Named("seq_len"))

    @property
    def drafts(self) -> bool:
        """Whether the heads can draft tokens for speculative sampling (they predict further ahead)."""
        return self.lookahead_mode in ("mtp", "hydra")


def upgrade_saved(model: dict) -> dict:
    """A saved config as this microgpt reads it: one saved before --lookahead-distill trained without it (0), and
    one saved before --lookahead-mode (or while mtp was its default) without the key is mode mtp."""
    return {"lookahead_distill": 0.0, "lookahead_mode": "mtp", **model}


def config_from(settings, vocab_size: int) -> LookaheadConfig:
    """The trunk's shape as GPT reads it (--heads may fix d_model), and the heads' settings."""
    trunk = trunk_config_from(settings, vocab_size)
    heads = {key: settings.value(key) for key in ("lookahead", "lookahead_mode", "head_layers", "lookahead_weight",
                                                     "lookahead_distill")}
    return LookaheadConfig(**{f: getattr(trunk, f) for f in trunk.__dataclass_fields__}, **heads)
