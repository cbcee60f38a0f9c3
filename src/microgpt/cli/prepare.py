"""`microgpt prepare INPUT... --out DIR`: a corpus, read once, into a dataset directory of token shards that
`microgpt train DIR` trains from in constant memory (docs/data.md).

INPUTs are files or directories (walked recursively): text, JSON Lines (.jsonl) or Parquet (.parquet), each
also compressed (.gz, .xz, .zst). Nothing is left half-written: the dataset is written beside DIR and renamed
into place when complete, and an error, a full disk, Ctrl-C or SIGTERM leave no DIR that looks complete. A DIR
inside a checkpoint is refused, as `export` refuses a file there: a checkpoint holds only what training writes.
"""

from __future__ import annotations

import shlex
import signal
import sys
from pathlib import Path

from microgpt.cli.common import add_flags_with_defaults
from microgpt.core.errors import ConfigError
from microgpt.core.fields import settings_fields
from microgpt.data.prepare import PrepareSettings, Stopped, describe, prepare
from microgpt.export.files import checkpoint_around


def add_parser(commands) -> None:
    p = commands.add_parser("prepare", help="tokenize a corpus once into a dataset directory of shards",
                            description=__doc__.split(":", 1)[1].strip())
    p.add_argument("inputs", nargs="+", metavar="INPUT",
                   help="files or directories to read: .txt (or any other name: text), .jsonl or .parquet, each "
                   "also as .gz, .xz or .zst; a text file is one document, a record is one")
    p.add_argument("--out", required=True, metavar="DIR", help="the dataset directory to write")
    p.add_argument("--overwrite", action="store_true",
                   help="replace DIR if it holds a dataset (only once the new one is complete)")
    p.add_argument("--quiet", action="store_true", help="no progress output, only the summary")
    add_flags_with_defaults(p, settings_fields(PrepareSettings))
    p.set_defaults(run=run)


def run(args) -> int:
    checkpoint = checkpoint_around(Path(args.out))
    if checkpoint is not None:
        raise ConfigError(f"--out {args.out} is inside the checkpoint {checkpoint}, which holds only what microgpt "
                          "writes there; prepare the dataset elsewhere")
    chosen = PrepareSettings(**{f.field: getattr(args, f.key) for f in settings_fields(PrepareSettings)})
    command = shlex.join(["microgpt", *getattr(args, "argv", ["prepare", *args.inputs, "--out", args.out])])
    try:
        summary = prepare(args.inputs, args.out, chosen, overwrite=args.overwrite, quiet=args.quiet,
                          command=command)
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (Stopped)
        what = f"stopped by {exc}" if isinstance(exc, Stopped) else "interrupted"
        done = "is complete (the stop came as it was finished)" if getattr(exc, "complete", False) else \
            "was not written"
        print(f"microgpt prepare: {what}; {args.out} {done}", file=sys.stderr)
        return 128 + (exc.signum if isinstance(exc, Stopped) else signal.SIGINT)
    print("\n".join(describe(summary)))
    return 0
