"""The kinds of value a setting can take, each read and checked one way everywhere.

A `Check` turns a flag's text (`from_text`, for argparse) or a YAML value
(`from_yaml`) into a clean value, and `validate`s a value however it arrived
(a flag, a named run, a checkpoint, Python code). Each raises ValueError with
words that finish the sentence "<setting> must be ...". `parse_size` and
`format_bytes` read and write memory sizes ("512MiB"), for the checks and for
every message that states a size.
"""

from __future__ import annotations

import math
import re

from microgpt.core.errors import ConfigError

UNITS = {"": 1, "b": 1, "kb": 1000, "mb": 1000**2, "gb": 1000**3, "tb": 1000**4,
         "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4}
_SIZE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)")


def parse_size(text: str | int) -> int:
    """Bytes from "3GiB", "512MiB", "1.5GB", "4096" (plain bytes); KiB/MiB/GiB are powers of 1024, KB/MB/GB of 1000."""
    if isinstance(text, int) and not isinstance(text, bool):
        value, unit = float(text), ""
    else:
        match = _SIZE.fullmatch(str(text).strip().lower())
        if match is None or match.group(2) not in UNITS:
            raise ConfigError(f"memory size {text!r} is not a size; write bytes (4096) or e.g. 512MiB, 3GiB, 2GB")
        value, unit = float(match.group(1)), match.group(2)
    size = int(value * UNITS[unit])
    if size < 1:
        raise ConfigError(f"memory size {text!r} must be at least 1 byte")
    return size


def format_bytes(size: int) -> str:
    """A readable size: "3.0 GiB", "512.0 MiB", "800 B"."""
    for unit, factor in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size >= factor:
            return f"{size / factor:.1f} {unit}"
    return f"{size} B"


SHOWN_CHARS = 40  # a value quoted in a message is cut to this many characters


def shown(value) -> str:
    """repr(value) for a one-line message, cut to SHOWN_CHARS (a runaway value stays a short line)."""
    text = repr(value)
    return text if len(text) <= SHOWN_CHARS else f"{text[:SHOWN_CHARS]}... ({len(text):,} characters)"


class Check:
    """A kind of value. Subclasses set `kind` (what the value must be) and override what differs."""

    kind = "a value"

    def from_text(self, text: str):
        """The value of a flag's text."""
        return self.validate(text)

    def from_yaml(self, value):
        """The value of a YAML scalar or list."""
        return self.validate(value)

    def validate(self, value):
        """The value itself when it is allowed; ValueError(self.kind) otherwise."""
        raise NotImplementedError

    def show(self, value) -> str:
        """The value as help and docs print it."""
        return str(value)


class Whole(Check):
    """An int (not a bool), at least `minimum` and at most `maximum` where they are given."""

    def __init__(self, minimum: int | None, maximum: int | None = None):
        self.minimum, self.maximum = minimum, maximum
        if maximum is not None:
            self.kind = f"a whole number from {minimum} to {maximum}"
        else:
            self.kind = "a whole number" + ("" if minimum is None else f" of at least {minimum}")

    def from_text(self, text: str):
        try:
            value = int(text)
        except ValueError:
            raise ValueError(self.kind) from None
        return self.validate(value)

    def validate(self, value):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(self.kind)  # noqa: TRY004 - one error kind for every bad value
        if (self.minimum is not None and value < self.minimum) or (self.maximum is not None and value > self.maximum):
            raise ValueError(self.kind)
        return value


def whole(minimum: int | None, maximum: int | None = None) -> Whole:
    return Whole(minimum, maximum)


class PositiveNumber(Check):
    """A finite float above 0 (YAML's 3e-4, without a dot, arrives as a string and is read as a number)."""

    kind = "a positive number"

    def from_text(self, text: str):
        try:
            value = float(text)
        except ValueError:
            raise ValueError("a number") from None
        return self.validate(value)

    def from_yaml(self, value):
        return self.from_text(value) if isinstance(value, str) else self.validate(value)

    def validate(self, value):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
            raise ValueError(self.kind)
        return float(value)

    def show(self, value) -> str:
        """3e-4 rather than 0.0003; 30 rather than 30.0."""
        mantissa, exponent = f"{value:e}".split("e")
        return f"{float(mantissa):g}e{int(exponent)}" if abs(int(exponent)) >= 3 else f"{value:g}"


class Number(PositiveNumber):
    """Any finite float; where its range depends on other settings it is checked beside them (settings/training.py)."""

    kind = "a number"

    def validate(self, value):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(self.kind)
        return float(value)


class NonNegativeNumber(Number):
    """A finite float of at least 0."""

    kind = "a number of at least 0"

    def validate(self, value):
        value = super().validate(value)
        if value < 0:
            raise ValueError(self.kind)
        return value


