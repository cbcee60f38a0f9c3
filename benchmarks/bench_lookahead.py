"""Lookahead heads against a plain GPT with the same trunk, and speculative sampling against the KV-cache sampler.

    python benchmarks/bench_lookahead.py [--steps 1000] [--jobs 2] [--text tinyshakespeare.txt] [--out DIR]
    python benchmarks/bench_lookahead.py --sampling CHECKPOINT [CHECKPOINT ...]   # the sampling table alone
    python benchmarks/bench_lookahead.py --speculative [--jobs 2] [--out DIR]   # train SPECULATIVE_RUNS, then that
    python benchmarks/bench_lookahead.py --pass-costs CHECKPOINT [CHECKPOINT ...]   # a plain step against a pass

Every run has the same trunk (TRUNK: d_model 96, 6 layers, 4 heads, d_ff 384, seq_len 64), batch 16, the
default recipe otherwise, the cpu backend with one thread, `--jobs` runs at a time. The last 10% of the text is
held out (never trained on) and scored with the main head (`eval`, stride 16). Runs:

- gpt, and lookahead (--lookahead 2: mode mtp with heads of one block, and of none, linear heads on the
  trunk's last state; and mode gap), for the same steps;
- gpt for the lookahead (mtp) run's compute: the steps it takes in the time the lookahead run took, the time
  per step measured on the two runs trained side by side;
- addition (examples/addition.py's data and 14 prompts, each after a newline, exact match): gpt and
  lookahead mtp.

Every lookahead run is also scored head by head on the held-out text (use/head_scores.py: each head's loss and
top-1 agreement with the token at its offset, as `eval` reports them), and every run's fill of FILL_RATE of
the held-out tokens hidden at random (use/fill.py, as `eval --fill-rate`): the gap heads' fill beside the
main head's guess from the text before alone.

Then sampling from each mtp checkpoint (or, with --sampling, from the checkpoints given, trained on --text),
cpu backend, one thread: the KV-cache sampler (`sample`) against `sample --speculative` at temperatures 0, 0.8
and 1, SAMPLED tokens after each of PROMPTS prompts of 64 characters spread over the text's last 20,000
characters (the default run's held-out tokens; a newline alone leads some models into a text of newlines),
the two samplers alternated prompt by prompt, three rounds. Each round's ratio is the plain sampler's seconds
over the speculative one's, summed over the prompts; the table gives the median round's tokens per second of
each, the median ratio, the same ratio in CPU seconds (process time: steadier than the wall clock when other
processes share the cores), tokens per pass and each head's acceptance. At temperature 0 the texts must be
identical. The summary line names the processor, its cores and the load average before and after.

`--speculative` first trains SPECULATIVE_RUNS, each the default lookahead model (`microgpt train TEXT --lookahead
2 --steps 800 --threads 1`: d_model 96, 4 layers, validation on the text's last 20,000 tokens) with its heads'
settings, `--jobs` at a time, and prints each one's validation loss before the sampling table of all of them.

`--pass-costs` times, in CPU seconds, COST_ROUNDS plain decoding steps (one token through the trunk and the
main head, past the window) alternated with as many speculative passes (K + 1 tokens through the trunk and the
main head, K of them kept, then the heads' K greedy drafts), after a prompt from the text's tail: the median of
each part, and a pass with its drafts against a step.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TEXT = ROOT.parent / "shared" / "data" / "tinyshakespeare.txt"
TRUNK = {"d_model": 96, "n_layers": 6, "heads": 4, "d_ff": 384, "seq_len": 64, "batch_size": 16}
HEADS = {"lookahead": 2, "lookahead_mode": "mtp", "head_layers": 1}  # mtp unless a run says otherwise
SAMPLED = 300  # tokens per timed sample
PROMPTS = 8  # prompts per round, each 64 characters, spread over the text's last 20,000 characters
TEMPERATURES = (0.0, 0.8, 1.0)
FILL_RATE = 0.1  # the share of held-out tokens hidden for the fill figures
FILL_TOKENS = 20_000  # held-out tokens the fill figures read (filling is a pass per hole of each window)
COST_ROUNDS = 3000  # plain steps and speculative passes timed by --pass-costs
SPECULATIVE_STEPS = 800
SPECULATIVE_RUNS = {  # name -> the heads' settings of a default lookahead model (--lookahead 2)
    "mtp (heads of 1 block)": {"lookahead_mode": "mtp"},
    "mtp, --lookahead-distill 0.5": {"lookahead_mode": "mtp", "lookahead_distill": 0.5},
    "hydra": {"lookahead_mode": "hydra"},
    "hydra, --lookahead-distill 0.5": {"lookahead_mode": "hydra", "lookahead_distill": 0.5},
    "hydra, --lookahead 3": {"lookahead_mode": "hydra", "lookahead": 3},
}


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


def speculative_run(job: dict) -> dict:
    """Train one default lookahead model for SPECULATIVE_STEPS in this process (one thread); its validation loss."""
    import microgpt

    _, summary = microgpt.train(job["text"], steps=SPECULATIVE_STEPS, gen=0, backend="cpu", threads=1,
                                model=job["model"], family="lookahead", **{"lookahead": 2, **job["settings"]})
    return {"name": job["name"], "model": job["model"], "val": summary.val_loss}


def prompts_of(text: str) -> list[str]:
    """PROMPTS prompts of 64 characters, spread over the last 20,000 characters of the text."""
    tail = text[-20_000:]
    return [tail[i * len(tail) // PROMPTS :][:64] for i in range(PROMPTS)]


def sampling(model_dir: str, prompts: list[str]) -> list[dict]:
    """Per temperature: the KV-cache sampler against the speculative one, alternated prompt by prompt, three
    rounds; tokens per second of the median round, the median ratio in wall and CPU seconds, the acceptance."""
    import microgpt
    from microgpt.use.speculative import Speculation

    loaded = microgpt.load(model_dir, backend="cpu", threads=1)
    loaded.sample(20, prompt=prompts[0], temperature=0, speculative=Speculation())  # compiled, warm
    rows = []
    for temperature in TEMPERATURES:
        speculation, rounds = Speculation(), []
        for _ in range(3):
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
                    raise SystemExit(f"{model_dir}: speculative sampling at temperature 0 gave another text than "
                                     "greedy sampling")
            rounds.append((plain, drafted))
        tokens = SAMPLED * len(prompts)
        rows.append({"temperature": temperature,
                     "plain": tokens / statistics.median(p[0] for p, _ in rounds),
                     "speculative": tokens / statistics.median(d[0] for _, d in rounds),
                     "ratio": statistics.median(p[0] / d[0] for p, d in rounds),
                     "cpu_ratio": statistics.median(p[1] / d[1] for p, d in rounds),
                     "per_pass": speculation.made / speculation.passes,
                     "kept": [kept / checked if checked else None
                              for kept, checked in zip(speculation.kept, speculation.checked)]})
    return rows


def pass_costs(model_dir: str, text: str) -> dict:
    """Median CPU microseconds of a plain step, a speculative pass's trunk and main head, and its drafts."""
    import numpy as np

    import microgpt

    loaded = microgpt.load(model_dir, backend="cpu", threads=1)
    model, drafts = loaded.model, loaded.model.config.lookahead
    prompt = [int(t) for t in loaded.tokenizer.encode(prompts_of(text)[0])]
    plain, speculative = model.decoder(), model.speculative_decoder()
    plain.prefill(prompt)
    speculative.prefill(prompt)
    tokens = np.random.default_rng(0).integers(0, model.config.vocab_size, size=(COST_ROUNDS, drafts + 1)).tolist()
    spent = {"step": [], "pass": [], "drafts": []}
    for fed in tokens:
        clock = time.process_time()
        plain.step(fed[0])
        spent["step"].append(time.process_time() - clock)
        clock = time.process_time()
        speculative.feed(fed)
        speculative.keep(drafts)
        spent["pass"].append(time.process_time() - clock)
        clock = time.process_time()
        speculative.draft(fed[0], drafts, None)  # greedy: each head's argmax, as the sampler asks at temperature 0
        spent["drafts"].append(time.process_time() - clock)
    return {part: statistics.median(times) * 1e6 for part, times in spent.items()}


