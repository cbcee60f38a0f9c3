"""What a trace costs against a plain forward: issue 51's bound is twice the forward for a 1,000-token text at the
default shape (d 96, 4 layers of 4 heads, d_ff 384, T 64, a character vocabulary of 65).

- **forward**: the family's own `logits` over the text's windows (whole windows of T as one batch, then the
  part window), what the trace runs;
- **trace**: `LoadedModel.trace(text)`, the same windows through the model's graph, every node's output
  copied to the host and kept;
- **loss (ablated)**: `LoadedModel.loss(text, ablate=[one head])`, for what --ablate-heads pays per head.

The weights are the default init (the cost does not depend on them). Every case runs once per round, the order
alternating, and the median of --rounds rounds counts. The last line names lscpu's model name, the cores and
the load average.

    python benchmarks/bench_inspect.py
    python benchmarks/bench_inspect.py --backend numpy --tokens 1000 --rounds 20
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

from microgpt.backends import get_backend
from microgpt.data.tokenizer import CharTokenizer
from microgpt.model.family import family
from microgpt.use.loaded import LoadedModel

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling modules below
from bench_cpu import cpu_model_name
from corpus import CANDIDATES


def text_of(tokens: int) -> tuple[str, str, str]:
    """(the first `tokens` characters of tinyshakespeare, or of a repeated sentence where it is absent, every
    character of the whole, where)."""
    for path in CANDIDATES:
        if path.is_file():
            whole = path.read_text(encoding="utf-8")
            return whole[:tokens], "".join(sorted(set(whole))), f"tinyshakespeare from {path}"
    sentence = "It was the best of times, it was the worst of times.\n"
    text = (sentence * (tokens // len(sentence) + 1))[:tokens]
    return text, "".join(sorted(set(text))), "a repeated sentence (no tinyshakespeare)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--tokens", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    text, characters, where = text_of(args.tokens)
    tokenizer = CharTokenizer(characters)
    gpt = family("gpt")
    config = gpt.Config(vocab_size=tokenizer.size)
    backend = get_backend(args.backend, threads=args.threads) if args.threads else get_backend(args.backend)
    model = gpt.build(config, backend, tokenizer, 0)
    loaded = LoadedModel(model, "gpt", tokenizer, Path("bench"), 2**34)
    ids = tokenizer.encode(text)
    whole = len(ids) // config.seq_len * config.seq_len

    def forward():
        backend.to_host(model.logits(ids[:whole].reshape(-1, config.seq_len)))
        if whole < len(ids):
            backend.to_host(model.logits(ids[whole:].reshape(1, -1)))

    cases = {"forward": forward, "trace": lambda: loaded.trace(ids),
             "loss (ablated)": lambda: loaded.loss(ids, ablate=["blocks.1.attn.heads[2]"])}
    print(f"{gpt.describe(config)}, {len(ids)} tokens of {where}, backend {args.backend}")
    for run in cases.values():
        run()  # warm: the graph built, kernels compiled
    times: dict[str, list[float]] = {name: [] for name in cases}
    for round_ in range(args.rounds):
        names = list(cases) if round_ % 2 == 0 else list(reversed(cases))
        for name in names:
            start = time.perf_counter()
            cases[name]()
            times[name].append(time.perf_counter() - start)
    base = float(np.median(times["forward"]))
    for name, values in times.items():
        median = float(np.median(values))
        print(f"{name:<16} {median * 1e3:8.2f} ms  {median / base:5.2f}x the forward")
    print(f"median of {args.rounds} rounds; {cpu_model_name()}, {os.cpu_count()} cores, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
