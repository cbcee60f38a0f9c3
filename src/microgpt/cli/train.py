"""`microgpt train [FILE]`: train a model on a text file (or on Python's bundled docs), resume one, train a
named run from a YAML file, or compare model specs on the same data.

Each setting comes from, in rising precedence: the built-in default, the named
run of --config, the checkpoint (on --resume), and an explicit flag. A finished
run with a checkpoint appends a line to results.jsonl beside it and draws
<checkpoint>.loss.png (with the optional matplotlib).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np

from microgpt.backends import get_backend, resolve_auto
from microgpt.checkpoint import CONFIG, load_checkpoint
from microgpt.cli.common import add_backend_flag, non_negative_int, positive_float, positive_int
from microgpt.config import ConfigError, ModelConfig, TrainConfig, parse_heads
from microgpt.configs import NamedRun, load_run
from microgpt.data import (
    CharTokenizer,
    RandomBatches,
    SequentialBatches,
    default_corpus,
    read_corpus,
    split_validation,
)
from microgpt.memory import DEFAULT_MAX_MEMORY, check_memory, parse_size
from microgpt.model import GPT
from microgpt.plot import PLOT_HINT, plot_available, write_loss_plot
from microgpt.progress import Progress
from microgpt.sample import generate
from microgpt.specs import format_spec, parse_spec_list
from microgpt.train import RunPaths, RunSummary, Trainer

# Every flag that a --config run can also set defaults to None, so that an explicit value can be told apart.
# These are the reference's defaults.
SHAPE_DEFAULTS = {"d_model": 64, "n_layers": 2, "d_ff": 256, "heads": "4", "seq_len": 128}
TRAIN_DEFAULTS = {"steps": 10000, "seed": 42, "lr": 3e-4, "batch_size": 1, "stride": None, "random_batches": False,
                  "val_tokens": 0, "val_interval": 30.0, "eval_every": 0, "save_every": 0}
OTHER_DEFAULTS = {"backend": "auto", "max_memory": DEFAULT_MAX_MEMORY, "gen": 200, "file": None, "model": None}
DEFAULTS = {**SHAPE_DEFAULTS, **TRAIN_DEFAULTS, **OTHER_DEFAULTS}
SPEC_SHAPE_KEYS = ("d_model", "heads", "n_layers")  # what a --compare spec fixes
DEFAULT_CORPUS_NAME = "python-docs"
RESULTS_LOG = "results.jsonl"


def add_parser(commands) -> None:
    p = commands.add_parser("train", help="train a model", description=__doc__.split(":", 1)[1].strip())
    p.add_argument("file", nargs="?", metavar="FILE",
                   help="UTF-8 text to train on (default: the Python docs bundled with this interpreter)")
    p.add_argument("--steps", type=non_negative_int,
                   help="train until this step count (a total: a resumed run continues to it) (default: 10000)")
    p.add_argument("--seed", type=int, help="seeds the weights and the random batches (default: 42)")
    p.add_argument("--lr", type=positive_float, help="Adam learning rate (default: 3e-4)")
    p.add_argument("--d-model", type=positive_int, help="model width (default: 64)")
    p.add_argument("--n-layers", type=positive_int, help="transformer blocks (default: 2)")
    p.add_argument("--d-ff", type=positive_int, help="feed-forward width (default: 256)")
    p.add_argument("--heads", help="a head count (4), widths (8,8,16,32) or a named set: uniform, exponential, "
                   "prime, pyramid, ones; a named set fixes d_model (default: 4)")
    p.add_argument("--seq-len", type=positive_int, help="context length in characters (default: 128)")
    p.add_argument("--batch-size", type=positive_int, help="sequences per step (default: 1)")
    p.add_argument("--stride", type=positive_int, help="characters between sequential windows (default: seq-len)")
    p.add_argument("--random-batches", action="store_true", default=None, help="draw seeded random windows instead of the sequential walk")
    add_backend_flag(p)
    p.set_defaults(backend=None)  # "auto" unless the flag or a --config run says otherwise
    p.add_argument("--model", type=Path, metavar="DIR",
                   help="checkpoint directory to write (default: checkpoints/<run id or name of FILE>; "
                   "with --compare, the directory holding one checkpoint per spec)")
    p.add_argument("--no-save", action="store_true", help="do not write a checkpoint or logs")
    p.add_argument("--resume", type=Path, metavar="DIR",
                   help="continue from a checkpoint: weights, Adam moments, step, data position and random state")
    p.add_argument("--save-every", type=non_negative_int,
                   help="also save the checkpoint every N steps (default: 0, only at the end and on Ctrl-C)")
    p.add_argument("--val-tokens", type=non_negative_int,
                   help="hold out the last N characters for validation (default: 0, none)")
    p.add_argument("--val-interval", type=positive_float,
                   help="seconds between validation passes (default: 30)")
    p.add_argument("--eval-every", type=non_negative_int,
                   help="validate every N steps instead of every --val-interval seconds")
    p.add_argument("--config", type=Path, metavar="FILE", help="a YAML file of named runs (see examples/configs.yaml)")
    p.add_argument("--run", dest="run_id", metavar="ID", help="the run of --config to train; flags override its settings")
    p.add_argument("--compare", metavar="SPECS",
                   help="train each model spec in turn on the same data and print a table, e.g. "
                   "d64n2,d4x16n2,d1+2+4+8+16+32n2 (d<width> | d<count>x<width> | d<w1>+<w2>+..., then "
                   "n<layers>, optional ff<d_ff>; d_ff defaults to --d-ff if given, else 4 x d_model)")
    p.add_argument("--max-memory", type=memory_size, metavar="SIZE",
                   help="refuse to train when a step is estimated to need more, e.g. 512MiB, 8GiB (default: 3GiB)")
    p.add_argument("--gen", type=non_negative_int,
                   help="characters to sample after training (default: 200; 0 for none; none with --compare)")
    p.add_argument("--quiet", action="store_true", help="no progress output, only the summary")
    p.set_defaults(run=run)


def memory_size(text: str) -> int:
    try:
        return parse_size(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


class Settings:
    """Each setting from its flag, else the checkpoint (on resume, training settings only), else the named run
    of --config, else the built-in default."""

    def __init__(self, args, named: NamedRun | None):
        self.args, self.named = args, named

    def flag(self, key: str):
        return getattr(self.args, key)

    def given(self, key: str) -> bool:
        """Set by a flag or by the named run (not a built-in default)."""
        return self.flag(key) is not None or (self.named is not None and key in self.named.values)

    def value(self, key: str, saved: dict | None = None):
        if self.flag(key) is not None:
            return self.flag(key)
        if saved and key in saved:
            return saved[key]
        if self.named is not None and key in self.named.values:
            return self.named.values[key]
        return DEFAULTS[key]

    def origin(self, key: str) -> str:
        """Where a given setting came from, for messages: "--d-model" or "d_model (run ID in FILE)"."""
        if self.flag(key) is not None or self.named is None:
            return "--" + key.replace("_", "-")
        return f"{key} ({self.named.origin})"

    def describe(self, key: str) -> str:
        """A given setting with its value: "--heads 4" or "heads: 4 (run ID in FILE)"."""
        if self.flag(key) is not None or self.named is None:
            return f"{self.origin(key)} {self.value(key)}"
        return f"{key}: {self.value(key)} ({self.named.origin})"


def model_config(settings: Settings, vocab_size: int) -> ModelConfig:
    """The model shape from the flags and the named run, with the reference's defaults for the rest."""
    heads = str(settings.value("heads"))
    head_dims, heads_d_model = parse_heads(heads, settings.value("d_model"))
    if settings.given("d_model") and heads_d_model != settings.value("d_model"):
        raise ConfigError(f"{settings.describe('heads')} makes d_model {heads_d_model}, but {settings.origin('d_model')} "
                          f"is {settings.value('d_model')}; drop one of them")
    return ModelConfig(vocab_size=vocab_size, d_model=heads_d_model, head_dims=head_dims,
                       n_layers=settings.value("n_layers"), d_ff=settings.value("d_ff"),
                       seq_len=settings.value("seq_len"))


