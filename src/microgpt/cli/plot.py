"""`microgpt plot RUN...`: several runs' loss curves in one PNG, against step or seconds.

A RUN is a checkpoint directory (its `<checkpoint>.metrics.jsonl` is beside it)
or a metrics log. Each run is drawn as its validation curve, or its smoothed
training loss where it has no validation points.
"""

from __future__ import annotations

from pathlib import Path

from microgpt.config import ConfigError
from microgpt.plot import PLOT_HINT, metrics_path, plot_available, write_runs_plot


def add_parser(commands) -> None:
    p = commands.add_parser("plot", help="draw several runs' loss curves in one PNG",
                            description=__doc__.split("\n\n")[0].split(":", 1)[1].strip())
    p.add_argument("runs", nargs="+", metavar="RUN", type=Path,
                   help="checkpoint directories (or their .metrics.jsonl logs)")
    p.add_argument("--x", choices=("step", "time"), default="step", help="the horizontal axis (default: step)")
    p.add_argument("--out", type=Path, default=Path("runs.png"), help="the PNG to write (default: runs.png)")
    p.add_argument("--title", default="loss", help="the plot's title (default: loss)")
    p.set_defaults(run=run)


def run(args) -> int:
    if not plot_available():
        raise ConfigError(PLOT_HINT.removeprefix("note: ").replace("no loss plot; ", "plotting needs matplotlib: "))
    logs = {}
    for run_dir in args.runs:
        log = metrics_path(run_dir)
        if not log.is_file():
            raise ConfigError(f"{run_dir} has no metrics log ({log} is missing); give a checkpoint a run wrote "
                              "without --no-save, or its .metrics.jsonl")
        logs[str(run_dir).rstrip("/")] = log
    if args.out.suffix.lower() != ".png":
        raise ConfigError(f"--out {args.out}: the plot is a PNG, so give a path ending in .png")
    try:
        drawn = write_runs_plot(logs, args.out, args.title, args.x)
    except OSError as exc:
        raise ConfigError(f"cannot write {args.out} ({exc.strerror or exc}); give a writable --out") from None
    if drawn is None:
        raise ConfigError(f"none of {', '.join(logs)} has logged a step yet; nothing to draw")
    print(f"plot: {args.out}")
    return 0
