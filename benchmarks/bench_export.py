"""Greedy decoding of an exported model in ONNX Runtime, with the KV cache, against `microgpt sample` at
temperature 0, side by side on the same CPU in one run.

At the default shape (d 96, 4 layers, 4 heads, d_ff 384, seq_len 64) and the reference shape (d 64, 2 layers,
4 heads, d_ff 256, seq_len 128), a freshly initialised GPT of vocab 65 is saved as a checkpoint and exported
with `microgpt export --format onnx --kv-cache`. Then, from a one-character prompt, each round generates
N tokens (default 500: past seq_len, so both caches slide):

- microgpt: `microgpt.use.sample.generate` at temperature 0 (what `microgpt sample --temperature 0` runs),
  its KV-cache decoder on the cpu backend (or --backend);
- ONNX Runtime: the greedy decoder of docs/export.md (a prompt, then one token a call, past keys and values
  fed back), on its CPU provider.

Both use --threads threads (default: every core, microgpt's default; ONNX Runtime's intra-op pool is set
to the same). Each figure is the best of --rounds rounds, with the median beside it; the line says whether
the two texts are identical.

    python benchmarks/bench_export.py [--tokens 500] [--rounds 5] [--threads N] [--backend cpu]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from microgpt.backends import get_backend
from microgpt.core.threads import default_threads
from microgpt.data.tokenizer import CharTokenizer
from microgpt.export import export
from microgpt.model.checkpoint import save_checkpoint
from microgpt.model.gpt import GPT, GPTConfig
from microgpt.use.loaded import load
from microgpt.use.sample import generate

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling modules below
from bench_cpu import cpu_model_name

VOCAB = "".join(chr(c) for c in range(ord(" "), ord(" ") + 64)) + "\n"  # 65 characters
SHAPES = {"default": {"d_model": 96, "n_layers": 4, "head_dims": (24,) * 4, "d_ff": 384, "seq_len": 64},
          "reference": {"d_model": 64, "n_layers": 2, "head_dims": (16,) * 4, "d_ff": 256, "seq_len": 128}}
PROMPT = "\n"


def ort_greedy(session, seq_len: int, prompt: list[int], n_tokens: int) -> list[int]:
    """docs/export.md's greedy decoder, on an open session."""
    past = {i.name: np.zeros((1, i.shape[1], 0, i.shape[3]), np.float32) for i in session.get_inputs()[2:]}
    ids, position, made = np.array([prompt[-seq_len:]], np.int64), 0, []
    for _ in range(n_tokens):
        logits, *present = session.run(None, {"ids": ids, "position": np.array(position), **past})
        position, ids = position + ids.shape[1], logits[:, -1:].argmax(-1)
        made.append(int(ids[0, 0]))
        past = dict(zip(past, present))
    return made


def timed(run, rounds: int) -> tuple[float, float, object]:
    """(best seconds, median seconds, the last result) of `run()` over rounds."""
    times, result = [], None
    for _ in range(rounds):
        start = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times), result


def bench_shape(name: str, shape: dict, args, where: Path) -> None:
    import onnxruntime as ort

    tokenizer = CharTokenizer(VOCAB)
    config = GPTConfig(vocab_size=len(VOCAB), **shape)
    checkpoint = where / name
    save_checkpoint(checkpoint, GPT(config, get_backend("numpy"), seed=0), tokenizer, family_name="gpt")
    export(checkpoint, "onnx", where / f"{name}.onnx", kv_cache=True)
    loaded = load(checkpoint, backend=args.backend, threads=args.threads)
    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    session = ort.InferenceSession(str(where / f"{name}.onnx"), options, providers=["CPUExecutionProvider"])
    prompt = list(tokenizer.encode(PROMPT))

    def ours():
        return generate(loaded.model, tokenizer, PROMPT, args.tokens, temperature=0)

    def theirs():
        return tokenizer.decode(ort_greedy(session, config.seq_len, prompt, args.tokens))

    ours(), theirs()  # warm-up: numba's kernels, ONNX Runtime's first-run allocations
    ours_best, ours_median, ours_text = timed(ours, args.rounds)
    ort_best, ort_median, ort_text = timed(theirs, args.rounds)
    same = "identical text" if ours_text == ort_text else "texts differ"
    rate = args.tokens / ours_best, args.tokens / ort_best
    print(f"{name:9s} d {config.d_model}, {config.n_layers} layers, {len(config.head_dims)} heads, d_ff {config.d_ff}, "
          f"T {config.seq_len} ({loaded.model.n_params:,} parameters): microgpt sample {rate[0]:7.0f} tok/s "
          f"(median {args.tokens / ours_median:7.0f})  ONNX Runtime {rate[1]:7.0f} tok/s (median "
          f"{args.tokens / ort_median:7.0f})  ratio {rate[1] / rate[0]:5.2f}x  ({same})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=500, help="tokens generated per round (default: 500)")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds per side; the best counts (default: 5)")
    parser.add_argument("--threads", type=int, default=default_threads(),
                        help="threads for both sides (default: every core)")
    parser.add_argument("--backend", default="cpu", help="microgpt's backend (default: cpu, what sample picks "
                        "without a GPU)")
    args = parser.parse_args()
    try:
        import onnxruntime
    except ImportError:
        sys.exit('bench_export.py needs ONNX Runtime: pip install -e ".[export]"')
    print(f"cpu: {cpu_model_name()}; {args.threads} threads; onnxruntime {onnxruntime.__version__}; "
          f"greedy, {args.tokens} tokens from {PROMPT!r}, best of {args.rounds}")
    with tempfile.TemporaryDirectory(prefix="bench-export-") as where:
        for name, shape in SHAPES.items():
            bench_shape(name, shape, args, Path(where))


if __name__ == "__main__":
    main()
