"""`microgpt train [FILE]`: train a model on a text file (or on Python's bundled docs), or resume one."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from microgpt.backends import get_backend, resolve_auto
from microgpt.checkpoint import load_checkpoint
from microgpt.cli.common import add_backend_flag, non_negative_int, positive_float, positive_int
from microgpt.config import ConfigError, ModelConfig, TrainConfig, parse_heads
from microgpt.data import CharTokenizer, RandomBatches, SequentialBatches, default_corpus, read_corpus, split_validation
from microgpt.model import GPT
from microgpt.progress import Progress
from microgpt.sample import generate
from microgpt.train import RunPaths, Trainer

# Model-shape flags default to None so that an explicit value can be told apart (a named head set
# fixes d_model; a resumed checkpoint fixes the shape). These are the reference's defaults.
SHAPE_DEFAULTS = {"d_model": 64, "n_layers": 2, "d_ff": 256, "heads": "4", "seq_len": 128}
# Training flags also default to None: on resume, those not given come from the checkpoint.
TRAIN_DEFAULTS = {"steps": 1000, "seed": 42, "lr": 3e-4, "batch_size": 1, "stride": None, "random_batches": False,
                  "val_tokens": 0, "val_interval": 30.0, "eval_every": 0}
DEFAULT_CORPUS_NAME = "python-docs"


def add_parser(commands) -> None:
    p = commands.add_parser("train", help="train a model", description=__doc__.split(":", 1)[1].strip())
    p.add_argument("file", nargs="?", metavar="FILE",
                   help="UTF-8 text to train on (default: the Python docs bundled with this interpreter)")
    p.add_argument("--steps", type=non_negative_int,
                   help="train until this step count (a total: a resumed run continues to it) (default: 1000)")
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
    p.add_argument("--model", type=Path, metavar="DIR",
                   help="checkpoint directory to write (default: checkpoints/<name of FILE>)")
    p.add_argument("--no-save", action="store_true", help="do not write a checkpoint or logs")
    p.add_argument("--resume", type=Path, metavar="DIR",
                   help="continue from a checkpoint: weights, Adam moments, step, data position and random state")
    p.add_argument("--val-tokens", type=non_negative_int,
                   help="hold out the last N characters for validation (default: 0, none)")
    p.add_argument("--val-interval", type=positive_float,
                   help="seconds between validation passes (default: 30)")
    p.add_argument("--eval-every", type=non_negative_int,
                   help="validate every N steps instead of every --val-interval seconds")
    p.add_argument("--gen", type=non_negative_int, default=200,
                   help="characters to sample after training (default: 200; 0 for none)")
    p.add_argument("--quiet", action="store_true", help="no progress output, only the summary")
    p.set_defaults(run=run)


def model_config(args, vocab_size: int) -> ModelConfig:
    """The model shape from the flags, with the reference's defaults for those not given."""
    d_model = args.d_model or SHAPE_DEFAULTS["d_model"]
    head_dims, heads_d_model = parse_heads(args.heads or SHAPE_DEFAULTS["heads"], d_model)
    if args.d_model is not None and heads_d_model != args.d_model:
        raise ConfigError(
            f"--heads {args.heads} makes d_model {heads_d_model}, but --d-model is {args.d_model}; drop one of them"
        )
    return ModelConfig(
        vocab_size=vocab_size, d_model=heads_d_model, head_dims=head_dims,
        n_layers=args.n_layers or SHAPE_DEFAULTS["n_layers"], d_ff=args.d_ff or SHAPE_DEFAULTS["d_ff"],
        seq_len=args.seq_len or SHAPE_DEFAULTS["seq_len"],
    )


def resolve_train_config(args, saved: dict) -> TrainConfig:
    """Each training setting from its flag when given, else from the resumed run, else the default."""
    values = {}
    for key, default in TRAIN_DEFAULTS.items():
        given = getattr(args, key)
        values[key] = given if given is not None else saved.get(key, default)
    return TrainConfig(**values)


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


def load_text(file: str | None) -> tuple[str, str, str]:
    """(text, description, name) of the training corpus."""
    if file is None:
        text, description = default_corpus()
        return text, description, DEFAULT_CORPUS_NAME
    text = read_corpus(file)
    return text, f"{file} ({len(text):,} characters)", Path(file).stem


