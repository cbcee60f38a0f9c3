"""The settings of a training run, each declared once (core/fields.py): its default, type, help text and check.

`ModelChoice` is what kind of model a run trains (its family and tokenizer),
`TrainConfig` is how a run trains, and `RunConfig` is where it runs and what it
writes; each model family declares its own shape the same way
(model/gpt/config.py). `__post_init__` holds every value to its check.
"""

from __future__ import annotations

from dataclasses import dataclass

from microgpt.core.checks import (
    NUMBER,
    NUMBER_OR_OFF,
    PATH,
    POSITIVE_NUMBER,
    SIZE,
    SWITCH,
    Choice,
    ChoiceOrFile,
    whole,
)
from microgpt.core.errors import ConfigError, Named
from microgpt.core.fields import check_fields, setting
from microgpt.core.registry import BACKENDS, FAMILIES, PRECISIONS
from microgpt.core.version import install_hint
from microgpt.data.corpus import DEFAULT_HELD_OUT_MAX
from microgpt.data.tokenizer import KINDS, is_tokenizer_file
from microgpt.data.tokenizer.bpe import MAX_VOCAB, MIN_VOCAB, BPETokenizer
from microgpt.model.memory import DEFAULT_MAX_MEMORY
from microgpt.parallel.watchdog import FLOOR_S, SETUP_S, STEP_MULTIPLE
from microgpt.settings.presets import PRESETS

DEFAULT_WARMUP = 100  # warm-up steps without --warmup, at most a tenth of the schedule
VALIDATIONS_PER_RUN = 20  # without --eval-every, validate this many times over the run (and at its end)
MIN_STEPS_BETWEEN_VALIDATIONS = 10  # ... but not more often than this: a pass costs about ten default steps
VALIDATION_SHARE = 0.2  # ... nor so often that the passes read more than this share of the tokens trained on

BACKEND = Choice(lambda: ("auto", *BACKENDS))
FAMILY = Choice(lambda: tuple(FAMILIES))
PRESET = Choice(lambda: tuple(PRESETS))
SCHEDULE = Choice(lambda: ("constant", "cosine"))
LOG = Choice(lambda: ("jsonl", "tensorboard"))
PRECISION = Choice(lambda: PRECISIONS)
TOKENIZER = ChoiceOrFile(lambda: tuple(KINDS), is_tokenizer_file, "a Hugging Face tokenizer.json")

__all__ = ["ModelChoice", "RunConfig", "TrainConfig"]


