"""A tiny workspace for the studio's tests: a short text made here (never shared data), a prompts file, and
drafts of a small two-expert ensemble and a small lookahead model on it, as the editor saves them: the family,
its settings (as the inspector's fields give them) and the graph `graph from-family` writes for them."""

from __future__ import annotations

import json
import random
from pathlib import Path

from microgpt.core.errors import ConfigError
from microgpt.model.family import family
from microgpt.model.graph.from_family import document_for
from microgpt.settings.known import family_keys, known_settings
from microgpt.settings.sources import Settings

WORDS = ["the", "cat", "sat", "on", "a", "mat", "and", "the", "dog", "ran", "to", "it"]
TRAINING = {"batch_size": "4", "backend": "numpy", "threads": "1", "gen": "0"}


def make_workspace(root: Path) -> Path:
    rng = random.Random(0)
    lines = [" ".join(rng.choice(WORDS) for _ in range(8)) for _ in range(300)]
    (root / "tiny.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (root / "prompts.tsv").write_text("the cat\t sat\nthe dog\t ran\n", encoding="utf-8")
    return root


def ensemble_run(steps: int = 30, expert: str = "d2x8n1") -> dict:
    """The editor's draft of a two-expert ensemble (the first expert `expert`), as /api/save takes it."""
    return family_run("ensemble", {"file": "tiny.txt", "seq_len": "16", "cooperative": f"{expert},d2x8n1",
                                   "stream_dim": "16", "steps": str(steps), **TRAINING})


def lookahead_run(mode: str = "mtp", heads: int = 2, steps: int = 30) -> dict:
    """The editor's draft of a small lookahead model, as /api/save takes it."""
    return family_run("lookahead", {"file": "tiny.txt", "seq_len": "16", "d_model": "16", "n_layers": "1",
                                    "heads": "2", "d_ff": "32", "lookahead": str(heads), "lookahead_mode": mode,
                                    "head_layers": "1", "steps": str(steps), **TRAINING})


def family_run(name: str, settings: dict) -> dict:
    """{"family", "settings", "document"}: the document the page draws for the settings (from-family's, as
    JSON carries it), or None where its shape settings make none."""
    fields, own = known_settings(), set(family_keys(family(name)))
    try:
        shape = {key: fields[key].check.from_text(value) for key, value in settings.items() if key in own}
        document = json.loads(json.dumps(document_for(name, Settings({"family": name, **shape}).model_config(1))))
    except (ConfigError, ValueError):
        document = None
    return {"family": name, "settings": dict(settings), "document": document}


def check_body(run: dict) -> dict:
    """The /api/graph/check body of a family draft: its family and settings (the server draws its graph)."""
    return {"family": run["family"], "settings": run["settings"]}
