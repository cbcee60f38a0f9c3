"""The settings of the commands beside `train`: `sample`, `eval`, `plot`, `studio` and `inspect`, each declared once.

As for train's (training.py), a field made with `setting(...)` is a flag of its
command (`--top-k` for top_k), with its help, default and check; the backend,
threads and memory cap are train's own settings, shared.
"""

from __future__ import annotations

from dataclasses import dataclass

from microgpt.core.checks import NON_NEGATIVE_NUMBER, PATH, PROBABILITY, SWITCH, TEXT, Choice, whole
from microgpt.core.errors import ConfigError, Named, Placeholder
from microgpt.core.fields import check_fields, setting, settings_fields


@dataclass
class SampleSettings:
    prompt: str = setting("", "text to continue (what follows it is printed, not the prompt itself)", TEXT,
                          shown_default="a newline", metavar="TEXT")
    tokens: int = setting(500, "tokens to generate (characters, with the char tokenizer)", whole(0))
    temperature: float = setting(0.8, "sampling temperature; 0 is greedy (argmax)", NON_NEGATIVE_NUMBER,
                                 metavar="X")
    top_k: int = setting(0, "sample only from the K most likely tokens; 0 for no limit", whole(0), metavar="K")
    top_p: float = setting(1.0, "sample only from the most likely tokens whose probabilities add up to P (nucleus "
                           "sampling); 1 keeps them all", PROBABILITY, metavar="P")
    seed: int = setting(0, "random seed for sampling", whole(0), metavar="S")
    cache: bool = setting(True, "reuse the keys and values already computed (--no-cache: re-run the model on the "
                          "last seq_len tokens for every new one; slower, the same text while the context fits in "
                          "seq_len)", SWITCH)
    speculative: bool = setting(False, "draft the next tokens with the model's lookahead heads (a model trained "
                                "with --lookahead K) and check them with its main head in one pass: the same "
                                "text at temperature 0, the same distribution otherwise; faster only where most "
                                "drafts are kept (docs/lookahead.md); prints how many were", SWITCH)
    num_samples: int = setting(1, "samples to generate, each from the prompt, with seeds --seed, --seed + 1, ...",
                               whole(1))
    out: str | None = setting(None, "write the samples to FILE (written whole, then renamed into place) instead of "
                              "printing them", PATH, shown_default="print them", metavar="FILE")
    fill: str | None = setting(None, "instead of sampling, fill each --mask character of TEXT greedily, one token "
                               "each, from the text on both sides with the model's gap heads (--lookahead-mode gap) "
                               "where it has them, else from the text before with its main head; says which on "
                               "stderr", TEXT, shown_default="sample", metavar="TEXT")
    mask: str = setting("_", "with --fill, the character that marks a hole", TEXT, metavar="CHAR")

    def __post_init__(self) -> None:
        check_fields(self)
        if self.speculative and not self.cache:
            raise ConfigError(Named("speculative"), " checks its drafts against the KV cache, which ",
                              Named("cache", False), " turns off; drop one of them")
        if len(self.mask) != 1:
            raise ConfigError(Named("mask"), f" must be one character, got {self.mask!r}")
        if self.fill is None and self.mask != "_":
            raise ConfigError(Named("mask"), " marks the holes of ", Named("fill", Placeholder("TEXT")), "; give ",
                              Named("fill"), ", or drop ", Named("mask"))
        if self.fill is not None:
            for f in settings_fields(SampleSettings):
                if f.field not in ("fill", "mask", "out") and getattr(self, f.field) != f.default:
                    raise ConfigError(Named(f.key), " is for sampling, and ", Named("fill"),
                                      " fills holes greedily; drop it")


@dataclass
class EvalSettings:
    prompts: str | None = setting(None, "instead of scoring a FILE, complete each prompt of this file of lines "
                                  "prompt<TAB>answer (\\n, \\t, \\\\: a newline, a tab, a backslash) greedily, up to a newline or "
                                  "seq_len tokens, and count the completions that are the answer (surrounding "
                                  "whitespace ignored)", PATH,
                                  shown_default="score FILE", metavar="FILE")
    max_positions: int | None = setting(None, "score only the first N positions", whole(1),
                                        shown_default="every position from seq_len on")
    stride: int | None = setting(None, "score the last S tokens of each window of seq_len: a token gets between "
                                 "seq_len - S + 1 and seq_len tokens of context, and the text takes 1/S as many "
                                 "windows; a larger S is faster with less context per token: seq_len (the default) "
                                 "costs a training step's forward, 1 (exact: every token with its full seq_len of "
                                 "context) about seq_len times that", whole(1), shown_default="seq_len",
                                 metavar="S")
    batch_size: int = setting(32, "windows per forward pass", whole(1), metavar="B")
    routing: str | None = setting(None, "also write an ensemble's routing of FILE to this CSV: a row per position "
                                  "(position, token, expert0_prior_share, expert1 .. expertN router weights, "
                                  "dominant), each position with the context it is scored with", PATH,
                                  shown_default="none", metavar="OUT.csv")
    fill_rate: float | None = setting(None, "also hide this share of FILE's tokens at random (seed 0, never a "
                                      "window's first) and report how many the gap heads fill right, beside the "
                                      "main head's guess from the text before alone", PROBABILITY,
                                      shown_default="none", metavar="R")
    json: bool = setting(False, "print one JSON line: model, file, positions (tokens scored), characters, stride, "
                         "nll (nats per token), perplexity, bits_per_char, seconds (and heads, routing, fill where "
                         "they apply); with --prompts: model, file, correct, total, accuracy, results (line, prompt, "
                         "answer, completion, correct for each)", SWITCH)

    def __post_init__(self) -> None:
        check_fields(self)
        if self.prompts is not None:
            for f in settings_fields(EvalSettings):
                if f.field not in ("prompts", "json") and getattr(self, f.field) != f.default:
                    raise ConfigError(Named(f.key), " is for scoring a FILE, not for ", Named("prompts"),
                                      "; drop it")


