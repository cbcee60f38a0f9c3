"""`microgpt plot RUN...`: several runs' loss curves in one plot, against step or seconds.

A RUN is a checkpoint directory (its `<checkpoint>.metrics.jsonl` is beside it)
or a metrics log; a run still training may be given, and `--follow` redraws
the plot whenever a log grows, until Ctrl-C. Each run is drawn as its
validation curve, or its smoothed training loss where it has no validation
points. `--detail` draws one run alone: its raw and smoothed training loss, its
validation points, and the model's own per-part figures where its family logs
them (an ensemble's experts: write norms, stream cosines, router weights). `--routing TEXT` draws
an ensemble checkpoint's routing of TEXT instead (training/routing_plot.py). The plot is a PNG, SVG or PDF,
by the suffix of `--out`.
"""

from __future__ import annotations

import time
from pathlib import Path

from microgpt.cli.common import add_flags_with_defaults
from microgpt.core.errors import ConfigError
from microgpt.core.fields import settings_fields
from microgpt.settings.commands import PlotSettings
from microgpt.training.plot import (
    PLOT_FORMATS,
    PLOT_HINT,
    plot_available,
    short_labels,
    write_loss_plot,
    write_runs_plot,
)
from microgpt.training.routing_plot import MAX_ROUTED_TOKENS, write_routing_plot
from microgpt.training.run_files import metrics_log
from microgpt.use.loaded import load


def add_parser(commands) -> None:
    p = commands.add_parser("plot", help="draw several runs' loss curves in one plot (PNG, SVG or PDF)",
                            description=__doc__.split("\n\n")[0].split(":", 1)[1].strip())
    p.add_argument("runs", nargs="+", metavar="RUN", type=Path,
                   help="checkpoint directories (or their .metrics.jsonl logs), finished or still training")
    add_flags_with_defaults(p, settings_fields(PlotSettings))
    p.set_defaults(run=run)


def run(args) -> int:
    args.out = Path(args.out)
    if not plot_available():
        raise ConfigError(PLOT_HINT.removeprefix("note: ").replace("no loss plot; ", "plotting needs matplotlib: "))
    if args.out.suffix.lower() not in PLOT_FORMATS:
        raise ConfigError(f"--out {args.out}: give a path ending in {', '.join(PLOT_FORMATS)} (the plot's format)")
    if args.detail and len(args.runs) > 1:
        raise ConfigError(f"--detail draws one run, and {len(args.runs)} were given; give one RUN, or drop --detail "
                          "to draw them together")
    if args.routing is not None:
        return routing(args)
    logs = [metrics_log(run_dir) for run_dir in args.runs]
    for run_dir, log in zip(args.runs, logs):
        if not log.is_file() and not args.follow:
            raise ConfigError(f"{run_dir} has no metrics log ({log} is missing); give a checkpoint a run wrote "
                              "without --no-save, or its .metrics.jsonl")
    runs = dict(zip(short_labels(args.runs), logs))
    if not args.follow:
        if draw(runs, args) is None:
            raise ConfigError(f"none of {', '.join(map(str, args.runs))} has logged a step yet; nothing to draw")
        print(f"plot: {args.out}")
        return 0
    print(f"plot: {args.out}, redrawn as {'the logs grow' if len(logs) > 1 else 'the log grows'} (Ctrl-C to stop)",
          flush=True)
    for log in logs:
        if not log.is_file():
            print(f"plot: waiting for {log} (a run that has not logged a step yet)", flush=True)
    seen = None
    try:
        while True:
            sizes = [log.stat().st_size if log.is_file() else None for log in logs]
            if sizes != seen and draw(runs, args) is not None:
                seen = sizes
            time.sleep(args.interval)
    except KeyboardInterrupt:
        return 0


def draw(runs: dict[str, Path], args) -> Path | None:
    """The plot of the runs that have logged a step (None when none has), or one clear line when it cannot be
    written."""
    present = {label: log for label, log in runs.items() if log.is_file()}
    try:
        if not present:
            return None
        if args.detail:
            return write_loss_plot(next(iter(present.values())), args.out, args.title)
        return write_runs_plot(present, args.out, args.title, args.x)
    except OSError as exc:
        raise ConfigError(f"cannot write {args.out} ({exc.strerror or exc}); give a writable --out") from None


def routing(args) -> int:
    """--routing TEXT: one ensemble checkpoint's routing of TEXT as a heatmap."""
    if len(args.runs) > 1 or args.detail or args.follow:
        extra = "several RUNs" if len(args.runs) > 1 else "--detail" if args.detail else "--follow"
        raise ConfigError(f"--routing draws one checkpoint's routing of a text, and {extra} asks for loss curves; "
                          "give one RUN and drop the rest")
    loaded = load(args.runs[0])
    found = loaded.routing(args.routing)
    if len(found.tokens) > MAX_ROUTED_TOKENS:
        raise ConfigError(f"--routing TEXT is {len(found.tokens):,} tokens, and a heatmap of more than "
                          f"{MAX_ROUTED_TOKENS} is too narrow to read; give a shorter text (`microgpt eval RUN FILE "
                          "--routing OUT.csv` writes any length)")
    title = args.title if args.title != "loss" else f"routing of {args.runs[0]}"
    try:
        write_routing_plot(found, args.out, title)
    except OSError as exc:
        raise ConfigError(f"cannot write {args.out} ({exc.strerror or exc}); give a writable --out") from None
    print(f"plot: {args.out}")
    return 0
