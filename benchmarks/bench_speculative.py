"""`sample --speculative` against the KV-cache sampler, side by side in one run, on tinyshakespeare and on the
Python docs (the corpus `microgpt train` takes without a file), with each draft head's acceptance.

    python benchmarks/bench_speculative.py [--steps 800] [--out DIR] [--temperatures 0 0.8]
    python benchmarks/bench_speculative.py --models SHAKESPEARE_DIR PYDOCS_DIR   # time these checkpoints alone

Trains the default lookahead model (`microgpt train [FILE] --lookahead 2 --steps 800 --threads 1 --backend cpu`:
hydra heads, d_model 96, 4 layers) on each corpus, both at once, unless --models gives them (the first trained on
tinyshakespeare, the second on the Python docs). Then per corpus and temperature: SAMPLED tokens after each of
PROMPTS prompts of 64 characters from the corpus's held-out tail, the plain sampler and the speculative one
alternated prompt by prompt, ROUNDS rounds; the median round's tokens per second of each, the median ratio (wall
and CPU seconds), tokens per pass and each head's acceptance (of the passes that reached it). At temperature 0 the
texts must be identical. cpu backend, one thread; the summary line names the processor, cores and load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHAKESPEARE = ROOT.parent / "shared" / "data" / "tinyshakespeare.txt"
SAMPLED = 300  # tokens per timed sample
PROMPTS = 8
ROUNDS = 3


def cpu_model() -> str:
    for line in subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def corpus_text(name: str) -> str:
    from microgpt.data.corpus import default_corpus

    return SHAKESPEARE.read_text(encoding="utf-8") if name == "tinyshakespeare" else default_corpus()[0]


def train(job: tuple[str, str, int]) -> float:
    """Train the default lookahead model on corpus `name` into `model` (one thread); its validation loss."""
    import microgpt

    name, model, steps = job
    _, summary = microgpt.train(str(SHAKESPEARE) if name == "tinyshakespeare" else None, steps=steps, gen=0,
                                backend="cpu", threads=1, model=model, family="lookahead", lookahead=2)
    return summary.val_loss


def prompts_of(text: str) -> list[str]:
    """PROMPTS prompts of 64 characters spread over the last 20,000 characters (the validation tokens)."""
    tail = text[-20_000:]
    return [tail[i * len(tail) // PROMPTS :][:64] for i in range(PROMPTS)]


def timed(model_dir: str, prompts: list[str], temperature: float) -> dict:
    """The plain sampler against the speculative one, alternated prompt by prompt, ROUNDS rounds."""
    import microgpt
    from microgpt.use.speculative import Speculation

    loaded = microgpt.load(model_dir, backend="cpu", threads=1)
    loaded.sample(20, prompt=prompts[0], temperature=temperature, speculative=Speculation())  # compiled, warm
    loaded.sample(20, prompt=prompts[0], temperature=temperature)
    speculation, rounds = Speculation(), []
    for _ in range(ROUNDS):
        plain, drafted = [0.0, 0.0], [0.0, 0.0]  # (wall, cpu) seconds over the prompts
        for seed, prompt in enumerate(prompts):
            texts = []
            for spent, spec in ((plain, None), (drafted, speculation)):
                wall, cpu = time.perf_counter(), time.process_time()
                texts.append(loaded.sample(SAMPLED, prompt=prompt, temperature=temperature, seed=seed,
                                           speculative=spec))
                spent[0] += time.perf_counter() - wall
                spent[1] += time.process_time() - cpu
            if temperature == 0 and texts[0] != texts[1]:
                raise SystemExit(f"{model_dir}: speculative sampling at temperature 0 gave another text than greedy "
                                 "sampling")
        rounds.append((plain, drafted))
    tokens = SAMPLED * len(prompts)
    return {"blas": getattr(loaded.model.be, "blas", "openblas"),
            "plain": tokens / statistics.median(p[0] for p, _ in rounds),
            "speculative": tokens / statistics.median(d[0] for _, d in rounds),
            "ratio": statistics.median(p[0] / d[0] for p, d in rounds),
            "cpu_ratio": statistics.median(p[1] / d[1] for p, d in rounds),
            "per_pass": speculation.made / speculation.passes,
            "kept": [kept / checked if checked else None for kept, checked in zip(speculation.kept,
                                                                                  speculation.checked)]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=800)
    parser.add_argument("--out", help="where the trained checkpoints go (default: a temporary folder)")
    parser.add_argument("--models", nargs=2, metavar=("SHAKESPEARE_DIR", "PYDOCS_DIR"),
                        help="checkpoints to time instead of training")
    parser.add_argument("--temperatures", type=float, nargs="+", default=[0.0])
    args = parser.parse_args()
    corpora = ("tinyshakespeare", "python docs")
    out = Path(args.out or tempfile.mkdtemp(prefix="bench_speculative_"))
    if args.models:
        models, losses = list(args.models), [None, None]
    else:
        models = [str(out / name.replace(" ", "_")) for name in corpora]
        with ProcessPoolExecutor(2) as pool:
            losses = list(pool.map(train, [(name, model, args.steps) for name, model in zip(corpora, models)]))
    load_before = os.getloadavg()[0]
    rows = [(name, loss, t, timed(model, prompts_of(corpus_text(name)), t))
            for name, model, loss in zip(corpora, models, losses) for t in args.temperatures]
    heads = max(len(row["kept"]) for *_, row in rows)
    blas = ", ".join(sorted({row["blas"] for *_, row in rows}))
    print(f"{cpu_model()}, {os.cpu_count()} cores, load {load_before:.1f} before, {os.getloadavg()[0]:.1f} after; "
          f"cpu backend ({blas}), 1 thread; {SAMPLED} tokens after each of {PROMPTS} prompts, median of {ROUNDS} rounds"
          + ("" if args.models else f"; models trained {args.steps} steps"))
    print("| corpus | val loss | T | plain tok/s | speculative tok/s | ratio | ratio, CPU s | tokens per pass | "
          + " | ".join(f"head {k + 1} kept" for k in range(heads)) + " |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |" + " ---: |" * heads)
    for name, loss, t, row in rows:
        kept = " | ".join("" if rate is None else f"{rate:.0%}" for rate in row["kept"])
        print(f"| {name} | {'' if loss is None else f'{loss:.3f}'} | {t:g} | {row['plain']:,.0f} | "
              f"{row['speculative']:,.0f} | {row['ratio']:.2f} | {row['cpu_ratio']:.2f} | {row['per_pass']:.2f} | "
              f"{kept} |")


if __name__ == "__main__":
    sys.exit(main())
