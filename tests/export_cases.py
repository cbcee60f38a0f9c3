"""Small trained checkpoints of every family and tokenizer, for the export tests (tests/export/).

Each is trained a few steps on the numpy backend (its weights moved from their initial values, its n-gram
tables counted), once per test session, under one temporary folder. `CASES` names them; `CACHEABLE` are those
whose logits decode through a KV cache (positions mixed by causal attention and rope alone).
"""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from pathlib import Path

import microgpt

ROOT = Path(__file__).resolve().parents[1]
TEXT = "".join(f"{x} + {y} = {x + y}\nthe cat sat on the mat; naïve café. " for x in range(0, 60, 3)
               for y in range(0, 60, 7))
SEQ_LEN = 12
GPT = {"d_model": 16, "heads": "2,6,8", "n_layers": 2, "d_ff": 24}  # unequal heads: head groups of 1
ENSEMBLE = {"family": "ensemble", "cooperative": "d8n1,d2+4n2ff10", "stream_dim": 6}
BPE = {"tokenizer": "bpe", "vocab_size": 300}
GRAPHS = {path.stem: str(path) for path in sorted((ROOT / "examples" / "graphs").glob("*.json"))}

CASES = {
    "gpt": GPT,
    "gpt-bpe": {**GPT, **BPE},
    "gpt-odd-heads": {**GPT, "heads": "1,7,8"},  # a head of one column, and an odd width: RoPE's untouched column
    **{f"ensemble-{prior}-{router}": {**ENSEMBLE, "prior": prior, "router": router}
       for prior in ("counter", "bigram", "trigram") for router in ("global", "context", "gated")},
    "ensemble-none-global-routed": {**ENSEMBLE, "router": "global", "expert_grad": "routed"},
    "ensemble-bigram-gated-routed": {**ENSEMBLE, "prior": "bigram", "router": "gated", "expert_grad": "routed",
                                     "active_dims": 4},
    "ensemble-counter-gated-off": {**ENSEMBLE, "prior": "counter", "router": "gated", "prior_off_at": 2},
    "ensemble-bigram-bpe": {**ENSEMBLE, **BPE, "prior": "bigram", "router": "context"},
    "lookahead-mtp": {**GPT, "family": "lookahead", "lookahead_mode": "mtp"},
    "lookahead-gap": {**GPT, "family": "lookahead", "lookahead_mode": "gap", "lookahead": 2},
    "lookahead-hydra": {**GPT, "family": "lookahead", "lookahead_mode": "hydra", "lookahead": 2},
    **{f"graph-{name}": {"graph": path} for name, path in GRAPHS.items()},
    "graph-gpt_bigram-bpe": {**BPE, "graph": GRAPHS["gpt_bigram"]},
}
CACHEABLE = ["gpt", "gpt-bpe", "gpt-odd-heads", "lookahead-mtp", "lookahead-gap", "lookahead-hydra",
             "graph-parallel_block", "graph-two_experts"]
SMALL = {"d_model": 8, "heads": "2", "n_layers": 1, "d_ff": 16}  # the least to compile (torch.compile's test)
CALCULATOR = {**ENSEMBLE, "cooperative": "d8n1", "prior": "calculator"}
# What trains in PyTorch as in microgpt: models whose backward is autograd's (not the ensemble's equal share)
TRAINABLE = ["gpt", "ensemble-none-global-routed", "ensemble-bigram-gated-routed", "graph-two_experts"]


@functools.cache
def _root() -> Path:
    where = Path(tempfile.mkdtemp(prefix="microgpt-export-tests-"))
    atexit.register(shutil.rmtree, where, ignore_errors=True)
    (where / "text.txt").write_text(TEXT, encoding="utf-8")
    return where


@functools.cache
def checkpoint(name: str) -> Path:
    """The checkpoint of case `name` (CASES, "calculator" or "small"), trained on first use."""
    settings = {"calculator": CALCULATOR, "small": SMALL}.get(name) or CASES[name]
    microgpt.train(str(_root() / "text.txt"), model=str(_root() / name), steps=3, batch_size=4, seq_len=SEQ_LEN,
                   val_tokens=100, gen=0, backend="numpy", seed=1, **settings)
    return _root() / name


def probe(vocab: int, batch: int, length: int, seed: int = 0):
    """Random ids (batch, length) int64."""
    import numpy as np

    return np.random.default_rng(seed).integers(0, vocab, size=(batch, length)).astype(np.int64)