@dataclass
class ModelChoice:
    """What kind of model a run trains: its family (model/family.py) and how it turns text into tokens."""

    family: str = setting("gpt", "the model family (model/family.py); gpt is a decoder-only transformer with RoPE", FAMILY,
                          metavar="NAME")
    tokenizer: str = setting("char", "how text becomes tokens: char (one per character of the text), bpe "
                             "(byte-level BPE trained on the text: any Unicode encodes), or PATH/tokenizer.json (any "
                             "Hugging Face tokenizer: BPE, WordPiece, Unigram; kept in the checkpoint)", TOKENIZER,
                             metavar="KIND")
    vocab_size: int | None = setting(None, "the BPE vocabulary: 256 bytes and the merges learnt on top of them",
                                     whole(MIN_VOCAB, MAX_VOCAB), shown_default=f"{BPETokenizer.default_vocab_size} with --tokenizer bpe")

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass
class TrainConfig:
    steps: int = setting(2800, "train until step N (a total: a resumed run continues to it)", whole(1))
    seed: int = setting(42, "seeds the initial weights and the random batches", whole(0), metavar="S")
    lr: float = setting(3e-3, "peak learning rate of Adam (bias-corrected, ε 1e-8), reached after --warmup",
                        POSITIVE_NUMBER, metavar="X")
    warmup: int | None = setting(None, "raise the learning rate linearly over the first N steps (lr/N, 2 lr/N, "
                                 "... lr)", whole(0),
                                 shown_default=f"{DEFAULT_WARMUP}, at most a tenth of --decay-steps (or --steps)")
    lr_schedule: str = setting("cosine", "after warm-up: constant, or cosine (decays to --min-lr by "
                               "--decay-steps)", SCHEDULE, metavar="NAME")
    min_lr: float | None = setting(None, "where cosine decay ends", NUMBER, shown_default="lr/10", metavar="X")
    decay_steps: int | None = setting(None, "the step at which cosine reaches --min-lr (min-lr after it)", whole(1),
                                      shown_default="--steps")
    weight_decay: float = setting(0.1, "decoupled (AdamW) weight decay of the parameters their family marks to "
                                  "decay (gpt: the weight matrices of attention, feed-forward and the output head; "
                                  "not embeddings, LayerNorm gains or biases)",
                                  NUMBER, metavar="W")
    beta1: float = setting(0.9, "Adam's first-moment decay", NUMBER, metavar="X")
    beta2: float = setting(0.99, "Adam's second-moment decay", NUMBER, metavar="X")
    grad_clip: float | None = setting(1.0, "scale the gradients down to this global L2 norm when above it "
                                      "(the norm is logged as grad_norm); off: no clipping", NUMBER_OR_OFF,
                                      metavar="C")
    batch_size: int = setting(12, "sequences per step (the global batch: split over the processes and "
                              "--grad-accum micro-batches)", whole(1), metavar="B")
    grad_accum: int = setting(1, "micro-batches per step, each a forward and backward pass, their gradients "
                              "averaged before the optimiser step (batch-size = processes x K x micro-batch)",
                              whole(1), metavar="K")
    stride: int | None = setting(None, "tokens between windows of the sequential walk", whole(1),
                                 shown_default="seq-len")
    random_batches: bool = setting(True, "seeded random windows (--no-random-batches: the sequential walk)", SWITCH)
    val_tokens: int | None = setting(None, "hold out the last N tokens of the text and measure the loss on all "
                                     "of them as the run goes (0: hold out none)", whole(0),
                                     shown_default=f"a tenth of the text, at most {DEFAULT_HELD_OUT_MAX:,}")
    val_interval: float = setting(30.0, "with --eval-every 0: seconds between validation passes", POSITIVE_NUMBER,
                                  metavar="S")
    eval_every: int | None = setting(None, "validate every N steps, and at the end (0: every --val-interval seconds "
                                     "instead)", whole(0),
                                     shown_default=f"steps/{VALIDATIONS_PER_RUN}, at least "
                                                   f"{MIN_STEPS_BETWEEN_VALIDATIONS}, fewer where the passes would "
                                                   f"read more than {VALIDATION_SHARE:g} times the tokens trained on")
    save_every: int = setting(0, "also save every N steps (always at the end, and on Ctrl-C; 0: only then)",
                              whole(0))
    precision: str = setting("fp32", "the inputs of every matrix product: fp32, or bf16 (rounded to bfloat16, "
                             "multiplied with float32 accumulation; weights, gradients, Adam's moments, LayerNorm, "
                             "softmax and the loss stay float32; on cpu it needs MKL, the mkl extra, and AMX-BF16 or "
                             "AVX512-BF16); kept by a resume", PRECISION, metavar="NAME")

    @property
    def validate_every(self) -> int:
        """Steps between validations (0: by time): --eval-every, else a VALIDATIONS_PER_RUN-th of this run's
        --steps, and at least MIN_STEPS_BETWEEN_VALIDATIONS (a 5-step smoke test validates at its end only).
        Left unresolved in the config, so a resume to a larger --steps spreads them over it."""
        if self.eval_every is not None:
            return self.eval_every
        return max(MIN_STEPS_BETWEEN_VALIDATIONS, -(-self.steps // VALIDATIONS_PER_RUN))

    def __post_init__(self) -> None:
        check_fields(self)
        if self.warmup is None:  # resolved here, so a checkpoint keeps the number its schedule used; from the
            # schedule's end, not this part's --steps, so a schedule trained in parts warms up as in one run
            self.warmup = min(DEFAULT_WARMUP, (self.decay_steps or self.steps) // 10)
        for name in ("beta1", "beta2"):
            if not 0 <= getattr(self, name) < 1:
                raise ConfigError(Named(name), f" must be at least 0 and below 1, got {getattr(self, name)}")
        if self.weight_decay < 0:
            raise ConfigError(Named("weight_decay"), f" must be 0 or more, got {self.weight_decay}")
        if self.grad_clip is not None and self.grad_clip <= 0:
            raise ConfigError(Named("grad_clip"), f" must be above 0, got {self.grad_clip}; ",
                              Named("grad_clip", "off"), " for no clipping")
        if self.min_lr is not None and not 0 <= self.min_lr <= self.lr:
            raise ConfigError(Named("min_lr", self.min_lr), " must be between 0 and ", Named("lr", self.lr))
        if self.decay_steps is None and self.warmup > self.steps:
            raise ConfigError(Named("warmup", self.warmup), " is longer than the run (", Named("steps", self.steps),
                              "); shorten the warm-up, train longer, or give ", Named("decay_steps"),
                              " to train part of a longer schedule")
        if self.decay_steps is not None and self.decay_steps <= self.warmup:
            raise ConfigError(Named("decay_steps", self.decay_steps), " must come after the warm-up (",
                              Named("warmup", self.warmup), ")")


@dataclass
class RunConfig:
    preset: str | None = setting(None, "a named bundle of settings, under named runs and flags: reference (the "
                                 "reference's model, batch, steps and plain Adam)", PRESET, shown_default="none",
                                 metavar="NAME")
    backend: str = setting("auto", "compute backend: cpu (NumPy + numba kernels), numpy (the plain reference), "
                           "cuda; auto is cuda when a GPU is usable, else cpu, and says which",
                           BACKEND, metavar="NAME")
    threads: int | None = setting(None, "threads for BLAS and the cpu backend, which runs each batch as one slice of "
                                  "sequences per thread, at once (at most the cores here)",
                                  whole(1), shown_default="every core, or OMP_NUM_THREADS")
    max_memory: int = setting(DEFAULT_MAX_MEMORY, "refuse a step estimated to need more, e.g. 512MiB, 8GiB", SIZE,
                              metavar="SIZE")
    gen: int = setting(200, "tokens to sample after training (0: none; none with --compare)", whole(0))
    max_corpus: int = setting(256 * 1024**2, "refuse a corpus file larger than this, e.g. 64MiB, 2GiB", SIZE,
                              metavar="SIZE")
    file: str | None = setting(None, "UTF-8 text to train on", PATH,
                               shown_default="Python's bundled docs", metavar="FILE")
    model: str | None = setting(None, "checkpoint directory to write (with --compare, the directory holding "
                                "one checkpoint per spec)", PATH, shown_default="checkpoints/<run id or file name>",
                                metavar="DIR")
    log: str = setting("jsonl", "where each step's figures go: jsonl (DIR.metrics.jsonl, which plot and the studio "
                       "read; always written), or tensorboard (also TensorBoard event files in DIR.tensorboard/; the "
                       "tensorboard extra)", LOG, metavar="KIND")
    collective_timeout: float | None = setting(
        None, "with several processes: how long a rank waits for the others in an all-reduce before the job ends, "
        "naming the ranks that did not arrive (hung or stopped), the checkpoint on disk left as it was",
        POSITIVE_NUMBER, metavar="SECONDS",
        shown_default=f"{STEP_MULTIPLE} x the slowest step so far, at least {FLOOR_S:g} s; {SETUP_S:g} s for the "
        "set-up and the first two steps")

    def __post_init__(self) -> None:
        check_fields(self)
        if self.log == "tensorboard" and not tensorboard_installed():
            raise ConfigError(Named("log", "tensorboard"), " writes through tensorboardX, which is not installed; ",
                              install_hint("tensorboard"))


def tensorboard_installed() -> bool:
    """Whether the tensorboard extra's writer (tensorboardX) imports."""
    try:
        import tensorboardX  # noqa: F401 - imported only to see that it can be
    except ImportError:
        return False
    return True
