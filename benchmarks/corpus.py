"""The token stream the benchmarks train on: tinyshakespeare from ../shared when it is there, else random ids.

The benchmarks must run anywhere, so the file is optional; its absence is said in
the description line each benchmark prints.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
CANDIDATES = [  # beside the checkout (developer machines, CI), or inside it (a copy that carries shared/)
    REPO_ROOT.parent / "shared" / "data" / "tinyshakespeare.txt",
    REPO_ROOT / "shared" / "data" / "tinyshakespeare.txt",
]


def load_tokens(vocab_size: int, seed: int, n_random: int) -> tuple[np.ndarray, str]:
    """Token ids (n,) in 0..vocab_size-1 and a line saying where they came from."""
    for path in CANDIDATES:
        if path.is_file():
            text = path.read_text(encoding="utf-8")
            chars = sorted(set(text))
            if len(chars) > vocab_size:
                continue
            index = {c: i for i, c in enumerate(chars)}
            ids = np.fromiter((index[c] for c in text), dtype=np.int64, count=len(text))  # (n,)
            return ids, f"tinyshakespeare ({len(text):,} chars, {len(chars)} distinct) from {path}"
    ids = np.random.default_rng(seed).integers(0, vocab_size, size=n_random)  # (n,)
    return ids, f"random token ids (no tinyshakespeare.txt with at most {vocab_size} characters under shared/)"
