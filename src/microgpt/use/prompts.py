r"""Prompts with their answers: a prompt file, and a model's greedy answers to it (`microgpt eval --prompts`).

A prompt file is UTF-8 text, one prompt a line: the prompt before the line's first tab, kept exactly as
written (spaces included: it is what the model continues), and its answer after the tab; in both, `\n` is a
newline, `\t` a tab and `\\` a backslash (so a backslash meant before an n or a t is written `\\`). Blank
lines are skipped. `answer_prompts` completes each prompt greedily up to its first newline
(LoadedModel.complete) and counts the completion correct when it is the answer, surrounding whitespace ignored
on both. The model sees the prompt and nothing before it: a prompt meant to start a line, for a model trained
on windows cut anywhere in the text, says so with a leading `\n`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from microgpt.data.corpus import DataError, read_corpus
from microgpt.use.loaded import LoadedModel

FORMAT = "lines of prompt<TAB>answer"
ESCAPES = {"n": "\n", "t": "\t", "\\": "\\"}  # \n, \t and \\ (any other backslash is itself)


@dataclass(frozen=True)
class Prompt:
    prompt: str
    answer: str
    line: int  # its line in the file, counting from 1


@dataclass(frozen=True)
class Answered:
    prompt: Prompt
    completion: str  # the greedy continuation, up to its first newline

    @property
    def correct(self) -> bool:
        return self.completion.strip() == self.prompt.answer.strip()


def unescaped(text: str) -> str:
    """A prompt file's text with its escapes \\n, \\t and \\\\ made the characters they stand for."""
    return re.sub(r"\\([nt\\])", lambda m: ESCAPES[m.group(1)], text)


def read_prompts(path: str | Path, max_bytes: int) -> list[Prompt]:
    """The prompts of a prompt file of at most max_bytes; a DataError naming the file and line of a bad one."""
    prompts = []
    text = read_corpus(path, max_bytes, wanted=FORMAT, prepared=False)  # a prompt file is never a dataset
    for number, line in enumerate(text.split("\n"), start=1):
        line = line.removesuffix("\r")
        if not line.strip():
            continue
        if "\t" not in line:
            raise DataError(f"{path} line {number} has no tab; give {FORMAT}")
        prompt, answer = line.split("\t", 1)
        if not prompt:
            raise DataError(f"{path} line {number} has nothing before its tab; give {FORMAT}")
        prompts.append(Prompt(unescaped(prompt), unescaped(answer), number))
    if not prompts:
        raise DataError(f"{path} has only blank lines; give {FORMAT}")
    return prompts


def answer_prompts(model: LoadedModel, prompts: list[Prompt], path: str | Path) -> Iterator[Answered]:
    """Each prompt answered in turn; first, before any is, an error for a prompt the tokenizer cannot encode."""
    for p in prompts:
        model.tokenizer.encode(p.prompt, source=f"the prompt on line {p.line} of {path}")
    return (Answered(p, model.complete(p.prompt)) for p in prompts)
