"""A command's help says what a flag does, never how fast or how large something measured (house style: a
figure of speed, memory or time goes in docs/benchmarks.md with its command and machine, where it can be
measured again; in --help it goes stale on the next machine). Every flag's help and every command's
description is read for a number followed by a unit of time, size, speed or ratio; a default and the
syntax of a value ("e.g. 512MiB") are settings, not measurements, and are left out, as are the few phrases
in ALLOWED."""

from __future__ import annotations

import argparse
import re

import pytest

from microgpt.cli import build_parser

UNIT = r"\s?(?:ms|us|µs|ns|s|secs?|seconds?|minutes?|hours?|%|[KMGTP]i?B|bytes|tokens?/s|tok/s|steps?/s|G?FLOP/s)"
RATIO = r"[x×]|\s[x×]\s(?:faster|slower|quicker|less|more|as fast)"  # "1.8x", "2 × faster"; not "4 x d_model"
FIGURE = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?(?:" + UNIT + "|" + RATIO + r")(?![\w/])")
DEFAULT = re.compile(r"\(default: (?:[^()]|\([^()]*\))*\)")  # the shown default, which settings state
EXAMPLE = re.compile(r"e\.g\. [^;()]*")  # how a value is written: "e.g. 512MiB, 8GiB"
ALLOWED = {
    "256 bytes",  # --vocab-size: BPE's vocabulary starts from the 256 byte values, a count of tokens
}


def figures(text: str) -> list[str]:
    """The measured-looking figures in a help text, defaults, examples and ALLOWED left out."""
    text = EXAMPLE.sub("", DEFAULT.sub("", text))
    return [m.group(0) for m in FIGURE.finditer(text) if m.group(0) not in ALLOWED]


def help_texts(parser: argparse.ArgumentParser, command: str = "microgpt"):
    """(command, flag, text) for every flag and description of `parser` and its subcommands."""
    if parser.description:
        yield command, "(description)", parser.description
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from help_texts(sub, f"{command} {name}")
        elif action.help and action.help is not argparse.SUPPRESS:
            yield command, "/".join(action.option_strings) or action.dest, action.help


def test_no_flag_help_holds_a_measured_figure():
    texts = list(help_texts(build_parser()[0]))
    assert len({command for command, _, _ in texts}) > 10  # every command's parser was reached
    found = [f"{command} {flag}: {', '.join(figures(text))}" for command, flag, text in texts if figures(text)]
    assert not found, ("help text holding measured figures (move them to docs/benchmarks.md with the command "
                       "and machine, and say the reason here):\n" + "\n".join(found))


@pytest.mark.parametrize(("text", "caught"), [
    ("one thread per slice (1.8x faster on 2 cores)", ["1.8x"]),
    ("about 2.5 × faster than PyTorch", ["2.5 × faster"]),
    ("a pass takes 40 ms at the default shape", ["40 ms"]),
    ("peaks at 1.2 GB", ["1.2 GB"]),
    ("reaches 120,000 tokens/s", ["120,000 tokens/s"]),
    ("17% less time", ["17%"]),
    ("at least 3 s", ["3 s"]),
    ("refuse a step estimated to need more, e.g. 512MiB, 8GiB (default: 3GiB)", []),
    ("(default: 20 x the slowest step so far, at least 60 s)", []),
    ("d_ff is 4 x d_model", []),
    ("the BPE vocabulary: 256 bytes and the merges learnt on top of them", []),
])
def test_the_figures_found_are_measurements_not_defaults_or_syntax(text, caught):
    assert figures(text) == caught