def run(args) -> int:
    backend_name = resolve_auto() if args.backend == "auto" else args.backend
    if args.backend == "auto":
        print(f"backend: {backend_name} (auto: {'a GPU is usable' if backend_name == 'cuda' else 'no usable GPU'})")
    backend = get_backend(backend_name)
    resume_state: dict = {}
    if args.resume:
        model, vocab, info = load_checkpoint(args.resume, backend, with_optimizer=True)
        if "train_state" not in info:
            raise ConfigError(f"{args.resume} holds weights only (no optimizer state), so it cannot be resumed")
        resume_state = info["train_state"]
    train_config = resolve_train_config(args, resume_state.get("train_config", {}))
    if args.resume:
        check_shape_flags(args, model.config, args.resume)
        file = args.file if args.file is not None else resume_state.get("corpus_file")
        text, description, name = load_text(file)
        tokenizer = CharTokenizer(vocab)
        if train_config.steps <= model.params.step:
            raise ConfigError(f"{args.resume} is already at step {model.params.step}; "
                              f"ask for more with --steps (a total, e.g. --steps {model.params.step + 1000})")
    else:
        text, description, name = load_text(args.file)
        tokenizer = CharTokenizer.from_text(text)
        config = model_config(args, tokenizer.size)
        model = GPT(config, backend, seed=train_config.seed)
    seq_len = model.config.seq_len
    tokens = tokenizer.encode(text, source=description)
    train_tokens, val_tokens = split_validation(tokens, train_config.val_tokens, seq_len)
    if train_config.random_batches:
        batches = RandomBatches(train_tokens, seq_len, train_config.batch_size, train_config.seed)
    else:
        batches = SequentialBatches(train_tokens, seq_len, train_config.batch_size, train_config.stride)
    corpus_sha = hashlib.sha256(text.encode("utf-8")).hexdigest()
    if resume_state:
        if resume_state.get("corpus_sha256") not in (None, corpus_sha):
            print(f"note: {description} differs from the text this checkpoint was trained on", file=sys.stderr)
        if resume_state["data"]["kind"] == batches.state()["kind"]:
            batches.restore(resume_state["data"])
    checkpoint_dir = None if args.no_save else (args.model or args.resume or Path("checkpoints") / name)
    paths = RunPaths(checkpoint_dir)
    run_info = {"corpus": description, "corpus_file": args.file if args.file is not None else resume_state.get("corpus_file"),
                "corpus_sha256": corpus_sha, "best_val_loss": resume_state.get("best_val_loss"),
                "train_config": vars(train_config)}
    print(f"corpus: {description}, vocabulary {tokenizer.size} characters")
    cfg = model.config
    print(f"model: {model.n_params:,} parameters, d_model {cfg.d_model}, {cfg.n_layers} layers, "
          f"heads {list(cfg.head_dims)}, d_ff {cfg.d_ff}, seq_len {cfg.seq_len}; backend {backend.name}"
          + (f"; resuming at step {model.params.step}" if args.resume else ""))
    trainer = Trainer(model, tokenizer.vocab, batches, val_tokens, train_config, paths, Progress(args.quiet), run_info)
    summary = trainer.run()
    print_summary(summary)
    if args.gen and not summary.interrupted:
        print("sample:")
        generate(model, tokenizer, "", args.gen, temperature=0.8, seed=train_config.seed,
                 on_text=lambda ch: print(ch, end="", flush=True))
        print()
    return 130 if summary.interrupted else 0


def print_summary(summary) -> None:
    lines = [f"{'stopped at' if summary.interrupted else 'finished'} step {summary.steps} "
             f"({summary.steps_run} this run) in {summary.seconds:.1f}s, {summary.tokens_per_sec:,.0f} tokens/s"]
    lines.append(f"final loss {summary.final_loss:.4f}")
    if summary.val_loss is not None:
        lines[-1] += f", validation loss {summary.val_loss:.4f} (best {summary.best_val_loss:.4f})"
    lines.append(f"checkpoint: {summary.checkpoint}" if summary.checkpoint else "checkpoint: not saved (--no-save)")
    print("\n".join(lines))
