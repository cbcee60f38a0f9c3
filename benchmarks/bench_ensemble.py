"""The original µGPT's cooperative-ensemble tables, reproduced, with a single GPT of the same size beside them.

    python benchmarks/bench_ensemble.py [--steps 10000] [--seeds 0,1,2] [--orders 0,1] [--only ROWS] [--jobs 2]
                                        [--text tinyshakespeare.txt] [--out DIR]

The original's settings for every run: seq_len 128, batch 1, plain Adam at lr 3e-4 with no schedule, the
sequential walk (`--preset reference` is all of that) and 10,000 steps; its loss is the final training loss
smoothed by an EMA of 0.99 (`ema` below). We also hold out the last 10% of the text (never trained on; the
n-gram tables are counted from the rest) and score it with `eval --stride 32` (`held-out`). Runs:

- Shakespeare, 4 x d64n3 experts, stream 64: prior none, bigram, trigram;
- the stream's width: 64 (the prior-none run), 32, 16, 8;
- addition (examples/addition.py's data and 14 prompts): 4 x d64n3 without a calculator, and with the
  calculator prior (the original's "5 experts with a calculator" is 4 transformer experts and the
  calculator, as here);
- a single GPT with about the ensemble's parameters, for the same steps and for the ensemble's wall time;
- the held-out gap against an independent PyTorch implementation (1.929 with no prior; four heads of 16 per
  expert, torch's default initialisation): the prior-none ensemble with one thing changed: its experts started
  at He's spread, sqrt(2/d_in) and, for the stream's read and write, 1/sqrt(d_in) (`--expert-init he`, the
  default before it was measured here; every other row is `--expert-init torch`, std 1/sqrt(3 d_in) on every
  linear map, and says so in its settings), read as one head of 64 (`d1x64n3`, how `d64n3` read before), a
  bias on each expert's stream read and write (a graph
  document, `gap_document`: the family's own graph, which trains exactly as the family does, with those nodes'
  params changed), or its windows drawn at random (`--random-batches`) instead of the sequential walk, whose
  10,000 steps of 128 cover the training text 1.28 times and so end on its first quarter again;
- the noise of one run: the prior-none ensemble trained again on the numpy backend (`noise: prior none, numpy
  backend`), the same seed, text and walk, so it differs from the cpu backend's run by float rounding alone
  (the first losses agree to 1e-7). How far the pair ends apart held out is how far any two runs that differ
  in one small thing (a prior's write) can drift from noise alone.

Every row runs once per seed (`--seeds`: the initial weights and nothing else, since the walk is sequential;
the random-windows row's windows too) and per corpus order (`--orders`): order 0 is the text as it is, order k > 0 the training part's paragraphs
(blocks between blank lines) shuffled with seed k, the held-out tail the same for every order; for addition,
examples/addition.py's `--seed k` (its lines shuffled with k; the prompts are the same). The table gives each
figure's mean and range over the runs (prompts: the mean and the fewest and most right), the runs per row
beside them. The prompts are scored twice by `eval --prompts`: as examples/addition.py writes them, each after
a newline (a line's start, as every sum the model trained on follows one), and at a bare context's start, the
same prompts without that newline (`addition-prompts-bare.tsv`). `--only` runs the rows whose names contain
one of its comma-separated words ("addition", "prior bigram"); a tiny `--steps` and a short `--text` make a
smoke run. Each run's figures are appended to `runs.jsonl` in the work directory as it finishes, and a rerun
with the same `--out` takes the runs recorded there (same name and steps) instead of training them again, so
an interrupted bench resumes (a run cut short is trained again from its start, over its checkpoint).

It also times a training step of the ensemble against the sum of its experts' steps trained alone (the cpu
backend, one thread, batch 1; the two alternated, five rounds, the medians), and prints that ratio (the
median of the rounds' ratios). Runs go `--jobs` at a time, one thread each.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
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

    settings = dict(job["settings"])
    backend = settings.pop("backend", "cpu")  # a setting, so that runs.jsonl records it
    start = time.perf_counter()
    run, summary = microgpt.train(job["train"], preset="reference", steps=job["steps"], gen=0, backend=backend,
                                  threads=1, model=job["model"], seed=job["seed"], overwrite=True,
                                  **settings)  # overwrite: a checkpoint there is a run not in runs.jsonl
    seconds = time.perf_counter() - start
    loaded = microgpt.load(job["model"], backend="cpu", threads=1)
    held_out = loaded.evaluate(Path(job["held_out"]).read_text(encoding="utf-8"), stride=32).nll
    result = {"name": job["name"], "row": job["row"], "ema": ema(summary.losses), "held_out": held_out,
              "seconds": seconds, "parameters": run.model.n_params, "steps": summary.steps}
    if job.get("prompts"):
        result["prompts"], result["prompts_total"] = prompts_right(job["model"], job["prompts"])
        bare = Path(job["prompts"]).with_name("addition-prompts-bare.tsv")
        result["prompts_bare"], _ = prompts_right(job["model"], str(bare))
    return result


def prompts_right(model: str, prompts: str) -> tuple[int, int]:
    """(right, total) of `microgpt eval MODEL --prompts FILE`."""
    done = subprocess.run([sys.executable, "-m", "microgpt", "eval", model, "--prompts", prompts, "--json",
                           "--backend", "cpu", "--threads", "1"], capture_output=True, text=True, check=True)
    counts = json.loads(done.stdout.strip().splitlines()[-1])
    return counts["correct"], counts["total"]


def gap_document(vocab: int) -> dict:
    """The prior-none ensemble's graph document (from-family, its library groups copied in) with a bias on every
    expert's stream read and write."""
    from microgpt.model.family import family
    from microgpt.model.graph.from_family import document_for
    from microgpt.model.graph.library import with_library

    config = family("ensemble").Config(vocab_size=vocab, cooperative=EXPERTS, stream_dim=64, seq_len=128,
                                       expert_init="torch")
    document = with_library(document_for("ensemble", config))
    for node in document["groups"]["expert"]["nodes"]:
        if node.get("op") in ("stream_read", "stream_write"):
            node["params"] = {**node.get("params", {}), "bias": True}
    return document


