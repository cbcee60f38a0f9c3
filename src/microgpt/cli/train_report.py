"""What `microgpt train` prints: the run before it trains (resume, validation, parallel layout, backend), its
summary and the model's own figures after, the `--compare` table, and the plots drawn beside the checkpoints.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from microgpt.backends.blas import NAMES as BLAS_NAMES
from microgpt.core import machine
from microgpt.settings.named_runs import load_all_runs
from microgpt.settings.sources import Settings
from microgpt.training.plot import PART_METRIC, PLOT_HINT, plot_available, write_runs_plot
from microgpt.training.run import Run
from microgpt.training.run_files import DEFAULT_ROOT, RunPaths
from microgpt.training.trainer import RunSummary
from microgpt.training.validation import validation_every


def describe_auto(run: Run) -> str:
    """What --resume auto found in --model, in one line; under Slurm, with the job id and its restart count:
    'slurm job 812, restart 2: resuming runs/shk from step 1519'."""
    place, step = run.paths.checkpoint, run.model.params.step
    if run.done:
        found = f"{place} is finished at step {step} (--steps {run.train_config.steps}); nothing to train"
    elif run.resumed:
        found = f"resuming {place} from step {step}"
    else:
        found = f"no checkpoint in {place} yet; starting a new run there"
    job = os.environ.get("SLURM_JOB_ID")
    where = f"slurm job {job}, restart {os.environ.get('SLURM_RESTART_COUNT', '0')}" if job else "--resume auto"
    return f"{where}: {found}"


def describe_validation(run: Run) -> str:
    """'validation: the last 20,000 tokens (312 windows of 65), every 140 steps and at the end'."""
    tc = run.train_config
    if not tc.val_tokens:
        return f"validation: none (no text held out: {run.held_out_by})"
    windows = (tc.val_tokens - 1) // run.model.config.seq_len
    every = validation_every(tc, run.model.config.seq_len)
    when = (f"every {plural(every, 'step')} and " if 0 < every < tc.steps else
            "" if every else f"every {tc.val_interval:g} s and ")
    which = "the first {:,} tokens of the held-out split" if run.corpus.dataset else "the last {:,} tokens"
    return (f"validation: {which.format(tc.val_tokens)} ({plural(windows, 'window')} of "
            f"{run.model.config.seq_len + 1}), {when}at the end")


def plural(count: int, word: str) -> str:
    """'1 layer', '4 layers'."""
    return f"{count:,} {word}{'' if count == 1 else 's'}"


def print_parallel_layout(run: Run) -> None:
    """With several processes or micro-batches, how the global batch is made."""
    tc, comm = run.train_config, run.comm
    if comm.size == 1 and tc.grad_accum == 1:
        return
    micro = tc.batch_size // (comm.size * tc.grad_accum)
    print(f"data-parallel: {comm.describe()} x {tc.grad_accum} micro-batch{'es' if tc.grad_accum > 1 else ''} "
          f"of {micro} = global batch {tc.batch_size}")


def plot_config_runs(config: Path, run: Run) -> None:
    """After a named run: every run of its YAML file trained so far, in one PNG beside the checkpoints."""
    logs = {}
    for named in load_all_runs(config):
        checkpoint = (run.paths.checkpoint if named.id == run.label
                      else Settings({}, named).path("model") or DEFAULT_ROOT / named.id)
        log = RunPaths(checkpoint).metrics
        if log.is_file():
            logs[named.id] = log
    draw_together(logs, run.paths.checkpoint.parent / f"{config.stem}.png", f"runs of {config}",
                  f"the runs of {config}")


def draw_together(logs: dict[str, Path], png: Path, what: str, title: str) -> None:
    """Several runs' curves in one plot, after they trained: a plot that cannot be written is a note, since the
    checkpoints are saved."""
    try:
        drawn = write_runs_plot(logs, png, title)
    except OSError as exc:
        print(f"note: cannot write {png} ({exc.strerror or exc}); the checkpoints were saved", file=sys.stderr)
        return
    if drawn is not None:
        print(f"{what}: {drawn}")


def report_plot(run: Run, summary: RunSummary) -> bool:
    """Finish a run (results line, plot) and say where its plot went; True when it saved a checkpoint."""
    png = run.finish(summary)
    if png is not None:
        print(f"loss plot: {png}")
    return summary.checkpoint is not None and summary.steps_run > 0


def hint_at_plots(any_saved: bool) -> None:
    """Once per command: how to get the plots that were not drawn."""
    if any_saved and not plot_available():
        print(PLOT_HINT, file=sys.stderr)


def describe_backend(backend) -> str:
    """"backend cpu, 2 threads" (the thread count where the backend runs on the CPU), and ", bf16" where its
    products are not float32's."""
    threads = getattr(backend, "threads", None)
    precision = getattr(backend, "precision", "fp32")
    return f"backend {backend.name}" + (f", {threads} thread{'s' if threads != 1 else ''}" if threads else "") + \
        (f", {precision}" if precision != "fp32" else "")


