"""What the node editor's server-side tests (tests/studio/test_studio_graph_*api.py) share: `small_gpt`, a
graph document; SETTINGS, the run settings a check is made with, and RUN_SETTINGS, those of a saved graph run;
LAYOUT, a saved graph's editor layout; `check`, POST /api/graph/check answered 200; EXAMPLES, examples/graphs/."""

from __future__ import annotations

from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "graphs"
SETTINGS = {"file": "tiny.txt", "seq_len": 16, "batch_size": 4}
RUN_SETTINGS = {**SETTINGS, "batch_size": 2, "steps": 3, "threads": 1, "backend": "numpy", "gen": 0}
LAYOUT = {"version": 1, "positions": {"/tok_emb": [0, 0], "/blocks": [0, 120], "transformer_block/ln1": [5, 5]},
          "collapsed": ["/blocks"], "viewport": {"x": 10, "y": -20, "k": 0.5}}


def small_gpt(d: int = 16) -> dict:
    """gpt's graph, 2 blocks of d columns."""
    return {"microgpt_graph": 1, "dims": {"d": d, "d_ff": 2 * d, "heads": 2},
            "nodes": [{"id": "tok_emb", "op": "embedding"},
                      {"id": "blocks", "group": "transformer_block", "repeat": 2},
                      {"id": "final_norm", "op": "layer_norm"}, {"id": "head", "op": "logits"},
                      {"id": "loss", "op": "cross_entropy"}],
            "edges": [{"from": "tokens", "to": "tok_emb.ids"}, {"from": "tok_emb.out", "to": "blocks.x"},
                      {"from": "blocks.x", "to": "final_norm.x"}, {"from": "final_norm.out", "to": "head.x"},
                      {"from": "head.out", "to": "loss.logits"}, {"from": "head.out", "to": "logits"}]}


def check(client, document=None, settings=None, **extra) -> dict:
    """The studio's check of `document` with `settings` (SETTINGS unless given)."""
    answer = client.post("/api/graph/check", json={"document": document, "settings": settings or SETTINGS,
                                                   **extra})
    assert answer.status_code == 200, answer.text
    return answer.json()
