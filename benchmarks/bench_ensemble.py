"""The original µGPT's cooperative-ensemble tables, reproduced, with a single GPT of the same size beside them.

    python benchmarks/bench_ensemble.py [--steps 10000] [--jobs 2] [--text tinyshakespeare.txt] [--out DIR]

The original's settings for every run: seq_len 128, batch 1, plain Adam at lr 3e-4 with no schedule, the
sequential walk (`--preset reference` is all of that) and 10,000 steps; its loss is the final training loss
smoothed by an EMA of 0.99 (`ema` below). We also hold out the last 10% of the text (never trained on; the
n-gram tables are counted from the rest) and score it with `eval --stride 32` (`held-out`). Runs:

- Shakespeare, 4 x d64n3 experts, stream 64: prior none, bigram, trigram;
- the stream's width: 64 (the prior-none run), 32, 16, 8;
- addition (examples/addition.py's data and 14 prompts): 4 x d64n3 without a calculator, and with the
  calculator prior (the original's "5 experts with a calculator" is 4 transformer experts and the
  calculator, as here);
- a single GPT with about the ensemble's parameters, for the same steps and for the ensemble's wall time.

It also times a training step of the ensemble against the sum of its experts' steps trained alone (the cpu
backend, one thread, batch 1), and prints that ratio. Runs go `--jobs` at a time, one thread each.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TEXT = ROOT.parent / "shared" / "data" / "tinyshakespeare.txt"
EXPERTS = "d64n3,d64n3,d64n3,d64n3"
ORIGINAL = {  # the original's figures (its README), for the table
    "prior none": "1.800", "prior bigram": "1.777", "prior trigram": "1.753", "stream 64": "1.800",
    "stream 32": "1.771", "stream 16": "1.798", "stream 8": "1.830", "addition, no calculator": "0.781 (0 of 7)",
    "addition, calculator": "0.719 (9-13 of 14)",
}


def cpu_model() -> str:
    for line in subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def ema(losses: list[float], decay: float = 0.99) -> float:
    smoothed = losses[0]
    for loss in losses[1:]:
        smoothed = decay * smoothed + (1 - decay) * loss
    return smoothed


def one_run(job: dict) -> dict:
    """Train one run in this process (one thread), then score it; returns its figures."""
    import microgpt

    start = time.perf_counter()
    run, summary = microgpt.train(job["train"], preset="reference", steps=job["steps"], gen=0, backend="cpu",
                                  threads=1, model=job["model"], **job["settings"])
    seconds = time.perf_counter() - start
    loaded = microgpt.load(job["model"], backend="cpu", threads=1)
    held_out = loaded.evaluate(Path(job["held_out"]).read_text(encoding="utf-8"), stride=32).nll
    result = {"name": job["name"], "ema": ema(summary.losses), "held_out": held_out, "seconds": seconds,
              "parameters": run.model.n_params, "steps": summary.steps}
    if job.get("prompts"):
        done = subprocess.run([sys.executable, "-m", "microgpt", "eval", job["model"], "--prompts", job["prompts"],
                               "--json", "--backend", "cpu", "--threads", "1"], capture_output=True, text=True,
                              check=True)
        counts = json.loads(done.stdout.strip().splitlines()[-1])
        result["prompts"] = f"{counts['correct']} of {counts['total']}"
    return result


def gpt_matching(vocab: int, target: int) -> dict:
    """A gpt shape (4 heads, 3 layers, d_ff 4 x d_model) with about `target` parameters."""
    from microgpt.model import gpt
    from microgpt.model.family import n_params

    def count(d: int) -> int:
        return n_params(gpt, gpt.Config(vocab_size=vocab, d_model=d, n_layers=3, d_ff=4 * d, seq_len=128))
    d_model = min(range(16, 512, 4), key=lambda d: abs(count(d) - target))
    return {"d_model": d_model, "n_layers": 3, "d_ff": 4 * d_model}


def step_ratio(text: str) -> tuple[float, float]:
    """(ms per ensemble step, ms per step of its four experts trained alone, summed), cpu backend, 1 thread."""
    from microgpt.backends import get_backend
    from microgpt.data.tokenizer import CharTokenizer
    from microgpt.model.family import family
    from microgpt.parallel.communicator import SingleProcess
    from microgpt.training.data_parallel import train_step
    from microgpt.training.optim import Optimizer

    tokenizer = CharTokenizer.from_text(text)
    ids = tokenizer.encode(text)
    backend = get_backend("cpu", threads=1)
    rng = np.random.default_rng(0)

    def ms_per_step(name: str, **shape) -> float:
        kind = family(name)
        model = kind.build(kind.Config(vocab_size=tokenizer.size, seq_len=128, **shape), backend, tokenizer, 1)
        optimizer = Optimizer.reference(model.params, 3e-4)
        batches = [np.stack([ids[s : s + 129]]) for s in rng.integers(0, len(ids) - 130, 80)]  # (1, 129) each
        for windows in batches[:10]:
            train_step(model, windows, optimizer, SingleProcess())
        start = time.perf_counter()
        for windows in batches[10:]:
            train_step(model, windows, optimizer, SingleProcess())
        return (time.perf_counter() - start) / 70 * 1000

    alone = 4 * ms_per_step("gpt", d_model=64, head_dims=(64,), n_layers=3, d_ff=256)  # d64n3: one head of 64
    return ms_per_step("ensemble", cooperative=EXPERTS, stream_dim=64), alone


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--text", type=Path, default=DEFAULT_TEXT)
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", type=Path, help="keep the checkpoints here (default: a temporary directory)")
    args = parser.parse_args()
    text = args.text.read_text(encoding="utf-8")
    work = args.out or Path(tempfile.mkdtemp(prefix="bench-ensemble-"))
    work.mkdir(parents=True, exist_ok=True)
    cut = len(text) * 9 // 10
    (work / "train.txt").write_text(text[:cut], encoding="utf-8")
    (work / "held_out.txt").write_text(text[cut:], encoding="utf-8")
    subprocess.run([sys.executable, str(ROOT / "examples" / "addition.py"), str(work / "addition")], check=True)
    sums = (work / "addition" / "addition.txt").read_text(encoding="utf-8")
    sums_cut = len(sums) * 9 // 10
    (work / "sums-train.txt").write_text(sums[:sums_cut], encoding="utf-8")
    (work / "sums-held-out.txt").write_text(sums[sums_cut:], encoding="utf-8")

    def job(name, settings, train="train.txt", held_out="held_out.txt", prompts=None, steps=args.steps):
        return {"name": name, "settings": settings, "train": str(work / train), "held_out": str(work / held_out),
                "model": str(work / name.replace(" ", "-").replace(",", "")), "steps": steps,
                "prompts": prompts and str(work / "addition" / "addition-prompts.tsv")}

    ensemble = {"cooperative": EXPERTS}
    jobs = [job(f"prior {p}", {**ensemble, "stream_dim": 64, "prior": p}) for p in ("none", "bigram", "trigram")]
    jobs += [job(f"stream {b}", {**ensemble, "stream_dim": b}) for b in (32, 16, 8)]
    jobs += [job("addition, no calculator", {**ensemble, "stream_dim": 64}, "sums-train.txt", "sums-held-out.txt",
                 prompts=True),
             job("addition, calculator", {**ensemble, "stream_dim": 64, "prior": "calculator"}, "sums-train.txt",
                 "sums-held-out.txt", prompts=True)]
    with ProcessPoolExecutor(args.jobs) as pool:
        results = {r["name"]: r for r in pool.map(one_run, jobs)}
    results["stream 64"] = results["prior none"]
    from microgpt.data.tokenizer import CharTokenizer

    shape = gpt_matching(CharTokenizer.from_text(text[:cut]).size, results["prior none"]["parameters"])
    ensemble_per_step = results["prior none"]["seconds"] / args.steps  # what the wall-time-matched GPT may spend
    same_steps = one_run(job("gpt, same steps", shape))
    per_step = same_steps["seconds"] / args.steps
    same_time = one_run(job("gpt, same wall time", shape, steps=max(1, int(args.steps * ensemble_per_step / per_step))))
    ensemble_ms, alone_ms = step_ratio(text[:cut])

    print(f"{args.text.name}, {args.steps} steps of 1 x 128 (--preset reference), cpu backend, 1 thread per run, "
          f"{args.jobs} runs at a time, on {cpu_model()}")
    print("| run | parameters | ema train loss | original | held-out nats/char | prompts | seconds |")
    print("| --- | ---: | ---: | ---: | ---: | --- | ---: |")
    for name in [*ORIGINAL, "gpt, same steps", "gpt, same wall time"]:
        r = {"gpt, same steps": same_steps, "gpt, same wall time": same_time}.get(name, results.get(name))
        print(f"| {name} | {r['parameters']:,} | {r['ema']:.3f} | {ORIGINAL.get(name, '')} | {r['held_out']:.3f} | "
              f"{r.get('prompts', '')} | {r['seconds']:.0f} |")
    print(f"gpt of the same size: d_model {shape['d_model']}, 3 layers, 4 heads, d_ff {shape['d_ff']}; the wall-time "
          f"run took {same_time['steps']} steps")
    print(f"step time: ensemble {ensemble_ms:.2f} ms, its four experts alone {alone_ms:.2f} ms summed: ratio "
          f"{ensemble_ms / alone_ms:.2f} (target at most 1.15)")
    (work / "results.json").write_text(json.dumps({**results, "gpt same steps": same_steps,
                                                   "gpt same time": same_time}, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
