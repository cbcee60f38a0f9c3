"""`microgpt runs [DIR...]`: every run under the given folders (default: checkpoints/ and .), a line each.

The rows are training/run_list.py's: name, family, shape, tokenizer, parameters, step of its steps, best and
last validation loss in bits per character (what compares across char, bpe and tokenizer.json runs) and the
last in nats per token, tokens/s, the machine it ran on, and its status (training now, finished, unfinished,
damaged). `--sort KEY` orders them (`val` and `best` by bits per character), `--where KEY=VALUE` keeps some,
and `--json` prints each row as one JSON object instead.
"""

from __future__ import annotations

import json
from pathlib import Path

from microgpt.core.errors import ConfigError
from microgpt.training.run_files import DEFAULT_ROOT
from microgpt.training.run_list import SCAN_DEPTH, find_checkpoints, is_listed, run_rows

SORT_KEYS = {  # --sort KEY: the row's field, and whether the lowest comes first
    "name": ("path", True), "family": ("family", True), "parameters": ("parameters", False),
    "step": ("step", False), "val": ("val_bpc", True), "best": ("best_val_bpc", True),
    "tokens": ("tokens_per_sec", False), "status": ("status", True),
}
# a loss sorted in bits per character; a run without its characters (trained before runs recorded them) after
# those with them, by nats per token
IN_NATS = {"val_bpc": "val_loss", "best_val_bpc": "best_val_loss"}
COLUMNS = ("run", "family", "shape", "tokenizer", "parameters", "step", "best bpc", "val bpc", "val nats",
           "tokens/s", "status", "machine")


def add_parser(commands) -> None:
    p = commands.add_parser("runs", help="list the runs under some folders", description=__doc__.split("\n\n")[0]
                            .split(":", 1)[1].strip())
    p.add_argument("folders", nargs="*", metavar="DIR", type=Path,
                   help=f"folders to search, {SCAN_DEPTH} levels down, or checkpoints; without any, {DEFAULT_ROOT}/ and .")
    p.add_argument("--sort", choices=tuple(SORT_KEYS), metavar="KEY",
                   help=f"order the runs by {', '.join(SORT_KEYS)} (losses lowest first, in held-out bits per "
                   "character, which compares across tokenizers; the others highest first; runs without the "
                   "figure last)")
    p.add_argument("--where", action="append", default=[], metavar="KEY=VALUE",
                   help="keep the runs whose KEY is VALUE (family, status, path, name, ...); given again, all must "
                   "hold, e.g. --where family=ensemble --where status=finished")
    p.add_argument("--json", action="store_true", help="one JSON object per run instead of the table")
    p.set_defaults(run=run)


def run(args) -> int:
    folders = args.folders or [DEFAULT_ROOT, Path(".")]
    for folder in args.folders:
        if not folder.is_dir():
            raise ConfigError(f"{folder} is not a folder; give folders that hold checkpoints")
    found: dict[Path, Path] = {}
    for folder in folders:
        for path in ([folder] if is_listed(folder, lambda path: False) else find_checkpoints(folder)):
            found.setdefault(path.resolve(), path)
    rows = chosen(run_rows(sorted(found.values()), name=lambda path: str(path)), args.where, args.sort)
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return 0
    if not rows:
        print(f"no runs under {' or '.join(map(str, folders))}")
        return 0
    print_table([cells(row) for row in rows])
    return 0


def chosen(rows: list[dict], where: list[str], sort: str | None) -> list[dict]:
    """The rows that every KEY=VALUE of `where` keeps, in the order of `sort`."""
    for condition in where:
        key, equals, value = condition.partition("=")
        if not equals or not key:
            raise ConfigError(f"--where takes KEY=VALUE (for example family=ensemble), not {condition!r}")
        rows = [row for row in rows if str(row.get(key)) == value]
    if sort is not None:
        field, lowest_first = SORT_KEYS[sort]
        ordered = []
        for key in (field, *([IN_NATS[field]] if field in IN_NATS else [])):
            known = sorted((row for row in rows if row.get(key) is not None), key=lambda row: row[key],
                           reverse=not lowest_first)
            ordered += known
            rows = [row for row in rows if row.get(key) is None]
        rows = ordered + rows
    return rows


def cells(row: dict) -> tuple[str, ...]:
    """A row's cells, in COLUMNS order ("-" where a figure is not known)."""
    def figure(value, form: str) -> str:
        return "-" if value is None else format(value, form)

    # "gpt d4x24n4: ..." -> "d4x24n4", "graph of 34 primitives (8 kinds), 1 loss: ..." -> "34 primitives ..."
    shape = (row.get("model") or "").split(":")[0].removeprefix(f"{row.get('family')} ").removeprefix("of ")
    shape = shape.strip() or "-"
    step = "-" if row.get("step") is None else f"{row['step']}/{row['steps'] if row.get('steps') else '?'}"
    return (row["path"], row.get("family") or "-", shape, row.get("tokenizer") or "-",
            figure(row.get("parameters"), ","), step, figure(row.get("best_val_bpc"), ".4f"),
            figure(row.get("val_bpc"), ".4f"), figure(row.get("val_loss"), ".4f"),
            figure(row.get("tokens_per_sec"), ",.0f"), row["status"], row.get("machine") or "-")


def print_table(lines: list[tuple[str, ...]]) -> None:
    widths = [max(len(COLUMNS[i]), *(len(line[i]) for line in lines)) for i in range(len(COLUMNS))]
    right = {"parameters", "step", "best bpc", "val bpc", "val nats", "tokens/s"}
    for line in [COLUMNS, *lines]:
        print("  ".join(cell.rjust(width) if column in right else cell.ljust(width)
                        for cell, width, column in zip(line, widths, COLUMNS)).rstrip())
