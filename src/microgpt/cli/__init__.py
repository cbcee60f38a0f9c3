"""The `microgpt` command line: `train`, `sample`, `eval`, `plot` and `studio`.

Each subcommand lives in its own module here and registers its flags through
`add_parser`. User errors (bad flags, bad files, bad checkpoints, a missing
backend) print one clear line and exit non-zero, with no traceback.
"""

from __future__ import annotations

import argparse
import errno
import sys

from microgpt import __version__
from microgpt.backends import BackendUnavailable
from microgpt.checkpoint import CheckpointError
from microgpt.cli.output import OutputLost, guard_output
from microgpt.errors import ConfigError, DataError, TrainingStopped
from microgpt.sample import UnsoundOutputs

USER_ERRORS = (ConfigError, DataError, CheckpointError, BackendUnavailable, TrainingStopped, UnsoundOutputs)
EXIT_USER_ERROR = 2


def build_parser() -> argparse.ArgumentParser:
    from microgpt.cli import eval, plot, sample, studio, train

    parser = argparse.ArgumentParser(
        prog="microgpt", description="Train and study small GPT language models from scratch."
    )
    parser.add_argument("--version", action="version", version=f"microgpt {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in (train, sample, eval, plot, studio):
        module.add_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else list(argv)  # as given, for `train --procs` to run again
    try:
        with guard_output(stdout_required=args.command != "train"):
            return args.run(args)
    except OutputLost as exc:
        if exc.errno == errno.EPIPE:
            return 0  # the reader has all it wanted (`microgpt sample ... | head`)
        print(f"microgpt {args.command}: error: cannot write the output ({exc})", file=sys.stderr)
        return EXIT_USER_ERROR
    except USER_ERRORS as exc:
        print(f"microgpt {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USER_ERROR
    except MemoryError:
        print(f"microgpt {args.command}: error: out of memory; use a smaller model, --batch-size or --seq-len",
              file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print(f"microgpt {args.command}: interrupted", file=sys.stderr)
        return 130