def print_summary(summary: RunSummary) -> None:
    alone = summary.training_tokens_per_sec
    rate = f"{summary.tokens_per_sec:,.0f} tokens/s" + (
        "" if alone is None or f"{alone:,.0f}" == f"{summary.tokens_per_sec:,.0f}" else
        f" ({alone:,.0f} training alone, validation and checkpoints left out)")
    products = " ".join(name for name in (BLAS_NAMES.get(summary.blas), summary.precision) if name)
    lines = [(f"{'stopped at' if summary.interrupted else 'finished'} step {summary.steps} "
              f"({summary.steps_run} this run) in {summary.seconds:.1f}s, {rate} on {machine.describe()}; "
              f"products {products}")]
    lines.append(f"final loss {summary.final_loss:.4f}")
    if summary.val_loss is not None:
        lines[-1] += f", validation loss {summary.val_loss:.4f} (best {summary.best_val_loss:.4f})"
    lines.append(f"checkpoint: {summary.checkpoint}" if summary.checkpoint else "checkpoint: not saved (--no-save)")
    print("\n".join(lines + metrics_table(summary.metrics)))


def metrics_table(metrics: dict[str, float]) -> list[str]:
    """The model's own figures at the last step: those of numbered parts (an ensemble's experts) as a table of
    one row per part, the others one per line."""
    parts: dict[str, dict[str, float]] = {}
    loose = []
    for key, value in metrics.items():
        match = PART_METRIC.fullmatch(key)
        if match:
            parts.setdefault(f"{match.group(1)} {match.group(2)}", {})[match.group(3)] = value
        else:
            loose.append(f"{key.replace('_', ' ')}: {value:.4g}")
    if not parts:
        return loose
    columns = list(dict.fromkeys(name for figures in parts.values() for name in figures))
    parts = dict(sorted(parts.items(), key=lambda item: (item[0].split()[0], int(item[0].split()[1]))))  # 0 first
    width = max(len(row) for row in parts)
    lines = [f"{'':<{width}}  " + "  ".join(f"{c.replace('_', ' '):>12}" for c in columns)]
    lines += [f"{row:<{width}}  " + "  ".join(f"{figures[c]:>12.4g}" if c in figures else f"{'-':>12}"
                                              for c in columns)
              for row, figures in parts.items()]  # "-": a figure the part has not (the prior is never routed)
    return lines + loose


def print_table(rows: list[tuple[str, int, RunSummary]]) -> None:
    """The --compare table: one line per spec."""
    width = max(len("spec"), *(len(spec) for spec, _, _ in rows))
    print(f"{'spec':<{width}}  {'parameters':>10}  {'loss':>7}  {'val loss':>8}  {'time':>8}  {'tokens/s':>9}")
    for spec, n_params, s in rows:
        val = f"{s.val_loss:.4f}" if s.val_loss is not None else "-"
        stopped = f"  (stopped at step {s.steps})" if s.interrupted else ""
        print(f"{spec:<{width}}  {n_params:>10,}  {s.final_loss:>7.4f}  {val:>8}  {s.seconds:>7.1f}s  "
              f"{s.tokens_per_sec:>9,.0f}{stopped}")
