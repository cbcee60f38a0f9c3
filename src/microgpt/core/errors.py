"""The errors a user can cause, at the ground so every layer can raise them without importing another.

Each carries a message that names the problem and the fix; the CLI prints it as
one line and exits 2 (cli/__init__.py). A message that names a setting holds it
as data (`Named`: its key, and the value where the message shows one), not as
words, and the error's `key` is the setting at fault: each front end words the
same error its own way (`worded`): the command line as flags (`--lr 0.5`, the
default, `str`), Python as keywords (`lr=0.5`, `as_keyword`), the studio as its fields.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

NO_VALUE = object()  # a setting named without its value


class Placeholder(str):
    """A value that stands for any the user might give ("N", "..."), written as it is by every front end."""


@dataclass(frozen=True)
class Named:
    """A setting (or an invocation option: save, resume, init_from, overwrite) named in a message, by its key;
    with its value where the message shows one, and with where it was given when that was a
    named run of a YAML file ("run ID in FILE"), which every front end says alike."""

    key: str
    value: object = NO_VALUE
    origin: str | None = None


Wording = Callable[[Named], str]  # how a front end names a setting


def as_flag(named: Named) -> str:
    """The command line's words: "--lr", "--lr 0.5", "--no-random-batches", "--heads 4,4"; a named run's value
    as its YAML says it ("heads: 1,2 (run ID in FILE)")."""
    flag = "--" + named.key.replace("_", "-")
    if named.origin is not None and named.value is NO_VALUE:
        return f"{named.key} ({named.origin})"
    if named.origin is not None:
        return f"{named.key}: {_listed(named.value)} ({named.origin})"
    if named.value is NO_VALUE:
        return flag
    if isinstance(named.value, bool):
        return flag if named.value else f"--no-{named.key.replace('_', '-')}"
    return f"{flag} {_listed(named.value)}"


def as_keyword(named: Named) -> str:
    """Python's words, as `microgpt.train` and a loaded model's methods take their settings: "lr", "lr=0.5",
    "save=False", "cooperative=..."; a named run's value as its YAML says it, as every front end does."""
    if named.origin is not None:
        return as_flag(named)
    if named.value is NO_VALUE:
        return named.key
    shown = named.value if isinstance(named.value, Placeholder) else repr(named.value)
    return f"{named.key}={shown}"


@contextlib.contextmanager
def in_python_words() -> Iterator[None]:
    """An error given in parts raised inside (a user's, a stopped run's, a checkpoint's), with its settings named as
    Python's keywords (`as_keyword`)."""
    try:
        yield
    except InParts as exc:
        exc.args = (exc.worded(as_keyword),)  # the same error, its type and data kept, said in Python's words
        raise


def _listed(value) -> str:
    """A value as a flag or YAML writes it: a tuple of widths as 4,4,8."""
    return ",".join(map(str, value)) if isinstance(value, tuple) else str(value)


def worded(parts: tuple, words: Wording) -> str:
    """A message given in parts, with each setting it names in `words`."""
    return "".join(words(part) if isinstance(part, Named) else str(part) for part in parts)


class Note(str):
    """A line about a run (not an error: "--lr 0.01 overrides the checkpoint's 0.003") given in parts, as a
    UserError's message is; the string is the command line's words, and `worded` says it in a front end's."""

    def __new__(cls, *parts):
        note = super().__new__(cls, worded(parts, as_flag))
        note.parts = parts
        return note

    def worded(self, words: Wording) -> str:
        return worded(self.parts, words)


def said(line, words: Wording) -> str:
    """A line in a front end's words: a Note's, worded; any other string as it is."""
    return line.worded(words) if isinstance(line, Note) else line


class InParts(Exception):
    """An error whose message is given in parts, strings and `Named` settings: its text is the command line's
    words, and `worded` says it in a front end's. A base beside a built-in type: UserError (a ValueError),
    TrainingStopped (a RuntimeError), a checkpoint's CheckpointError (a ValueError)."""

    def __init__(self, *parts):
        self.parts = parts
        super().__init__(self.worded(as_flag))

    def worded(self, words: Wording) -> str:
        """The message with each setting it names in `words`."""
        return worded(self.parts, words)


class UserError(InParts, ValueError):
    """A mistake in what the user gave, its message given in parts; `key` is the setting at fault (given, or the
    first named), None where none is."""

    def __init__(self, *parts, key: str | None = None):
        named = [part.key for part in parts if isinstance(part, Named)]
        self.key = key if key is not None else (named[0] if named else None)
        super().__init__(*parts)


class ConfigError(UserError):
    """An invalid configuration value; the message names it and says how to fix it."""


class DataError(UserError):
    """Unusable training or evaluation text; the message names the problem and the fix."""


class DistributedError(ConfigError):
    """Several processes were started but cannot train together; the message says why and what to do."""


class TrainingStopped(InParts, RuntimeError):
    """Training stopped early (a non-finite loss); the message, given in parts, says why, what was kept and what
    to try."""


class WriterStopped(TrainingStopped):
    """A stop only the writing process sees (its save refused unsound weights): with several processes it must
    stop the others too, which are not stopping by themselves."""


class UnsoundOutputs(ValueError):
    """A model whose outputs are NaN or infinite; the message says so and what to do."""


class NonFiniteLoss(ArithmeticError):
    """A step's loss came out NaN or infinite, so no update follows (the trainer turns it into TrainingStopped)."""

    def __init__(self, loss: float, step: int):
        super().__init__(f"the loss became {loss} at step {step}; the weights are kept as they were before it")
        self.loss, self.step = loss, step


class HungRanks(InParts, RuntimeError):
    """Some ranks did not reach a collective within the collective timeout (its message names the setting in
    parts). Every live rank raises it; `reports` is True in the one that prints it (the lowest live rank), so
    the job ends with one line."""

    def __init__(self, *parts, reports: bool):
        super().__init__(*parts)
        self.reports = reports

    def adding(self, *parts) -> HungRanks:
        """The same error with more said, in parts (what the checkpoint on disk holds)."""
        return HungRanks(*self.parts, "; ", *parts, reports=self.reports)
