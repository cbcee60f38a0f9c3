"""`microgpt eval MODEL FILE`: a checkpoint's negative log-likelihood, perplexity and bits per character on a text."""

from __future__ import annotations

import json
import math
import sys

from microgpt.cli.common import add_own_setting_flags, positive_int
from microgpt.data import read_corpus
from microgpt.evaluate import evaluate
from microgpt.loaded import load
from microgpt.progress import Counter


def add_parser(commands) -> None:
    p = commands.add_parser("eval", help="score a held-out text: NLL, perplexity and bits per character",
                            description=__doc__.split(":", 1)[1].strip()
                            + " Every character from offset seq_len on is scored once, with the seq_len "
                            "characters before it as context (or, with --stride S, between seq_len - S + 1 and "
                            "seq_len of them: faster, an approximation).")
    p.add_argument("model", metavar="MODEL", help="checkpoint directory (written by microgpt train)")
    p.add_argument("file", metavar="FILE", help="UTF-8 text to score (held out from training)")
    p.add_argument("--max-positions", type=positive_int,
                   help="score only the first N positions (default: every position from seq_len on)")
    p.add_argument("--stride", type=positive_int, default=1,
                   help="score the last S characters of each window (strided perplexity: about S times faster, "
                   "an approximation, since a character gets as little as seq_len - S + 1 of context); "
                   "default 1, exact")
    p.add_argument("--batch-size", type=positive_int, default=32,
                   help="windows per forward pass (default: 32)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON line: model, file, positions, stride, nll, perplexity, bits_per_char, seconds")
    add_own_setting_flags(p, ("backend", "threads", "max_memory", "max_corpus"))
    p.set_defaults(run=run)


def run(args) -> int:
    loaded = load(args.model, backend=args.backend, threads=args.threads, max_memory=args.max_memory)
    model = loaded.model
    tokens = loaded.tokenizer.encode(read_corpus(args.file, args.max_corpus), source=args.file)
    counter = None

    def progress(done: int, total: int) -> None:
        nonlocal counter
        counter = counter or Counter(total, "character", f"scoring {args.file}")
        counter.update(done)

    batch = loaded.fitting_batch(args.batch_size)
    if batch < args.batch_size:
        print(f"note: --batch-size {args.batch_size} would need more than --max-memory {args.max_memory:,} bytes; "
              f"scoring {batch} windows at a time", file=sys.stderr)
    try:
        result = evaluate(model, tokens, batch_size=batch, max_positions=args.max_positions,
                          what=args.file, stride=args.stride, on_progress=progress)
    finally:
        if counter is not None:
            counter.close()
    if args.json:
        print(json.dumps({"model": args.model, "file": args.file, "positions": result.positions, "stride": args.stride,
                          "nll": result.nll,
                          "perplexity": result.perplexity if math.isfinite(result.perplexity) else "inf", "bits_per_char": result.bits_per_char,
                          "seconds": round(result.seconds, 3)}))
        return 0
    seq_len = model.config.seq_len
    rate = result.positions / result.seconds if result.seconds > 0 else math.inf
    print(f"{args.model} on {args.file}")
    context = (f"the {seq_len} before it" if args.stride == 1 else
               f"{seq_len - args.stride + 1} to {seq_len} before it (--stride {args.stride}: an approximation)")
    print(f"  scored:          {result.positions:,} characters, each with {context} as context")
    print(f"  NLL:             {result.nll:.4f} nats per character")
    print(f"  perplexity:      {result.perplexity:.4f}")
    print(f"  bits per char:   {result.bits_per_char:.4f}")
    print(f"  time:            {result.seconds:.2f} s ({rate:,.0f} characters/s)")
    return 0