def resolve_train_config(settings: Settings, saved: dict) -> TrainConfig:
    return TrainConfig(**{key: settings.value(key, saved) for key in TRAIN_DEFAULTS})


def check_shape_flags(args, config: ModelConfig, checkpoint: Path) -> None:
    """On resume, the shape comes from the checkpoint; an explicit flag that disagrees is an error."""
    given = {"--d-model": (args.d_model, config.d_model), "--n-layers": (args.n_layers, config.n_layers),
             "--d-ff": (args.d_ff, config.d_ff), "--seq-len": (args.seq_len, config.seq_len)}
    if args.heads is not None:
        given["--heads"] = (parse_heads(args.heads, config.d_model)[0], config.head_dims)
    for flag, (wanted, actual) in given.items():
        if wanted is not None and wanted != actual:
            raise ConfigError(
                f"{flag} {args.heads if flag == '--heads' else wanted} does not match the checkpoint {checkpoint}, "
                f"which has {actual}; drop the flag to resume, or train a new model with --model"
            )


def check_not_clobbering(directory: Path) -> None:
    """Saving replaces the whole checkpoint directory, so it must not be a directory of other things."""
    if directory.is_dir() and not (directory / CONFIG).exists() and any(directory.iterdir()):
        raise ConfigError(f"{directory} exists and is not a checkpoint (it holds other files, e.g. --compare "
                          "checkpoints); saving a checkpoint there would replace them; pick another --model")


