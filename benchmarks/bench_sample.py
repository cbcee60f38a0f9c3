"""Sampling speed: generation with the key/value cache against full forwards, on one model.

A freshly initialised model of the reference default shape with seq_len 256
(d 64, 2 layers, 4 heads of 16, d_ff 256, vocab 65) generates greedily from a
one-character prompt, once with the cache and once without. Every cached step
is one token through the model (O(T)); without the cache every step is a full
forward of the last seq_len tokens. Two lengths are timed:

- 255 tokens: the context always fits in seq_len; the two texts must be identical;
- 500 tokens (the headline case): past 256 characters the cache slides
  (sliding-window attention, see microgpt/model/decode.py) while the uncached
  path re-runs the cropped window, so for this 2-layer model the texts may
  differ after character 256; the line says whether they do.

    python3 benchmarks/bench_sample.py              # numpy backend, best of 3 rounds
    python3 benchmarks/bench_sample.py --backend cuda --rounds 5
"""

from __future__ import annotations

import argparse
import time

from microgpt.backends import CHOICES, get_backend
from microgpt.data.tokenizer import CharTokenizer
from microgpt.model.gpt import GPT, GPTConfig
from microgpt.use.sample import generate

VOCAB = "".join(chr(c) for c in range(ord(" "), ord(" ") + 64)) + "\n"  # 65 characters
SEQ_LEN = 256


def timed(model, tokenizer, n_tokens: int, use_cache: bool, rounds: int) -> tuple[float, str]:
    """(best seconds over rounds, generated text) of greedy generation."""
    best, text = float("inf"), ""
    for _ in range(rounds):
        start = time.perf_counter()
        text = generate(model, tokenizer, "\n", n_tokens, temperature=0, use_cache=use_cache)
        model.be.sync()
        best = min(best, time.perf_counter() - start)
    return best, text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=CHOICES, default="numpy")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per case; the best counts (default: 3)")
    args = parser.parse_args()
    backend = get_backend(args.backend)
    model = GPT(GPTConfig(vocab_size=len(VOCAB), seq_len=SEQ_LEN), backend, seed=0)
    tokenizer = CharTokenizer(VOCAB)
    print(f"backend {backend.name}, {model.n_params:,} parameters, seq_len {SEQ_LEN}, vocab {len(VOCAB)}, "
          f"greedy, best of {args.rounds}")
    for n_tokens in (SEQ_LEN - 1, 500):
        cached, cached_text = timed(model, tokenizer, n_tokens, True, args.rounds)
        full, full_text = timed(model, tokenizer, n_tokens, False, args.rounds)
        same = "identical text" if cached_text == full_text else "texts differ past seq_len"
        print(f"{n_tokens:4d} tokens: cache {cached:6.3f} s ({n_tokens / cached:7.0f} tok/s)  "
              f"no cache {full:6.3f} s ({n_tokens / full:6.0f} tok/s)  speed-up {full / cached:5.1f}x  ({same})")


if __name__ == "__main__":
    main()