def sampling_table(speeds: dict[str, list[dict]], load_before: float, prompts: int) -> None:
    """The sampling table of every checkpoint, under its summary line."""
    from microgpt.core.threads import available_cores

    cores = available_cores()
    print(f"sampling {SAMPLED} tokens after each of {prompts} prompts, KV cache against --speculative alternated, "
          f"3 rounds, median; cpu backend, 1 thread; {cpu_model()}, {cores} cores, load average "
          f"{load_before:.2f} before, {os.getloadavg()[0]:.2f} after")
    print("| checkpoint | temperature | KV cache tokens/s | speculative tokens/s | ratio | ratio, CPU seconds | "
          "tokens per pass | kept, head by head |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for name, rows in speeds.items():
        for row in rows:
            kept = ", ".join(f"head {k + 1} {rate:.0%}" if rate is not None else f"head {k + 1} -"
                             for k, rate in enumerate(row["kept"]))
            print(f"| {name} | {row['temperature']:g} | {row['plain']:,.0f} | {row['speculative']:,.0f} | "
                  f"{row['ratio']:.2f} | {row['cpu_ratio']:.2f} | {row['per_pass']:.2f} | {kept} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--text", type=Path, default=DEFAULT_TEXT)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", type=Path, help="keep the checkpoints here (default: a temporary directory)")
    parser.add_argument("--sampling", nargs="+", metavar="CHECKPOINT",
                        help="only time sampling from these mtp checkpoints (trained on --text), training nothing")
    parser.add_argument("--pass-costs", nargs="+", metavar="CHECKPOINT",
                        help="only time a plain step against a speculative pass and its drafts, training nothing")
    parser.add_argument("--speculative", action="store_true",
                        help="train SPECULATIVE_RUNS on --text (the default lookahead model), then time their sampling")
    args = parser.parse_args()
    text = args.text.read_text(encoding="utf-8")
    load_before = os.getloadavg()[0]
    if args.pass_costs:
        print(f"CPU microseconds, median of {COST_ROUNDS:,}, alternated; cpu backend, 1 thread; {cpu_model()}, "
              f"load average {load_before:.2f} before")
        print("| checkpoint | plain step | pass: trunk and main head | pass: the heads' drafts | pass against step |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for name in args.pass_costs:
            cost = pass_costs(name, text)
            print(f"| {name} | {cost['step']:.0f} | {cost['pass']:.0f} | {cost['drafts']:.0f} | "
                  f"{(cost['pass'] + cost['drafts']) / cost['step']:.2f} |")
        print(f"load average after: {os.getloadavg()[0]:.2f}")
        return
    if args.sampling:
        sampling_table({name: sampling(name, prompts_of(text)) for name in args.sampling}, load_before, PROMPTS)
        return
    work = args.out or Path(tempfile.mkdtemp(prefix="bench-lookahead-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.speculative:
        jobs = [{"name": name, "settings": settings, "text": str(args.text),
                 "model": str(work / "-".join(re.findall(r"[a-z0-9.]+", name)))}  # "hydra-lookahead-3"
                for name, settings in SPECULATIVE_RUNS.items()]
        with ProcessPoolExecutor(args.jobs) as pool:
            runs = list(pool.map(speculative_run, jobs))
        print(f"{args.text.name}: the default lookahead model after {SPECULATIVE_STEPS} steps; validation loss "
              "(main head): " + "; ".join(f"{r['name']} {r['val']:.3f}" for r in runs))
        load_before = os.getloadavg()[0]
        sampling_table({r["name"]: sampling(r["model"], prompts_of(text)) for r in runs}, load_before, PROMPTS)
        return
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
    held_out = text[cut:]
    speeds = {name: sampling(results[name]["model"], prompts_of(held_out))
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
    sampling_table(speeds, load_before, PROMPTS)
    (work / "results.json").write_text(json.dumps({**results, "sampling": speeds}, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
