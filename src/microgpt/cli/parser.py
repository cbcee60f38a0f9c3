"""The command line's parser: every mistake is one line, naming the command, with the nearest flag or choice.

argparse prints a usage block before its error, matches any unambiguous prefix of a flag (`--d-mod 32` is
`--d-model 32`, in silence), and reports a misspelt flag from the top-level parser without naming the
subcommand. `Parser` prints one line instead ("microgpt train: error: unrecognized argument --d-modle; did
you mean --d-model? (microgpt train --help lists the flags)"), takes no prefixes, and `parse` lets a
subcommand's positionals stand anywhere among its flags (`microgpt eval MODEL --json FILE`).
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from typing import NoReturn

EXIT_USER_ERROR = 2


class Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        hint = self.nearest(message)
        print(f"{self.prog}: error: {message}{hint} ({self.prog} --help lists the flags)", file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)

    def nearest(self, message: str) -> str:
        """"; did you mean --d-model?" for a misspelt flag or the start of one (--temp: --temperature, not the
        closer-spelt --help), or a choice close to the one given; else ""."""
        unknown = re.match(r"unrecognized arguments: (\S+)", message)
        if unknown and unknown.group(1).startswith("-"):
            given, flags = unknown.group(1).split("=")[0], list(self._option_string_actions)
            started = [flag for flag in flags if flag.startswith(given)]
            found = difflib.get_close_matches(given, started or flags, 1, cutoff=0 if started else 0.6)
            return f"; did you mean {found[0]}?" if found else ""
        choice = re.match(r"argument (\S+): invalid choice: '([^']*)'", message)
        named = choice.group(1) if choice else None
        action = next((a for a in self._actions if named in (*a.option_strings, a.metavar, a.dest)), None)
        if action is not None and action.choices:
            found = close_choice(choice.group(2), [str(c) for c in action.choices])
            return f"; did you mean {found}?" if found else ""
        return ""


def close_choice(given: str, choices: list[str]) -> str | None:
    """The choice nearest to `given` (case aside), or None when none is near."""
    lowered = {choice.lower(): choice for choice in choices}
    found = difflib.get_close_matches(given.lower(), list(lowered), 1)
    return lowered[found[0]] if found else None


def parse(parser: argparse.ArgumentParser, commands, argv: list[str]) -> argparse.Namespace:
    """The arguments of `argv`: a misplaced positional of a subcommand (after its flags) is taken as it
    stands, and an unknown flag is the subcommand's one-line error."""
    args, extras = parser.parse_known_args(argv)
    if not extras:
        return args
    where = argv.index(args.command)
    if where > 0:  # before the command stands only what microgpt itself takes (--version, --help)
        parser.error(f"unrecognized arguments: {' '.join(argv[:where])}, before the command; a command's flags "
                     f"go after it: microgpt {args.command} {' '.join(argv[:where])} ...")
    sub = commands.choices[args.command]
    after = argv[where + 1:]
    if sub._subparsers is not None:  # a command of actions (`graph check`), which argparse cannot intermix
        return sub.parse_args(after, namespace=argparse.Namespace(command=args.command))
    return sub.parse_intermixed_args(after, namespace=argparse.Namespace(command=args.command))