def load_text(file: str | None) -> tuple[str, str, str]:
    """(text, description, name) of the training corpus."""
    if file is None:
        text, description = default_corpus()
        return text, description, DEFAULT_CORPUS_NAME
    text = read_corpus(file)
    return text, f"{file} ({len(text):,} characters)", Path(file).stem


def make_batches(train_tokens: np.ndarray, seq_len: int, config: TrainConfig):
    if config.random_batches:
        return RandomBatches(train_tokens, seq_len, config.batch_size, config.seed)
    return SequentialBatches(train_tokens, seq_len, config.batch_size, config.stride)


def dtype_bytes(backend) -> int:
    return np.dtype(backend.dtype).itemsize


def start_backend(settings: Settings):
    requested = settings.value("backend")
    name = resolve_auto() if requested == "auto" else requested
    if requested == "auto":
        print(f"backend: {name} (auto: {'a GPU is usable' if name == 'cuda' else 'no usable GPU'})")
    return get_backend(name)


def run(args) -> int:
    if args.run_id is not None and args.config is None:
        raise ConfigError(f"--run {args.run_id} needs --config FILE, the YAML file that defines it")
    named = load_run(args.config, args.run_id) if args.config is not None else None
    settings = Settings(args, named)
    if args.compare is not None:
        return run_compare(args, settings)
    return run_single(args, settings)


def run_single(args, settings: Settings) -> int:
    backend = start_backend(settings)
    cap = settings.value("max_memory")
    resume_state: dict = {}
    if args.resume:
        model, vocab, info = load_checkpoint(args.resume, backend, with_optimizer=True)
        if "train_state" not in info:
            raise ConfigError(f"{args.resume} holds weights only (no optimizer state), so it cannot be resumed")
        resume_state = info["train_state"]
    train_config = resolve_train_config(settings, resume_state.get("train_config", {}))
    file = settings.value("file", {"file": resume_state["corpus_file"]} if resume_state.get("corpus_file") else {})
    text, description, name = load_text(file)
    if args.resume:
        check_shape_flags(args, model.config, args.resume)
        check_memory(model.config, train_config.batch_size, dtype_bytes(backend), cap)
        tokenizer = CharTokenizer(vocab)
        if train_config.steps <= model.params.step:
            raise ConfigError(f"{args.resume} is already at step {model.params.step}; "
                              f"ask for more with --steps (a total, e.g. --steps {model.params.step + 1000})")
    else:
        tokenizer = CharTokenizer.from_text(text)
        config = model_config(settings, tokenizer.size)
        check_memory(config, train_config.batch_size, dtype_bytes(backend), cap)
        model = GPT(config, backend, seed=train_config.seed)
    seq_len = model.config.seq_len
    tokens = tokenizer.encode(text, source=description)
    train_tokens, val_tokens = split_validation(tokens, train_config.val_tokens, seq_len)
    batches = make_batches(train_tokens, seq_len, train_config)
    corpus_sha = hashlib.sha256(text.encode("utf-8")).hexdigest()
    if resume_state:
        if resume_state.get("corpus_sha256") not in (None, corpus_sha):
            print(f"note: {description} differs from the text this checkpoint was trained on", file=sys.stderr)
        if resume_state["data"]["kind"] == batches.state()["kind"]:
            batches.restore(resume_state["data"])
    label = settings.named.id if settings.named else None
    checkpoint_dir = None
    if not args.no_save:
        checkpoint_dir = args.model or args.resume or _path(settings.value("model")) or Path("checkpoints") / (label or name)
        check_not_clobbering(checkpoint_dir)
    paths = RunPaths(checkpoint_dir)
    run_info = make_run_info(description, file, corpus_sha, train_config, resume_state.get("best_val_loss"))
    print(f"corpus: {description}, vocabulary {tokenizer.size} characters")
    cfg = model.config
    print(f"model: {model.n_params:,} parameters, d_model {cfg.d_model}, {cfg.n_layers} layers, "
          f"heads {list(cfg.head_dims)}, d_ff {cfg.d_ff}, seq_len {cfg.seq_len}; backend {backend.name}"
          + (f"; resuming at step {model.params.step}" if args.resume else ""))
    trainer = Trainer(model, tokenizer.vocab, batches, val_tokens, train_config, paths, Progress(args.quiet), run_info)
    summary = trainer.run()
    print_summary(summary)
    draw_loss_plots(finish_run(summary, model, train_config, backend.name, label))
    gen = settings.value("gen")
    if gen and not summary.interrupted:
        print("sample:")
        generate(model, tokenizer, "", gen, temperature=0.8, seed=train_config.seed,
                 on_text=lambda ch: print(ch, end="", flush=True))
        print()
    return 130 if summary.interrupted else 0