def recorded(record: Path) -> list[dict]:
    """The runs recorded in runs.jsonl (a line cut short by a crash while it was written is skipped)."""
    if not record.exists():
        return []
    runs = []
    for line in record.read_text(encoding="utf-8").splitlines():
        try:
            runs.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return runs


def fits(result: dict, job: dict) -> bool:
    """Whether a recorded run is this job's: its name, steps, settings and text, and every figure it needs (a
    record from before the bare prompts were scored has none, one from before settings were recorded no
    settings to compare)."""
    same = result["name"] == job["name"] and result["steps_asked"] == job["steps"]
    same = same and all(result.get(key, job[key]) == job[key] for key in ("settings", "train"))
    return same and (not job.get("prompts") or "prompts_bare" in result)


def run_all(jobs: list[dict], workers: int, record: Path) -> list[dict]:
    """Each job's figures, from `record` (runs.jsonl) where a run of it is there, else trained `workers` at a
    time and appended to it as each finishes. A run that fails stops the runs not yet started, and its error
    is raised once those running have finished and been recorded."""
    done = {}
    for result in recorded(record):
        for job in jobs:
            if fits(result, job):
                done[job["name"]] = result
    failure = None
    with ProcessPoolExecutor(workers) as pool:
        running = {pool.submit(one_run, job): job for job in jobs if job["name"] not in done}
        for finished in as_completed(running):
            job = running[finished]
            try:
                result = finished.result()
            except Exception as exc:  # noqa: BLE001 - any run's failure: the others running are kept, none started
                failure = failure or exc
                for waiting in running:
                    waiting.cancel()
                continue
            result.update(steps_asked=job["steps"], settings=job["settings"], train=job["train"])
            done[job["name"]] = result
            with record.open("a", encoding="utf-8") as out:
                out.write(json.dumps(result) + "\n")
    if failure is not None:
        raise failure
    return [done[j["name"]] for j in jobs]


