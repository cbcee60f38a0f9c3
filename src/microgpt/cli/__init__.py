"""The `microgpt` command line: `prepare`, `train`, `sample`, `eval`, `inspect`, `plot`, `runs`, `graph` and
`studio`, a module each.

A face: it parses flags, prints, and maps the errors a user can cause to one line and exit status 2, with no
traceback. It may import every package (the studio only to serve it); nothing imports it but
`python -m microgpt` and the `microgpt` script.
"""

from __future__ import annotations

import argparse
import errno
import sys

from microgpt.backends import BackendUnavailable
from microgpt.cli.output import OutputLost, guard_output
from microgpt.cli.parser import EXIT_USER_ERROR, Parser, parse
from microgpt.core.errors import ConfigError, DataError, TrainingStopped, UnsoundOutputs, UserError, as_flag
from microgpt.core.version import __version__
from microgpt.model.checkpoint import CheckpointError

USER_ERRORS = (ConfigError, DataError, CheckpointError, BackendUnavailable, TrainingStopped, UnsoundOutputs)


def build_parser() -> tuple[argparse.ArgumentParser, object]:
    from microgpt.cli import eval, export, graph, inspect, plot, prepare, runs, sample, studio, train

    parser = Parser(prog="microgpt", description="Train and study small GPT language models from scratch.")
    parser.add_argument("--version", action="version", version=f"microgpt {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=Parser)
    for module in (prepare, train, sample, eval, inspect, plot, runs, graph, export, studio):
        module.add_parser(commands)
    return parser, commands


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse(*build_parser(), argv)
    args.argv = argv  # as given, for `train --procs` to run again
    try:
        with guard_output(stdout_required=args.command != "train"):
            return args.run(args)
    except OutputLost as exc:
        if exc.errno == errno.EPIPE:
            return 0  # the reader has all it wanted (`microgpt sample ... | head`)
        print(f"microgpt {args.command}: error: cannot write the output ({exc})", file=sys.stderr)
        return EXIT_USER_ERROR
    except USER_ERRORS as exc:
        said = exc.worded(as_flag) if isinstance(exc, UserError) else exc  # flags, whatever words it was raised in
        print(f"microgpt {args.command}: error: {said}", file=sys.stderr)
        return EXIT_USER_ERROR
    except MemoryError:
        print(f"microgpt {args.command}: error: out of memory; use a smaller model, --batch-size or --seq-len",
              file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print(f"microgpt {args.command}: interrupted", file=sys.stderr)
        return 130
