"""`microgpt sample MODEL`: generate text from a checkpoint, streamed as it is produced."""

from __future__ import annotations

import argparse
import sys

from microgpt.backends import get_backend
from microgpt.checkpoint import load_checkpoint
from microgpt.cli.common import add_own_setting_flags, non_negative_float, non_negative_int
from microgpt.data import CharTokenizer
from microgpt.sample import generate


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
    add_own_setting_flags(p, ("backend", "max_memory"))
    p.set_defaults(run=run)


def run(args) -> int:
    model, vocab, _ = load_checkpoint(args.model, get_backend(args.backend), max_memory=args.max_memory)
    tokenizer = CharTokenizer(vocab)
    tokenizer.encode(args.prompt, source="the prompt")  # a character outside the vocabulary fails before any output
    sys.stdout.write(args.prompt)
    generate(model, tokenizer, args.prompt, args.tokens, temperature=args.temperature, seed=args.seed,
             top_k=args.top_k, top_p=args.top_p, use_cache=not args.no_cache,
             on_text=lambda ch: (sys.stdout.write(ch), sys.stdout.flush()))
    sys.stdout.write("\n")
    return 0
