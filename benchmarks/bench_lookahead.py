"""Lookahead heads against a plain GPT with the same trunk, and speculative sampling against the KV-cache sampler.

    python benchmarks/bench_lookahead.py [--steps 1000] [--jobs 2] [--text tinyshakespeare.txt] [--out DIR]

Every run has the same trunk (TRUNK: d_model 96, 6 layers, 4 heads, d_ff 384, seq_len 64), batch 16, the
default recipe otherwise, the cpu backend with one thread, `--jobs` runs at a time. The last 10% of the text is
held out (never trained on) and scored with the main head (`eval`, stride 16). Runs:

- gpt, and lookahead (--lookahead 2: mode mtp with heads of one block, and of none, linear heads on the
  trunk's last state; and mode gap), for the same steps;
- gpt for the lookahead (mtp) run's compute: the steps it takes in the time the lookahead run took, the time
  per step measured on the two runs trained side by side;
- addition (examples/addition.py's data and 14 prompts, exact match): gpt and lookahead mtp.

Every lookahead run is also scored head by head on the held-out text (use/head_scores.py: each head's loss and
top-1 agreement with the token at its offset, as `eval` reports them), and every run's fill of FILL_RATE of
the held-out tokens hidden at random (use/fill.py, as `eval --fill-rate`): the gap heads' fill beside the
main head's guess from the text before alone.

Then sampling at temperature 0 from each mtp checkpoint, 500 characters after the held-out text's first 64
characters (a newline alone leads some models into a text of newlines, which no draft matches), one thread: the
KV-cache sampler (`sample`) against `sample --speculative`, alternated, best of three each; the texts must be
identical, and it prints the characters per second of both and each head's acceptance.
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

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TEXT = ROOT.parent / "shared" / "data" / "tinyshakespeare.txt"
TRUNK = {"d_model": 96, "n_layers": 6, "heads": 4, "d_ff": 384, "seq_len": 64, "batch_size": 16}
HEADS = {"lookahead": 2, "head_layers": 1}
SAMPLED = 500  # characters per timed sample
FILL_RATE = 0.1  # the share of held-out tokens hidden for the fill figures
FILL_TOKENS = 20_000  # held-out tokens the fill figures read (filling is a pass per hole of each window)


def cpu_model() -> str:
    for line in subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def one_run(job: dict) -> dict:
    """Train one run in this process (one thread), then score it with its main head; returns its figures."""
    import microgpt

    start = time.perf_counter()
    run, summary = microgpt.train(job["train"], steps=job["steps"], gen=0, val_tokens=0, backend="cpu", threads=1,
                                  model=job["model"], **TRUNK, **job["settings"])
    seconds = time.perf_counter() - start
    from microgpt.use.fill import fill_rates
    from microgpt.use.head_scores import score_heads

    loaded = microgpt.load(job["model"], backend="cpu", threads=1)
    held_out_text = Path(job["held_out"]).read_text(encoding="utf-8")
    held_out = loaded.evaluate(held_out_text, stride=16).nll
    tokens = loaded.tokenizer.encode(held_out_text)
    fill = fill_rates(loaded.model, tokens, FILL_RATE, max_positions=FILL_TOKENS)
    result = {"name": job["name"], "model": job["model"], "held_out": held_out, "seconds": seconds,
              "parameters": run.model.n_params,
              "steps": summary.steps, "heads": {k: v for k, v in summary.metrics.items() if k.endswith("_loss")},
              "held_out_heads": [h.as_json() for h in score_heads(loaded.model, tokens)],
              "fill": {"holes": fill.holes, "accuracy": fill.gap_accuracy, "left_only": fill.left_accuracy,
                       "by_gap_heads": fill.by_gap_heads}}
    if job.get("prompts"):
        done = subprocess.run([sys.executable, "-m", "microgpt", "eval", job["model"], "--prompts", job["prompts"],
                               "--json", "--backend", "cpu", "--threads", "1"], capture_output=True, text=True,
                              check=True)
        counts = json.loads(done.stdout.strip().splitlines()[-1])
        result["prompts"] = f"{counts['correct']} of {counts['total']}"
    return result


def sampling(model_dir: str, prompt: str) -> dict:
    """Characters per second at temperature 0: the KV-cache sampler and the speculative one, best of three each."""
    import microgpt
    from microgpt.use.speculative import Speculation

    loaded = microgpt.load(model_dir, backend="cpu", threads=1)
    plain_times, speculative_times = [], []
    for _ in range(3):
        start = time.perf_counter()
        plain = loaded.sample(SAMPLED, prompt=prompt, temperature=0)
        plain_times.append(time.perf_counter() - start)
        speculation = Speculation()
        start = time.perf_counter()
        drafted = loaded.sample(SAMPLED, prompt=prompt, temperature=0, speculation=speculation)
        speculative_times.append(time.perf_counter() - start)
        if drafted != plain:
            raise SystemExit("speculative sampling at temperature 0 gave another text than greedy sampling")
    return {"plain": SAMPLED / min(plain_times), "speculative": SAMPLED / min(speculative_times),
            "report": speculation.report(), "text": plain}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--text", type=Path, default=DEFAULT_TEXT)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", type=Path, help="keep the checkpoints here (default: a temporary directory)")
    args = parser.parse_args()
    text = args.text.read_text(encoding="utf-8")
    work = args.out or Path(tempfile.mkdtemp(prefix="bench-lookahead-"))
    work.mkdir(parents=True, exist_ok=True)
    cut = len(text) * 9 // 10
    (work / "train.txt").write_text(text[:cut], encoding="utf-8")
    (work / "held_out.txt").write_text(text[cut:], encoding="utf-8")
    subprocess.run([sys.executable, str(ROOT / "examples" / "addition.py"), str(work / "addition")], check=True)
    sums = (work / "addition" / "addition.txt").read_text(encoding="utf-8")
    sums_cut = len(sums) * 9 // 10
    (work / "sums-train.txt").write_text(sums[:sums_cut], encoding="utf-8")
    (work / "sums-held-out.txt").write_text(sums[sums_cut:], encoding="utf-8")

    def job(name, settings, train="train.txt", held_out="held_out.txt", prompts=False, steps=args.steps):
        return {"name": name, "settings": settings, "train": str(work / train), "held_out": str(work / held_out),
                "model": str(work / name.replace(" ", "-").replace(",", "")), "steps": steps,
                "prompts": prompts and str(work / "addition" / "addition-prompts.tsv")}

    mtp, gap = {"family": "lookahead", **HEADS}, {"family": "lookahead", **HEADS, "lookahead_mode": "gap"}
    jobs = [job("gpt, same steps", {}), job("lookahead mtp", mtp), job("lookahead mtp, linear heads",
                                                                          {**mtp, "head_layers": 0}),
            job("lookahead gap", gap),
            job("addition, gpt", {}, "sums-train.txt", "sums-held-out.txt", True),
            job("addition, lookahead mtp", mtp, "sums-train.txt", "sums-held-out.txt", True)]
    with ProcessPoolExecutor(args.jobs) as pool:
        results = {r["name"]: r for r in pool.map(one_run, jobs)}
    ratio = results["lookahead mtp"]["seconds"] / results["gpt, same steps"]["seconds"]  # trained side by side
    results["gpt, same compute"] = one_run(job("gpt, same compute", {}, steps=round(args.steps * ratio)))
    speeds = {name: sampling(results[name]["model"], text[cut : cut + 64])
              for name in ("lookahead mtp", "lookahead mtp, linear heads")}

    print(f"{args.text.name}, last 10% held out; trunk d_model 96, 6 layers, 4 heads, d_ff 384, seq_len 64, "
          f"batch 16; lookahead 2 heads of 1 layer; cpu backend, 1 thread per run, {args.jobs} runs at a time, on "
          f"{cpu_model()}")
    print("| run | parameters | steps | held-out nats/char (main head) | head losses (train, last step) | "
          "addition prompts | seconds |")
    print("| --- | ---: | ---: | ---: | --- | --- | ---: |")
    for name in ["gpt, same steps", "gpt, same compute", "lookahead mtp", "lookahead mtp, linear heads",
                 "lookahead gap", "addition, gpt", "addition, lookahead mtp"]:
        r = results[name]
        heads = ", ".join(f"{k.removesuffix('_loss')} {v:.3f}" for k, v in r["heads"].items())
        print(f"| {name} | {r['parameters']:,} | {r['steps']} | {r['held_out']:.3f} | {heads} | "
              f"{r.get('prompts', '')} | {r['seconds']:.0f} |")
    print(f"lookahead mtp / gpt seconds per step, trained side by side: {ratio:.2f}")
    print(f"held out, head by head (windows of 64 as training reads them), and the fill of {FILL_RATE:g} of the "
          f"first {FILL_TOKENS:,} held-out tokens hidden at random:")
    for name in ["gpt, same steps", "lookahead mtp", "lookahead mtp, linear heads", "lookahead gap"]:
        r = results[name]
        heads = "; ".join(f"{h['name']} NLL {h['nll']:.3f} top-1 {h['top1']:.3f}" for h in r["held_out_heads"])
        fill = r["fill"]
        print(f"  {name}: {heads or 'one head'}; fill {fill['accuracy']:.3f} right ({fill['by_gap_heads']:,} of "
              f"{fill['holes']:,} holes by gap heads), the main head from the left {fill['left_only']:.3f}")
    for name, speed in speeds.items():
        print(f"{name}, sampling {SAMPLED} characters at temperature 0: KV cache {speed['plain']:,.0f} chars/s, "
              f"speculative {speed['speculative']:,.0f} chars/s, ratio {speed['speculative'] / speed['plain']:.2f} "
              f"(target at least 1.5), identical text; {speed['report']}")
    (work / "results.json").write_text(json.dumps({**results, "sampling": speeds}, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
