"""`microgpt train [FILE]`: train a model on a text file (or on Python's bundled docs), resume one, train a
named run from a YAML file, or compare model specs on the same data.

The setting flags are made from the settings' declarations (settings/, and each
family's in model/); the run is resolved and built in training/ and what it
prints is train_report.py's. This module parses the command line.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings

from microgpt.cli.train_flags import add_train_flags
from microgpt.cli.train_report import (
    describe_auto,
    describe_backend,
    describe_validation,
    draw_together,
    hint_at_plots,
    plot_config_runs,
    print_parallel_layout,
    print_summary,
    print_table,
    report_plot,
)
from microgpt.core import machine
from microgpt.core.errors import ConfigError, DataError, DistributedError
from microgpt.core.progress import Progress
from microgpt.parallel.communicator import communicator
from microgpt.parallel.launch import relaunch, watch_launcher
from microgpt.settings.named_runs import load_run
from microgpt.settings.sources import Settings, check_named_runs, known_settings
from microgpt.training.compare import plan_compare
from microgpt.training.plan import plan, plan_run, start
from microgpt.training.plot import plot_available
from microgpt.training.resolve import RESUME_AUTO
from microgpt.training.run import Run
from microgpt.training.run_files import COMPARE_PLOT
from microgpt.training.trainer import RunSummary


def add_parser(commands) -> None:
    p = commands.add_parser("train", help="train a model", description=__doc__.split("\n\n")[0].split(":", 1)[1].strip())
    add_train_flags(p)
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
        backend, note = start(settings, comm)  # said once the run is prepared: a mistake comes first, alone
        if args.compare is not None:
            if args.resume or args.init_from:
                raise ConfigError(f"--compare trains new models and cannot {'--resume' if args.resume else '--init-from'}"
                                  "; give it one spec's checkpoint on its own")
            if comm.size > 1:
                raise DistributedError("--compare trains its specs in one process; run it without mpiexec or --procs")
            if args.dry_run:
                raise ConfigError("--dry-run plans one run, and --compare several; drop one of them")
        elif args.dry_run:
            planned = plan(settings, backend, args.resume, save=not args.no_save, comm=comm, init_from=args.init_from,
                           overwrite=args.overwrite)
        else:
            run = plan_run(settings, backend, args.resume, save=not args.no_save, init_from=args.init_from,
                          overwrite=args.overwrite)
    if args.compare is not None:
        return run_compare(args, settings, backend, note)
    if args.dry_run:
        print("\n".join(["dry run: nothing trained or written", *([note] if note else []), *planned.describe()]))
        return 0
    if note and not args.quiet:
        print(note)
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
        try:
            run.sample(gen, on_text=lambda ch: print(ch, end="", flush=True))
        except DataError as exc:  # the run is saved and its status is the training's: a sample that cannot start
            print(f"note: no sample: {exc}", file=sys.stderr)
        print()
    return exit_status(summary)


def run_compare(args, settings: Settings, backend, note: str | None) -> int:
    """Train each --compare spec in turn on the same data, batches, seed and steps; print a table."""
    comparison = plan_compare(settings, args.compare, backend, save=not args.no_save, overwrite=args.overwrite)
    if not args.quiet:
        if note:
            print(note)
        print(f"corpus: {comparison.corpus.description}; tokenizer {comparison.tokenizer.describe()}; "
              f"{describe_backend(backend)}")
    for replacing in comparison.notes:
        print(f"note: {replacing}")
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


def exit_status(summary: RunSummary) -> int:
    """0 for a finished run; 128 + the signal for one a signal stopped (130 for Ctrl-C, 143 for SIGTERM)."""
    return 128 + summary.stop_signal if summary.interrupted else 0
