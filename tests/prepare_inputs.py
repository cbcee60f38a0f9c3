"""What `microgpt prepare` is given and gives in the data tests (tests/data/test_prepare.py and
test_prepare_comparable.py): numbered documents of words from many scripts, written as JSON Lines, and a
prepared split's tokens read whole."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "while", "seven", "wizards", "quietly",
         "hex", "jolly", "zebras;", "naïve", "café", "owners", "résumé", "—", "東京", "✓", "😀"]


def documents(count: int = 60, seed: int = 0) -> list[str]:
    """Distinct documents (each numbered), some ending in a newline, some not, some with several lines."""
    rng = np.random.default_rng(seed)
    docs = []
    for i in range(count):
        lines = [" ".join(rng.choice(WORDS, size=rng.integers(3, 12))) for _ in range(rng.integers(1, 4))]
        docs.append(f"doc {i}: " + "\n".join(lines) + ("\n" if i % 3 else ""))
    return docs


def write_jsonl(path: Path, docs: list[str], field: str = "text", opener=open) -> Path:
    with opener(path, "wt", encoding="utf-8") as f:
        for doc in docs:
            f.write(json.dumps({"id": len(doc), field: doc}) + "\n")
    return path


def tokens(split) -> np.ndarray:
    return split[0 : len(split)] if split is not None else np.zeros(0, dtype=np.int64)
