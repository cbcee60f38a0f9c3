"""Flag types shared by the subcommands: typed parsers that give argparse a clear message."""

from __future__ import annotations

import argparse
import math


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
non_negative_int = _number_parser(int, "whole number", 0, strict=False)
positive_float = _number_parser(float, "number", 0, strict=True)
non_negative_float = _number_parser(float, "number", 0, strict=False)


def add_backend_flag(parser: argparse.ArgumentParser) -> None:
    from microgpt.backends import CHOICES

    parser.add_argument("--backend", choices=CHOICES, default="auto",
                        help="compute backend; auto picks cuda when a GPU is usable, else numpy (default: auto)")
