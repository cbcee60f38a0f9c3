"""A tiny workspace for the studio's tests: a short text made here (never shared data), a prompts file, and
graphs of a small two-expert ensemble and a small lookahead model on it, as the canvas sends them."""

from __future__ import annotations

import random
from itertools import pairwise
from pathlib import Path

WORDS = ["the", "cat", "sat", "on", "a", "mat", "and", "the", "dog", "ran", "to", "it"]


def make_workspace(root: Path) -> Path:
    rng = random.Random(0)
    lines = [" ".join(rng.choice(WORDS) for _ in range(8)) for _ in range(300)]
    (root / "tiny.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (root / "prompts.tsv").write_text("the cat\t sat\nthe dog\t ran\n", encoding="utf-8")
    return root


def ensemble_graph(steps: int = 30, expert: str = "d2x8n1") -> dict:
    """The canvas's graph of a two-expert ensemble: data -> prior -> expert -> expert -> stream -> router ->
    training."""
    kinds = [("data", {"file": "tiny.txt", "seq_len": "16"}), ("prior", {}), ("expert", {"cooperative": expert}),
             ("expert", {"cooperative": "d2x8n1"}), ("stream", {"stream_dim": "16"}), ("router", {}),
             ("training", {"steps": str(steps), "batch_size": "4", "backend": "numpy", "threads": "1", "gen": "0"})]
    return chain_graph("ensemble", kinds)


def lookahead_graph(mode: str = "mtp", heads: int = 2, steps: int = 30) -> dict:
    """The canvas's graph of a small lookahead model: data -> trunk -> heads -> training."""
    kinds = [("data", {"file": "tiny.txt", "seq_len": "16"}),
             ("trunk", {"d_model": "16", "n_layers": "1", "heads": "2", "d_ff": "32"}),
             ("heads", {"lookahead": str(heads), "lookahead_mode": mode, "head_layers": "1"}),
             ("training", {"steps": str(steps), "batch_size": "4", "backend": "numpy", "threads": "1", "gen": "0"})]
    return chain_graph("lookahead", kinds)


def chain_graph(family: str, kinds: list[tuple[str, dict]]) -> dict:
    nodes = [{"id": f"n{i}", "kind": kind, "values": values} for i, (kind, values) in enumerate(kinds, start=1)]
    edges = [{"from": a["id"], "to": b["id"]} for a, b in pairwise(nodes)]
    return {"family": family, "nodes": nodes, "edges": edges, "extra": {}}