class Probability(Number):
    """A finite float in (0, 1]."""

    kind = "a number above 0 and at most 1"

    def validate(self, value):
        value = super().validate(value)
        if not 0 < value <= 1:
            raise ValueError(self.kind)
        return value


class NumberOrOff(Number):
    """A finite float, or "off" (None in Python and YAML) for a feature that a default turns on."""

    kind = "a number or off"

    def from_text(self, text: str):
        return None if text.strip().lower() in ("off", "none") else super().from_text(text)

    def from_yaml(self, value):
        return None if value is None else self.from_text(str(value))

    def validate(self, value):
        return None if value is None else super().validate(value)

    def show(self, value) -> str:
        return "off" if value is None else super().show(value)


class Switch(Check):
    """On or off: a flag without a value, or true/false in YAML."""

    kind = "true or false"

    def validate(self, value):
        if not isinstance(value, bool):
            raise ValueError(self.kind)  # noqa: TRY004 - one error kind for every bad value
        return value

    def show(self, value) -> str:
        return "on" if value else "off"


class Choice(Check):
    """One of a fixed set of names; the set is read when first needed (the backend registry)."""

    def __init__(self, options):
        self._options = options

    @property
    def options(self) -> tuple[str, ...]:
        return tuple(self._options())

    @property
    def kind(self) -> str:
        return f"one of {', '.join(self.options)}"

    def validate(self, value):
        if value not in self.options:
            raise ValueError(self.kind)
        return value


class ChoiceOrFile(Choice):
    """One of a fixed set of names, or the path of a file (text that `is_file` holds for), kept as text: the
    file is read where it is used (--tokenizer char, bpe or PATH/tokenizer.json)."""

    def __init__(self, options, is_file, file: str):
        super().__init__(options)
        self._is_file, self._file = is_file, file

    @property
    def kind(self) -> str:
        return f"one of {', '.join(self.options)}, or the path of {self._file}"

    def validate(self, value):
        if value in self.options or self._is_file(value):
            return value
        raise ValueError(self.kind)


class Size(Check):
    """A number of bytes, from "3GiB", "512MiB", "1.5GB" or a plain number."""

    kind = "a memory size such as 3GiB, 512MiB or a number of bytes"

    def validate(self, value):
        if isinstance(value, bool):
            raise ValueError(self.kind)  # noqa: TRY004 - one error kind for every bad value
        try:
            return parse_size(value)
        except ConfigError:
            raise ValueError(self.kind) from None

    def show(self, value) -> str:
        return format_bytes(value).replace(".0 ", "").replace(" ", "")


class Path(Check):
    """A non-empty path, kept as text."""

    kind = "a path"

    def validate(self, value):
        if not isinstance(value, str) or not value:
            raise ValueError(self.kind)
        return value


class Text(Check):
    """Any text, the empty one too (a prompt)."""

    kind = "text"

    def validate(self, value):
        if not isinstance(value, str):
            raise ValueError(self.kind)  # noqa: TRY004 - one error kind for every bad value
        return value

    def show(self, value) -> str:
        return repr(value)


class SpecList(Check):
    """Comma-separated model specs as text (model/specs.py reads them)."""

    kind = "a comma-separated list of model specs such as d64n3,d64n3"

    def validate(self, value):
        if not isinstance(value, str) or not value.strip():
            raise ValueError(self.kind)
        return value


class Heads(Check):
    """A head layout as --heads text: a count, widths ("8,8,16,32" or a YAML list) or a named set.

    Text is kept as given and GPT's `parse_heads` resolves it against d_model; a YAML list is the widths, as
    a tuple. As a GPTConfig value it is a tuple of widths.
    """

    kind = "a head count, a list of widths or a named set"

    def from_text(self, text: str):
        if not text.strip():
            raise ValueError(self.kind)
        return text

    def from_yaml(self, value):
        if isinstance(value, (list, tuple)) and value and all(isinstance(w, int) and not isinstance(w, bool)
                                                               for w in value):
            return tuple(value)  # widths, even one: [64] is one head of 64, where the text "64" is 64 heads
        if isinstance(value, (str, int)) and not isinstance(value, bool):
            return self.from_text(str(value))
        raise ValueError(self.kind)

    def validate(self, value):
        if isinstance(value, (tuple, list)) and all(isinstance(w, int) and not isinstance(w, bool) for w in value):
            return value
        raise ValueError("a list of head widths")


POSITIVE_NUMBER = PositiveNumber()
NUMBER = Number()
NUMBER_OR_OFF = NumberOrOff()
NON_NEGATIVE_NUMBER = NonNegativeNumber()
PROBABILITY = Probability()
TEXT = Text()
SPEC_LIST = SpecList()
SWITCH = Switch()
SIZE = Size()
PATH = Path()
HEADS = Heads()
