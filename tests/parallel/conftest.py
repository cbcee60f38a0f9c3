"""The parallel tests' shared fixture: `corpus`, one text (1,500 words of a dozen) that every run of a test file
trains on, so that its runs under MPI or Slurm and in one process can be held to each other."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "text.txt"
    words = ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "seven", "wizards", "hex"]
    path.write_text(" ".join(np.random.default_rng(0).choice(words, 1500)))
    return path
