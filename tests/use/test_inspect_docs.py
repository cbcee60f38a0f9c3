"""docs/inspect.md's tables of each family's paths are the paths of a default model of that family."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from microgpt.backends import get_backend
from microgpt.data.tokenizer import CharTokenizer
from microgpt.model.family import family
from microgpt.use.inspect.paths import path_widths
from microgpt.use.loaded import LoadedModel

PAGE = Path(__file__).resolve().parents[2] / "docs" / "inspect.md"
DEFAULTS = {"gpt": {}, "ensemble": {"cooperative": "d64n3,d64n3"}, "lookahead": {"lookahead": 2}}


def documented(name: str) -> list[tuple[str, int]]:
    section = PAGE.read_text(encoding="utf-8").split(f"### {name} (", 1)[1].split("\n### ", 1)[0]
    return [(path, int(width)) for path, width in re.findall(r"^\| `([^`]+)` \| (\d+) \|$", section, re.MULTILINE)]


@pytest.mark.parametrize("name", list(DEFAULTS))
def test_the_page_lists_each_familys_paths(name):
    tokenizer = CharTokenizer("".join(chr(c) for c in range(32, 97)))  # 65 characters, as tinyshakespeare's
    config = family(name).Config(vocab_size=65, **DEFAULTS[name])
    model = LoadedModel(family(name).build(config, get_backend("numpy"), tokenizer, 0), name, tokenizer, Path("x"),
                        2**34)
    folded: dict[str, int] = {}
    for path, width in path_widths(model.graph.program).items():
        folded.setdefault(re.sub(r"blocks\.\d+\.", "blocks.<i>.", path), width)
    assert documented(name) == list(folded.items())
