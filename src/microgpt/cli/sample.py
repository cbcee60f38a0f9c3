"""`microgpt sample MODEL`: generate text from a checkpoint, streamed as it is produced."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from microgpt.cli.common import add_own_setting_flags, non_negative_float, non_negative_int, positive_int
from microgpt.errors import ConfigError
from microgpt.loaded import load
from microgpt.run_files import open_own


def probability(text: str) -> float:
    """A --top-p value: a number in (0, 1]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1] (1 keeps every token), got {text}")
    return value


def add_parser(commands) -> None:
    p = commands.add_parser("sample", help="generate text from a checkpoint",
                            description=__doc__.split(":", 1)[1].strip())
    p.add_argument("model", metavar="MODEL", help="checkpoint directory (written by microgpt train)")
    p.add_argument("--prompt", default="", help="text to continue (default: a newline)")
    p.add_argument("--tokens", type=non_negative_int, default=500, help="characters to generate (default: 500)")
    p.add_argument("--temperature", type=non_negative_float, default=0.8,
                   help="sampling temperature; 0 is greedy (argmax) (default: 0.8)")
    p.add_argument("--top-k", type=non_negative_int, default=0,
                   help="sample only from the K most likely characters; 0 for no limit (default: 0)")
    p.add_argument("--top-p", type=probability, default=1.0,
                   help="sample only from the most likely characters whose probabilities add up to P "
                   "(nucleus sampling); 1 keeps them all (default: 1)")
    p.add_argument("--seed", type=non_negative_int, default=0, help="random seed for sampling (default: 0)")
    p.add_argument("--no-cache", action="store_true",
                   help="re-run the model on the last seq_len characters for every new one instead of "
                   "reusing cached keys and values (slower; the same text while the context fits in seq_len)")
    p.add_argument("--num-samples", type=positive_int, default=1,
                   help="samples to generate, each from the prompt, with seeds --seed, --seed + 1, ... (default: 1)")
    p.add_argument("--out", type=Path, metavar="FILE",
                   help="write the samples to FILE (written whole, then renamed into place) instead of printing them")
    add_own_setting_flags(p, ("backend", "threads", "max_memory"))
    p.set_defaults(run=run)


SEPARATOR = "\n---\n"  # between samples


def run(args) -> int:
    model = load(args.model, backend=args.backend, threads=args.threads, max_memory=args.max_memory)
    model.tokenizer.encode(args.prompt, source="the prompt")  # a character outside the vocabulary fails first
    if args.out is not None:
        check_output_file(args.out)
    write = (lambda text: None) if args.out is not None else (lambda text: (sys.stdout.write(text),
                                                                            sys.stdout.flush()))
    samples = []
    for i in range(args.num_samples):
        if i:
            write(SEPARATOR)
        write(args.prompt)
        text = model.sample(args.tokens, prompt=args.prompt, temperature=args.temperature, seed=args.seed + i,
                            top_k=args.top_k, top_p=args.top_p, use_cache=not args.no_cache, on_text=write)
        samples.append(args.prompt + text)
    write("\n")
    if args.out is not None:
        write_text_file(args.out, SEPARATOR.join(samples) + "\n")
        print(f"sample: {args.num_samples} sample{'s' if args.num_samples > 1 else ''} of {args.tokens} characters "
              f"written to {args.out}", file=sys.stderr)
    return 0


def check_output_file(path: Path) -> None:
    """Refuse, before any sampling, an --out that is a directory or whose directory cannot take a new file."""
    if path.is_dir():
        raise ConfigError(f"--out {path} is a directory; give a file path")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"--out {path}: cannot write in {parent} (missing or not writable); give a writable path")


def write_text_file(path: Path, text: str) -> None:
    """`text` into `path`, written beside it first and renamed into place, so a reader never sees half of it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open_own(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        raise ConfigError(f"cannot write {path} ({exc.strerror or exc})") from None
    finally:
        tmp.unlink(missing_ok=True)