def run_compare(args, settings: Settings) -> int:
    """Train each --compare spec in turn on the same data, batches, seed and steps; print a table."""
    if args.resume:
        raise ConfigError("--compare trains new models and cannot --resume; resume one spec's checkpoint on its own")
    for key in SPEC_SHAPE_KEYS:
        if settings.given(key):
            raise ConfigError(f"{settings.describe(key)} sets the model shape, but --compare takes it from each spec; drop it")
    specs = parse_spec_list(args.compare)
    backend = start_backend(settings)
    train_config = resolve_train_config(settings, {})
    text, description, name = load_text(settings.value("file"))
    tokenizer = CharTokenizer.from_text(text)
    d_ff = settings.value("d_ff") if settings.given("d_ff") else None
    configs = [spec.model_config(tokenizer.size, settings.value("seq_len"), d_ff) for spec in specs]
    for spec, config in zip(specs, configs):  # all before any training
        check_memory(config, train_config.batch_size, dtype_bytes(backend), settings.value("max_memory"), f"spec {spec.text}")
    base = None
    if not args.no_save:
        label = settings.named.id if settings.named else name
        base = args.model or _path(settings.value("model")) or Path("checkpoints") / f"{label}-compare"
        if (base / CONFIG).exists():
            raise ConfigError(f"{base} is a checkpoint; --compare writes one checkpoint per spec inside --model DIR, "
                              "so pick a directory that is not a checkpoint")
    train_tokens, val_tokens = split_validation(tokenizer.encode(text, source=description), train_config.val_tokens,
                                                settings.value("seq_len"))
    corpus_sha = hashlib.sha256(text.encode("utf-8")).hexdigest()
    print(f"corpus: {description}, vocabulary {tokenizer.size} characters; backend {backend.name}")
    rows, plots = [], []
    for i, (spec, config) in enumerate(zip(specs, configs), 1):
        model = GPT(config, backend, seed=train_config.seed)
        batches = make_batches(train_tokens, config.seq_len, train_config)
        paths = RunPaths(None if base is None else base / spec.text)
        print(f"[{i}/{len(specs)}] {spec.text}: {model.n_params:,} parameters, d_model {config.d_model}, "
              f"{config.n_layers} layers, heads {list(config.head_dims)}, d_ff {config.d_ff}")
        run_info = make_run_info(description, settings.value("file"), corpus_sha, train_config)
        summary = Trainer(model, tokenizer.vocab, batches, val_tokens, train_config, paths,
                          Progress(args.quiet), run_info).run()
        plots += finish_run(summary, model, train_config, backend.name, spec.text)
        rows.append((spec.text, model.n_params, summary))
        if summary.interrupted:
            break
    print_table(rows)
    draw_loss_plots(plots)
    return 130 if rows[-1][2].interrupted else 0


