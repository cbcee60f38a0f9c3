"""`microgpt train [FILE]`: train a model on a text file (or on Python's bundled docs), resume one, train a
named run from a YAML file, or compare model specs on the same data.

The setting flags are made from the config dataclasses (microgpt/config.py);
the precedence of their sources lives in microgpt/settings.py and the run
itself in microgpt/run.py. This module parses the command line and prints.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from pathlib import Path

from microgpt.cli.common import add_setting_flags, flag_type, help_text, positive_int
from microgpt.core import machine
from microgpt.core.errors import ConfigError, DistributedError
from microgpt.core.progress import Progress
from microgpt.dist.communicator import communicator
from microgpt.dist.launch import relaunch, watch_launcher
from microgpt.settings.named_runs import load_all_runs, load_run
from microgpt.settings.sources import Settings, check_named_runs, known_settings
from microgpt.training.compare import prepare_compare
from microgpt.training.plot import PART_METRIC, PLOT_HINT, plot_available, write_runs_plot
from microgpt.training.prepare import prepare, start
from microgpt.training.resolve import RESUME_AUTO
from microgpt.training.run import Run
from microgpt.training.run_files import COMPARE_PLOT, DEFAULT_ROOT, RunPaths
from microgpt.training.trainer import RunSummary

# The flags that say how to invoke a run rather than what to train: (flags, argparse keywords).
INVOCATION_FLAGS = [
    (("--no-save",), {"action": "store_true", "help": "do not write a checkpoint or logs"}),
    (("--resume",), {"type": lambda text: text if text == RESUME_AUTO else Path(text), "metavar": "DIR",
                     "help": "continue a checkpoint: weights, Adam moments, step, data position and random state. "
                     "--resume auto continues the one in --model if there is one (a finished one: says so and exits "
                     "0) and starts a new run there if not (./auto names a directory called auto)"}),
    (("--overwrite",), {"action": "store_true",
                        "help": "start a new run over an unfinished checkpoint in --model, which is refused without "
                        "it (a finished one is replaced with a note)"}),
    (("--init-from",), {"type": Path, "metavar": "DIR",
                        "help": "fine-tune: start a new run from a checkpoint's weights, with a fresh optimiser, "
                        "schedule and step 0, written to its own --model; characters a char checkpoint lacks get new "
                        "embedding and output rows"}),
    (("--config",), {"type": Path, "metavar": "FILE", "help": "a YAML file of named runs (see examples/configs.yaml)"}),
    (("--run",), {"dest": "run_id", "metavar": "ID", "help": "the run of --config to train; flags override its settings"}),
    (("--compare",), {"metavar": "SPECS",
                      "help": "train each model spec in turn on the same data and print a table, e.g. "
                      "d64n2,d4x16n2,d1+2+4+8+16+32n2 (d<width> | d<count>x<width> | d<w1>+<w2>+..., then "
                      "n<layers>, optional ff<d_ff>; d_ff is --d-ff if given, else 4 x d_model); with --family "
                      "ensemble, ensembles separated by ';', each its experts' specs, e.g. "
                      "'d64n3,d64n3;d32n3,d32n3,d32n3,d32n3'"}),
    (("--quiet",), {"action": "store_true", "help": "no progress output, only the summary"}),
    (("--procs",), {"type": positive_int, "metavar": "N",
                    "help": "train data-parallel in N processes under mpiexec (needs the mpi extra), one BLAS "
                    "thread each; --batch-size is split over them. Use one per core: on 2 quiet cores, 2 "
                    "processes x 1 thread trained 1.8-1.9x as fast as one single-threaded process and 5-8% "
                    "faster than one process with 2 threads, the default (benchmarks/bench_distributed.py); "
                    "see docs/distributed.md"}),
]


def add_parser(commands) -> None:
    p = commands.add_parser("train", help="train a model", description=__doc__.split("\n\n")[0].split(":", 1)[1].strip())
    fields = known_settings()
    p.add_argument("file", nargs="?", metavar="FILE", type=flag_type(fields["file"]),
                   help=f"{fields['file'].help} (default: {fields['file'].default_text})")
    add_setting_flags(p, [f for f in fields.values() if f.key != "file"])
    for flags, keywords in INVOCATION_FLAGS:
        p.add_argument(*flags, **{**keywords, "help": help_text(keywords["help"])})
    p.set_defaults(run=run)


def run(args) -> int:
    if args.procs is not None and args.procs > 1:
        if args.compare is not None:
            raise DistributedError("--compare trains its specs in one process; drop --procs")
        return relaunch(args.procs, args.argv)
    comm = communicator()
    if comm.size > 1:
        watch_launcher()  # started by --procs: stop, saving, should the launcher die
    with comm.failing_together("microgpt train"), contextlib.ExitStack() as stack:
        if not comm.is_writer:  # rank 0 prints; the others speak only to report their own failure (stderr)
            stack.enter_context(contextlib.redirect_stdout(stack.enter_context(open(os.devnull, "w"))))
            stack.enter_context(warnings.catch_warnings())
            warnings.simplefilter("ignore")  # e.g. NumPy's overflow warnings, which rank 0 shows too
        return train_command(args, comm)


def train_command(args, comm) -> int:
    with comm.preparing_together("microgpt train"):  # every rank checks; a mistake ends them all with one line
        if args.run_id is not None and args.config is None:
            raise ConfigError(f"--run {args.run_id} needs --config FILE, the YAML file that defines it")
        named = load_run(args.config, args.run_id) if args.config is not None else None
        if named is not None:
            check_named_runs(args.config)
        settings = Settings({key: getattr(args, key) for key in known_settings()}, named)
        backend, note = start(settings, comm)
        if note and not args.quiet:
            print(note)
        if args.compare is not None:
            if args.resume or args.init_from:
                raise ConfigError(f"--compare trains new models and cannot {'--resume' if args.resume else '--init-from'}"
                                  "; give it one spec's checkpoint on its own")
            if comm.size > 1:
                raise DistributedError("--compare trains its specs in one process; run it without mpiexec or --procs")
        else:
            run = prepare(settings, backend, args.resume, save=not args.no_save, init_from=args.init_from,
                          overwrite=args.overwrite)
    if args.compare is not None:
        return run_compare(args, settings, backend)
    return run_single(args, settings, run, comm)


def run_single(args, settings: Settings, run: Run, comm) -> int:
    with run:
        if args.resume == RESUME_AUTO:
            print(describe_auto(run), flush=True)
            if run.done:
                return 0
        if not args.quiet:
            print(f"corpus: {run.corpus.description}; tokenizer {run.tokenizer.describe()}")
            print(f"model: {run.description}; {run.model.n_params:,} parameters; {describe_backend(run.model.be)}"
                  + (f"; resuming at step {run.model.params.step}" if run.resumed else ""))
            print(describe_validation(run))
        if comm.size > 1:
            print(f"processes: {comm.placement()}", flush=True)  # before any failure, to name a dead pid's rank
        for note in run.notes:  # before training, so a schedule the user did not mean can still be stopped
            print(f"note: {note}")
        summary = run.train(Progress(args.quiet or not comm.is_writer))
        print_summary(summary)
        print_parallel_layout(run)
        saved = report_plot(run, summary)
        if saved and args.config is not None and plot_available():
            plot_config_runs(args.config, run)
        hint_at_plots(saved)
    gen = settings.value("gen") if comm.is_writer else 0
    if gen and not summary.interrupted:
        print("sample:")
        run.sample(gen, on_text=lambda ch: print(ch, end="", flush=True))
        print()
    return exit_status(summary)


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
        return "validation: none (--val-tokens 0)"
    windows = (tc.val_tokens - 1) // run.model.config.seq_len
    when = (f"every {plural(tc.validate_every, 'step')}" if tc.validate_every else f"every {tc.val_interval:g} s")
    return (f"validation: the last {tc.val_tokens:,} tokens ({plural(windows, 'window')} of "
            f"{run.model.config.seq_len + 1}), {when} and at the end")


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


def run_compare(args, settings: Settings, backend) -> int:
    """Train each --compare spec in turn on the same data, batches, seed and steps; print a table."""
    comparison = prepare_compare(settings, args.compare, backend, save=not args.no_save, overwrite=args.overwrite)
    if not args.quiet:
        print(f"corpus: {comparison.corpus.description}; tokenizer {comparison.tokenizer.describe()}; "
              f"{describe_backend(backend)}")
    for note in comparison.notes:
        print(f"note: {note}")
    rows, logs, any_saved = [], {}, False
    try:
        for i, run in enumerate(comparison.runs(), 1):
            if not args.quiet:
                print(f"[{i}/{len(comparison.specs)}] {run.label}: {run.model.n_params:,} parameters, {run.description}")
            with run:
                summary = run.train(Progress(args.quiet))
                any_saved |= report_plot(run, summary)
            rows.append((run.label, run.model.n_params, summary))
            if run.paths.metrics is not None:
                logs[run.label] = run.paths.metrics
            if summary.interrupted:
                break
    finally:
        comparison.close()
    print_table(rows)
    print(f"measured on {machine.describe()}")
    if any_saved and plot_available():
        draw_together(logs, comparison.base / COMPARE_PLOT, "comparison plot",
                      f"{comparison.corpus.name}: {len(logs)} specs, {comparison.train_config.steps} steps")
    hint_at_plots(any_saved)
    return exit_status(rows[-1][2])


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
    """"backend cpu, 2 threads" (the thread count where the backend runs on the CPU)."""
    threads = getattr(backend, "threads", None)
    return f"backend {backend.name}" + (f", {threads} thread{'s' if threads != 1 else ''}" if threads else "")


def exit_status(summary: RunSummary) -> int:
    """0 for a finished run; 128 + the signal for one a signal stopped (130 for Ctrl-C, 143 for SIGTERM)."""
    return 128 + summary.stop_signal if summary.interrupted else 0


def print_summary(summary: RunSummary) -> None:
    lines = [(f"{'stopped at' if summary.interrupted else 'finished'} step {summary.steps} "
              f"({summary.steps_run} this run) in {summary.seconds:.1f}s, {summary.tokens_per_sec:,.0f} tokens/s "
              f"on {machine.describe()}")]
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
    width = max(len(row) for row in parts)
    lines = [f"{'':<{width}}  " + "  ".join(f"{c.replace('_', ' '):>12}" for c in columns)]
    lines += [f"{row:<{width}}  " + "  ".join(f"{figures.get(c, float('nan')):>12.4g}" for c in columns)
              for row, figures in parts.items()]
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