def gpt_matching(vocab: int, target: int) -> dict:
    """A gpt shape (4 heads, 3 layers, d_ff 4 x d_model) with about `target` parameters."""
    from microgpt.model import gpt
    from microgpt.model.family import n_params

    def count(d: int) -> int:
        return n_params(gpt, gpt.Config(vocab_size=vocab, d_model=d, n_layers=3, d_ff=4 * d, seq_len=128))
    d_model = min(range(16, 512, 4), key=lambda d: abs(count(d) - target))
    return {"d_model": d_model, "n_layers": 3, "d_ff": 4 * d_model}


def step_ratio(text: str, rounds: int = 5, steps: int = 40) -> tuple[float, float, float]:
    """(ms per ensemble step, ms per step of its four experts trained alone, summed, and the ratio of the two),
    cpu backend, 1 thread: the medians over `rounds` rounds, each timing `steps` steps of the ensemble and the
    same batches through four separate d64n3 GPTs, one after another, the two halves in turn first, so that
    both halves of a round's ratio see the machine alike; the ratio is the median of the rounds' ratios."""
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
    batches = [np.stack([ids[s : s + 129]]) for s in rng.integers(0, len(ids) - 130, steps)]  # (1, 129) each

    def built(name: str, **shape):
        kind = family(name)
        model = kind.build(kind.Config(vocab_size=tokenizer.size, seq_len=128, **shape), backend, tokenizer, 1)
        return model, Optimizer.reference(model.params, 3e-4)

    def ms_per_step(models) -> float:
        start = time.perf_counter()
        for windows in batches:
            for model, optimizer in models:
                train_step(model, windows, optimizer, SingleProcess())
        return (time.perf_counter() - start) / len(batches) * 1000

    ensemble = [built("ensemble", cooperative=EXPERTS, stream_dim=64)]
    alone = [built("gpt", d_model=64, head_dims=(16,) * 4, n_layers=3, d_ff=256) for _ in range(4)]  # d64n3
    ms_per_step(ensemble), ms_per_step(alone)  # warm: numba's compilation and the first allocations
    timed = []  # (ensemble ms, alone ms) per round
    for round_ in range(rounds):
        if round_ % 2:
            alone_ms = ms_per_step(alone)
            timed.append((ms_per_step(ensemble), alone_ms))
        else:
            timed.append((ms_per_step(ensemble), ms_per_step(alone)))
    return (float(np.median([e for e, _ in timed])), float(np.median([a for _, a in timed])),
            float(np.median([e / a for e, a in timed])))


def reordered(text: str, order: int) -> str:
    """Order 0: the text as it is; order k: its paragraphs (blocks between blank lines) shuffled with seed k."""
    if order == 0:
        return text
    blocks = text.split("\n\n")
    random.Random(order).shuffle(blocks)
    return "\n\n".join(blocks)


