"""Flags shared by the subcommands: the setting flags made from the settings' declarations (settings/training.py,
settings/use.py and each family's), and a typed number parser that gives argparse a clear message."""

from __future__ import annotations

import argparse
import math

from microgpt.cli.parser import close_choice
from microgpt.core.checks import Choice, ChoiceOrFile, Switch, shown
from microgpt.core.fields import SettingField
from microgpt.settings.sources import known_settings


def _number_parser(convert, kind: str, minimum: float, strict: bool):
    """An argparse type: `convert(text)`, finite, and above (strict) or at least `minimum`."""
    bound = f"more than {minimum}" if strict else f"at least {minimum}"

    def parse(text: str):
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {kind}") from None
        if not math.isfinite(value) or (value <= minimum if strict else value < minimum):
            raise argparse.ArgumentTypeError(f"must be a finite {kind} {bound}, got {text}")
        return value

    return parse


positive_int = _number_parser(int, "whole number", 0, strict=True)


def flag_type(field: SettingField):
    """argparse's type for a setting: its check reading the text, with the check's words on failure."""

    def parse(text: str):
        try:
            return field.check.from_text(text)
        except ValueError as exc:
            near = close_choice(text, list(field.check.options)) if isinstance(field.check, Choice) else None
            hint = f"; did you mean {near}?" if near else ""
            raise argparse.ArgumentTypeError(f"must be {exc}, got {shown(text)}{hint}") from None

    parse.__name__ = field.key  # argparse names the type in some messages
    return parse


def help_text(text: str) -> str:
    """Help text as argparse wants it: a literal % doubled, since argparse fills in %(default)s and the like."""
    return text.replace("%", "%%")


def add_setting_flags(parser, fields: list[SettingField], owner: str | None = None) -> None:
    """One flag per setting. Every flag defaults to None, so that a value given can be told from the default
    (a named run or a checkpoint may supply it); the help shows the declared default, after `owner` ("the
    lookahead family's") for settings of some families only."""
    for field in fields:
        whose = f"{owner}; " if owner else ""
        help_line = help_text(f"{field.help} ({whose}default: {field.default_text})")
        if isinstance(field.check, Switch):
            parser.add_argument(field.flag, action=argparse.BooleanOptionalAction, default=None, help=help_line)
        else:
            parser.add_argument(field.flag, type=flag_type(field), metavar=field.flag_metavar, help=help_line)


def add_flags_with_defaults(parser: argparse.ArgumentParser, fields: list[SettingField]) -> None:
    """One flag per setting with its declared default, for the commands that use a trained model (no named
    run or checkpoint supplies these there)."""
    for field in fields:
        help_line = help_text(f"{field.help} (default: {field.default_text})")
        if isinstance(field.check, Switch):
            parser.add_argument(field.flag, action=argparse.BooleanOptionalAction, default=field.default,
                                help=help_line)
        elif isinstance(field.check, Choice) and not isinstance(field.check, ChoiceOrFile):  # a path is no choice
            parser.add_argument(field.flag, choices=field.check.options, default=field.default, help=help_line)
        else:
            parser.add_argument(field.flag, type=flag_type(field), metavar=field.flag_metavar,
                                default=field.default, help=help_line)


def train_settings(*keys: str) -> list[SettingField]:
    """Some of train's settings, which the other commands share (the backend, threads, memory caps)."""
    return [known_settings()[key] for key in keys]