@dataclass
class PlotSettings:
    x: str = setting("step", "the horizontal axis", Choice(lambda: ("step", "time")), metavar="AXIS")
    out: str = setting("runs.png", "the plot to write, a .png, .svg or .pdf", PATH, metavar="FILE")
    title: str = setting("loss", "the plot's title", TEXT, metavar="TEXT")
    detail: bool = setting(False, "draw one RUN alone: its training and validation loss, and its model's per-part "
                           "figures (an ensemble's experts)", SWITCH)
    follow: bool = setting(False, "keep redrawing the plot as the logs grow (a run that is training), until Ctrl-C",
                           SWITCH)
    interval: float = setting(2.0, "with --follow, seconds between looks at the logs", NON_NEGATIVE_NUMBER,
                              metavar="S")
    routing: str | None = setting(None, "instead of loss curves, draw an ensemble checkpoint RUN's routing of TEXT "
                                  "as a heatmap: its tokens along x, the router weights of experts 1 to n along y, "
                                  "and the prior's share (expert 0) above them", TEXT, shown_default="none",
                                  metavar="TEXT")

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass
class StudioSettings:
    port: int = setting(8765, "the port to listen on; 0 picks a free one", whole(0, 65535))
    host: str = setting("127.0.0.1", "the address to listen on; another than 127.0.0.1 serves beyond this machine, "
                        "with a warning", PATH, metavar="ADDRESS")
    browser: bool = setting(True, "open the URL in a browser (--no-browser: only print it)", SWITCH)
    keep_runs: bool = setting(False, "leave the runs it started training when the studio stops (--no-keep-runs: "
                              "SIGTERM them, so they save)", SWITCH)

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass
class InspectSettings:
    text: str | None = setting(None, "the text to trace for --attention and --logit-lens (and to score, without a "
                               "FILE)", TEXT, shown_default="FILE's first seq_len tokens", metavar="TEXT")
    attention: str | None = setting(None, "draw every head's attention weights over the text as a grid of heatmaps "
                                    "(a layer a row, a head a column, the tokens on the axes) into this .png, .svg "
                                    "or .pdf", PATH, shown_default="none", metavar="OUT.png")
    logit_lens: str | None = setting(None, "draw the logit lens of the text into this .png, .svg or .pdf: the loss "
                                     "of the next token and the top prediction at each point of the residual "
                                     "stream (through the final norm and head) and each position", PATH,
                                     shown_default="none", metavar="OUT.png")
    ablate_heads: str | None = setting(None, "score every attention head's ablation on FILE (or --text) and write "
                                       "them to this CSV, the most harmful first (rank, path, layer, head, width, "
                                       "loss, delta: what the ablation adds to the loss in nats per token)", PATH,
                                       shown_default="none", metavar="OUT.csv")
    node: str | None = setting(None, "a node's path (as `microgpt inspect MODEL` lists them): --activations draws "
                               "its output, and --attention only its heads where it is an attention node", TEXT,
                               shown_default="none", metavar="PATH")
    activations: str | None = setting(None, "draw --node's output over the text into this .png, .svg or .pdf: each "
                                      "position's norm and a histogram of the values", PATH, shown_default="none",
                                      metavar="OUT.png")
    mode: str = setting("zero", "what --ablate-heads puts in place of a head's output: zero, or its mean over the "
                        "text (mean keeps the output's typical size, so the loss measures what the head says "
                        "about each position rather than that it speaks at all)", Choice(lambda: ("zero", "mean")),
                        metavar="MODE")
    max_positions: int = setting(4096, "score --ablate-heads on at most the first N tokens of FILE: each head costs "
                                 "one forward over them", whole(2), metavar="N")

    def __post_init__(self) -> None:
        check_fields(self)
        if self.activations is not None and self.node is None:
            raise ConfigError(Named("activations"), " draws one node's output: name it with ",
                              Named("node", Placeholder("PATH")), " (`microgpt inspect MODEL` lists the paths)")