def spread(values: list[float], digits: int = 3) -> str:
    """'mean (min-max)' of the values, or the one value."""
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{np.mean(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def row_line(name: str, runs: list[dict]) -> str:
    """A table row: each figure's mean and range over the row's runs."""
    prompts = ""
    if runs[0].get("prompts") is not None:
        right = [r["prompts"] for r in runs]
        bare = [r["prompts_bare"] for r in runs]
        prompts = (f"{np.mean(right):.1f} ({min(right)}-{max(right)} of {runs[0]['prompts_total']}); bare "
                   f"{np.mean(bare):.1f} ({min(bare)}-{max(bare)})")
    return (f"| {name} | {len(runs)} | {runs[0]['parameters']:,} | {spread([r['ema'] for r in runs])} | "
            f"{ORIGINAL.get(name, '')} | {spread([r['held_out'] for r in runs])} | {prompts} | "
            f"{np.mean([r['seconds'] for r in runs]):.0f} |")


def against_none(rows: dict[str, list[dict]]) -> list[str]:
    """For each prior's row, and the noise row (prior none again, on the numpy backend), its held-out figure
    minus prior none's on the same seed and corpus order, per run, and the worst (the issue's target: no prior
    worse than none by more than 0.01 on any run)."""
    none = {" ".join(r["name"].split()[-2:]): r["held_out"] for r in rows.get("prior none", [])}
    lines = []
    for name in ("prior bigram", "prior trigram", "noise: prior none, numpy backend"):
        pairs = [(" ".join(r["name"].split()[-2:]), r["held_out"]) for r in rows.get(name, [])]
        diffs = {run: held_out - none[run] for run, held_out in pairs if run in none}
        if diffs:
            each = ", ".join(f"{run} {diff:+.3f}" for run, diff in diffs.items())
            lines.append(f"{name} held out minus prior none's, same seed and order: {each}; worst "
                         f"{max(diffs.values()):+.3f}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--text", type=Path, default=DEFAULT_TEXT)
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds of the initial weights")
    parser.add_argument("--orders", default="0,1", help="comma-separated corpus orders (0: as it is)")
    parser.add_argument("--only", default="", help="comma-separated words: run only the rows that contain one")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", type=Path, help="keep the checkpoints here (default: a temporary directory)")
    args = parser.parse_args()
    from microgpt.data.tokenizer import CharTokenizer

    seeds = [int(s) for s in args.seeds.split(",")]
    orders = [int(o) for o in args.orders.split(",")]
    wanted = [w.strip() for w in args.only.split(",") if w.strip()]
    text = args.text.read_text(encoding="utf-8")
    work = args.out or Path(tempfile.mkdtemp(prefix="bench-ensemble-"))
    work.mkdir(parents=True, exist_ok=True)
    cut = len(text) * 9 // 10
    (work / "held_out.txt").write_text(text[cut:], encoding="utf-8")
    for order in orders:
        (work / f"train-o{order}.txt").write_text(reordered(text[:cut], order), encoding="utf-8")
        subprocess.run([sys.executable, str(ROOT / "examples" / "addition.py"), str(work / f"addition-o{order}"),
                        "--seed", str(order)], check=True, capture_output=True)
        sums = (work / f"addition-o{order}" / "addition.txt").read_text(encoding="utf-8")
        sums_cut = len(sums) * 9 // 10
        (work / f"sums-train-o{order}.txt").write_text(sums[:sums_cut], encoding="utf-8")
        prompts = (work / f"addition-o{order}" / "addition-prompts.tsv").read_text(encoding="utf-8")
        (work / f"addition-o{order}" / "addition-prompts-bare.tsv").write_text(
            "\n".join(line.removeprefix("\\n") for line in prompts.split("\n")), encoding="utf-8")
        (work / f"sums-held-out-o{order}.txt").write_text(sums[sums_cut:], encoding="utf-8")

    def jobs_of(row, settings, sums=False, steps=args.steps):
        """The row's runs: one per seed and order."""
        if wanted and not any(word in row for word in wanted):
            return []
        made = []
        for seed in seeds:
            for order in orders:
                name = f"{row} s{seed} o{order}"
                made.append({"name": name, "row": row, "settings": settings, "seed": seed, "steps": steps,
                             "train": str(work / (f"sums-train-o{order}.txt" if sums else f"train-o{order}.txt")),
                             "held_out": str(work / (f"sums-held-out-o{order}.txt" if sums else "held_out.txt")),
                             "model": str(work / name.replace(" ", "-").replace(",", "")),
                             "prompts": str(work / f"addition-o{order}" / "addition-prompts.tsv") if sums else None})
        return made

    ensemble = {"cooperative": EXPERTS, "expert_init": "torch"}  # said, not defaulted: a record says its init
    jobs = [j for p in ("none", "bigram", "trigram") for j in jobs_of(f"prior {p}", {**ensemble, "prior": p})]
    jobs += [j for b in (32, 16, 8) for j in jobs_of(f"stream {b}", {**ensemble, "stream_dim": b})]
    vocab = CharTokenizer.from_text(text[:cut]).size
    jobs += jobs_of("gap: He's initial spread", {**ensemble, "expert_init": "he"})
    jobs += jobs_of("gap: one head of 64 per expert", {**ensemble, "cooperative": ",".join(["d1x64n3"] * 4)})
    jobs += jobs_of("gap: random windows", {**ensemble, "random_batches": True})
    jobs += jobs_of("noise: prior none, numpy backend", {**ensemble, "prior": "none", "backend": "numpy"})
    row = "gap: biases on the stream read and write"
    if not wanted or any(word in row for word in wanted):
        document = work / "gap-bias.json"
        document.write_text(json.dumps(gap_document(vocab), indent=1), encoding="utf-8")
        jobs += jobs_of(row, {"graph": str(document)})
    jobs += jobs_of("addition, no calculator", ensemble, sums=True)
    jobs += jobs_of("addition, calculator", {**ensemble, "prior": "calculator"}, sums=True)
    record = work / "runs.jsonl"
    results = run_all(jobs, args.jobs, record)
    rows: dict[str, list[dict]] = {}
    for r in results:
        rows.setdefault(r["row"], []).append(r)
    if "prior none" in rows:
        rows["stream 64"] = rows["prior none"]
    gpt_rows = {}
    if not wanted or any(word in "gpt" for word in wanted):
        from microgpt.model import ensemble as ensemble_family
        from microgpt.model.family import n_params

        target = n_params(ensemble_family, ensemble_family.Config(vocab_size=vocab, seq_len=128, **ensemble))
        shape = gpt_matching(vocab, target)
        gpt_rows["gpt, same steps"] = run_all(jobs_of("gpt, same steps", shape), args.jobs, record)
        if "prior none" in rows:  # the wall time of the prior-none ensemble, per step, in the GPT's steps
            ensemble_per_step = np.mean([r["seconds"] for r in rows["prior none"]]) / args.steps
            per_step = np.mean([r["seconds"] for r in gpt_rows["gpt, same steps"]]) / args.steps
            steps = max(1, int(args.steps * ensemble_per_step / per_step))
            gpt_rows["gpt, same wall time"] = run_all(jobs_of("gpt, same wall time", shape, steps=steps),
                                                       args.jobs, record)
    rows.update(gpt_rows)

    print(f"{args.text.name}, {args.steps} steps of 1 x 128 (--preset reference), seeds {args.seeds}, corpus orders "
          f"{args.orders}, cpu backend (the noise row: numpy), 1 thread per run, {args.jobs} runs at a time, on {cpu_model()}")
    print("| run | runs | parameters | ema train loss, mean (range) | original | held-out nats/char, mean (range) | "
          "prompts right after a newline, and at a bare context start, mean (range) | seconds, mean |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: |")
    for name in [*ORIGINAL, *(row for kind in ("gap:", "noise:") for row in rows if row.startswith(kind)), *gpt_rows]:
        if name in rows:
            print(row_line(name, rows[name]))
    for line in against_none(rows):
        print(line)
    if gpt_rows:
        print(f"gpt of the same size: d_model {shape['d_model']}, 3 layers, 4 heads, d_ff {shape['d_ff']}"
              + (f"; the wall-time runs took {gpt_rows['gpt, same wall time'][0]['steps']} steps"
                 if "gpt, same wall time" in gpt_rows else ""))
    if not wanted:
        ensemble_ms, alone_ms, ratio = step_ratio(text[:cut])
        print(f"step time: ensemble {ensemble_ms:.2f} ms, its four experts alone {alone_ms:.2f} ms summed: ratio "
              f"{ratio:.2f}, the median of the rounds' (target at most 1.15)")
    (work / "results.json").write_text(json.dumps(rows, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
