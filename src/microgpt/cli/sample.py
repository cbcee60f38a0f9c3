"""`microgpt sample MODEL`: generate text from a checkpoint, streamed as it is produced."""

from __future__ import annotations

import sys

from microgpt.backends import get_backend
from microgpt.checkpoint import load_checkpoint
from microgpt.cli.common import add_backend_flag, non_negative_float, non_negative_int
from microgpt.data import CharTokenizer
from microgpt.sample import generate


def add_parser(commands) -> None:
    p = commands.add_parser("sample", help="generate text from a checkpoint",
                            description=__doc__.split(":", 1)[1].strip())
    p.add_argument("model", metavar="MODEL", help="checkpoint directory (written by microgpt train)")
    p.add_argument("--prompt", default="", help="text to continue (default: a newline)")
    p.add_argument("--tokens", type=non_negative_int, default=500, help="characters to generate (default: 500)")
    p.add_argument("--temperature", type=non_negative_float, default=0.8,
                   help="sampling temperature; 0 is greedy (argmax) (default: 0.8)")
    p.add_argument("--seed", type=int, default=0, help="random seed for sampling (default: 0)")
    add_backend_flag(p)
    p.set_defaults(run=run)


def run(args) -> int:
    model, vocab, _ = load_checkpoint(args.model, get_backend(args.backend))
    tokenizer = CharTokenizer(vocab)
    sys.stdout.write(args.prompt)
    generate(model, tokenizer, args.prompt, args.tokens, temperature=args.temperature, seed=args.seed,
             on_text=lambda ch: (sys.stdout.write(ch), sys.stdout.flush()))
    sys.stdout.write("\n")
    return 0