def make_run_info(corpus: str, corpus_file: str | None, corpus_sha: str, train_config: TrainConfig,
                  best_val_loss: float | None = None) -> dict:
    """What a run keeps in train_state.json besides the step and data position: its corpus (the file as an
    absolute path, so a resume finds it from any directory) and settings."""
    absolute = None if corpus_file is None else str(Path(corpus_file).resolve())
    return {"corpus": corpus, "corpus_file": absolute, "corpus_sha256": corpus_sha,
            "best_val_loss": best_val_loss, "train_config": vars(train_config)}


def _path(value: str | None) -> Path | None:
    return None if value is None else Path(value)


def log_result(summary: RunSummary, model: GPT, train_config: TrainConfig, backend: str, label: str | None) -> None:
    """One line in results.jsonl beside a saved checkpoint: what was trained, how long, and how well."""
    cfg = model.config
    record = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "run": label,
        "spec": format_spec(cfg.head_dims, cfg.n_layers, cfg.d_ff), "d_model": cfg.d_model,
        "n_layers": cfg.n_layers, "head_dims": list(cfg.head_dims), "d_ff": cfg.d_ff, "seq_len": cfg.seq_len,
        "vocab_size": cfg.vocab_size, "parameters": model.n_params, "steps": summary.steps,
        "steps_run": summary.steps_run, "batch_size": train_config.batch_size, "lr": train_config.lr,
        "final_loss": summary.final_loss, "val_loss": summary.val_loss, "best_val_loss": summary.best_val_loss,
        "seconds": round(summary.seconds, 3), "tokens_per_sec": round(summary.tokens_per_sec, 1),
        "backend": backend, "checkpoint": str(summary.checkpoint), "interrupted": summary.interrupted,
    }
    with open(summary.checkpoint.parent / RESULTS_LOG, "a", encoding="utf-8") as log:
        log.write(json.dumps(record) + "\n")


def draw_loss_plots(runs: list[tuple[Path, str]]) -> None:
    """<checkpoint>.loss.png for each (checkpoint, title), or one hint line when matplotlib is missing."""
    if not runs:
        return
    if not plot_available():
        print(PLOT_HINT, file=sys.stderr)
        return
    for checkpoint, title in runs:
        png = write_loss_plot(RunPaths(checkpoint).metrics, checkpoint.with_name(checkpoint.name + ".loss.png"), title)
        if png is not None:
            print(f"loss plot: {png}")


def finish_run(summary: RunSummary, model: GPT, train_config: TrainConfig, backend: str,
               label: str | None) -> list[tuple[Path, str]]:
    """Log a run that saved a checkpoint; returns its (checkpoint, plot title), or nothing to plot."""
    if summary.checkpoint is None or summary.steps_run == 0:
        return []
    log_result(summary, model, train_config, backend, label)
    cfg = model.config
    spec = format_spec(cfg.head_dims, cfg.n_layers, cfg.d_ff)
    return [(summary.checkpoint, f"{label or summary.checkpoint.name}: {spec}, {model.n_params:,} parameters")]


def print_summary(summary: RunSummary) -> None:
    lines = [(f"{'stopped at' if summary.interrupted else 'finished'} step {summary.steps} "
              f"({summary.steps_run} this run) in {summary.seconds:.1f}s, {summary.tokens_per_sec:,.0f} tokens/s")]
    lines.append(f"final loss {summary.final_loss:.4f}")
    if summary.val_loss is not None:
        lines[-1] += f", validation loss {summary.val_loss:.4f} (best {summary.best_val_loss:.4f})"
    lines.append(f"checkpoint: {summary.checkpoint}" if summary.checkpoint else "checkpoint: not saved (--no-save)")
    print("\n".join(lines))


def print_table(rows: list[tuple[str, int, RunSummary]]) -> None:
    """The --compare table: one line per spec."""
    width = max(len("spec"), *(len(spec) for spec, _, _ in rows))
    print(f"{'spec':<{width}}  {'parameters':>10}  {'loss':>7}  {'val loss':>8}  {'time':>8}  {'tokens/s':>9}")
    for spec, n_params, s in rows:
        val = f"{s.val_loss:.4f}" if s.val_loss is not None else "-"
        stopped = f"  (stopped at step {s.steps})" if s.interrupted else ""
        print(f"{spec:<{width}}  {n_params:>10,}  {s.final_loss:>7.4f}  {val:>8}  {s.seconds:>7.1f}s  "
              f"{s.tokens_per_sec:>9,.0f}{stopped}")
