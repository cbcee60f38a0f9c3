"""How long the node editor waits for /api/graph/check after an edit: a document of 500 nodes, checked through
the studio's app (Starlette's TestClient, so the JSON both ways and the guard are counted; no network).

Two documents of about 500 nodes: `flat`, 500 nodes on the top level (an embedding, 98 residual units of
layer_norm -> linear -> relu -> linear -> add, the head and the loss), as an editor draws a big free graph;
and `deep`, gpt's graph of 40 blocks (a repeat: 5 nodes on the top level, 444 primitives once flattened); and
`medium`, the flat one with 20 units (104 nodes), whose causality verdict fits in the check's budget.
For each: the first check (nothing cached but the text), then the median and worst of ROUNDS checks after an
edit (the description changed, so every cache that keys on the document misses), at an editor's pace (each
once the last verdict is in) and back to back, and of ROUNDS checks of the same document (the causality
verdict kept). The goal is an edit's check within 150 ms (issue 29); a causality verdict that takes longer
than the check's budget comes with the next check (graph_api.CHECK_BUDGET_S), and the count of answers that
held it is printed.

    python benchmarks/bench_graph_check.py [--rounds 10]

`check_latency(client, body, rounds)` is the measurement; benchmarks/bench_studio_editor.py may call it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from starlette.testclient import TestClient

from microgpt.core.machine import describe
from microgpt.model.graph.from_family.gpt import edge
from microgpt.studio.app import Studio
from microgpt.studio.workspace import Workspace

TOKEN = "bench"
PORT = 8765
GOAL_MS = 150  # issue 29: an edit is re-checked and its errors shown within 150 ms
SETTINGS = {"file": "text.txt", "seq_len": 64, "batch_size": 12}


def flat_document(units: int = 98, d: int = 64) -> dict:
    """An embedding, `units` residual units of five nodes each, a LayerNorm, the logits and the loss: 5 x units
    + 4 nodes on the top level."""
    nodes, edges, x = [{"id": "emb", "op": "embedding"}], [edge("tokens", "emb.ids")], "emb.out"
    for i in range(units):
        nodes += [{"id": f"ln{i}", "op": "layer_norm"}, {"id": f"up{i}", "op": "linear", "params": {"out": 2 * d}},
                  {"id": f"act{i}", "op": "relu"}, {"id": f"down{i}", "op": "linear", "params": {"out": d}},
                  {"id": f"sum{i}", "op": "add"}]
        edges += [edge(x, f"ln{i}.x"), edge(f"ln{i}.out", f"up{i}.x"), edge(f"up{i}.out", f"act{i}.x"),
                  edge(f"act{i}.out", f"down{i}.x"), edge(x, f"sum{i}.in"), edge(f"down{i}.out", f"sum{i}.in")]
        x = f"sum{i}.out"
    nodes += [{"id": "norm", "op": "layer_norm"}, {"id": "head", "op": "logits"}, {"id": "loss", "op": "cross_entropy"}]
    edges += [edge(x, "norm.x"), edge("norm.out", "head.x"), edge("head.out", "loss.logits"), edge("head.out", "logits")]
    return {"microgpt_graph": 1, "description": "flat", "dims": {"d": d}, "nodes": nodes, "edges": edges}


def deep_document(layers: int = 40) -> dict:
    nodes = [{"id": "tok_emb", "op": "embedding"}, {"id": "blocks", "group": "transformer_block", "repeat": layers},
             {"id": "final_norm", "op": "layer_norm"}, {"id": "head", "op": "logits"},
             {"id": "loss", "op": "cross_entropy"}]
    edges = [edge("tokens", "tok_emb.ids"), edge("tok_emb.out", "blocks.x"), edge("blocks.x", "final_norm.x"),
             edge("final_norm.out", "head.x"), edge("head.out", "loss.logits"), edge("head.out", "logits")]
    return {"microgpt_graph": 1, "description": "deep", "dims": {"d": 64, "d_ff": 256, "heads": 4},
            "nodes": nodes, "edges": edges}


def check_latency(client: TestClient, body: dict, rounds: int, edit: bool, settle: bool = True) -> tuple[list, int,
                                                                                                     list]:
    """(milliseconds of each of `rounds` checks of `body`, how many answers held the causality verdict, the
    milliseconds from each edit to its verdict). With `edit`, each check follows a change of the description
    (an edit: nothing keyed on the document is kept); with `settle`, the next edit waits until the verdict
    is in (an editor's pace: the page checks again while it is pending), else edits come back to back."""
    times, verdicts, settled = [], 0, []
    for i in range(rounds):
        if edit:
            body["document"]["description"] = f"edit {i} {time.perf_counter()}"
        start = time.perf_counter()
        answer = client.post("/api/graph/check", json=body)
        times.append((time.perf_counter() - start) * 1000)
        if answer.status_code != 200 or answer.json()["errors"]:
            sys.exit(f"the check failed: {answer.text[:300]}")
        verdicts += not answer.json()["causality"]["pending"]
        while settle and client.post("/api/graph/check", json=body).json()["causality"]["pending"]:
            time.sleep(0.02)
        settled.append((time.perf_counter() - start) * 1000)
    return times, verdicts, settled


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        text = "".join(chr(32 + (i * 7) % 64) for i in range(200_000)) + "\n"  # 65 characters, 200 kB
        (Path(root) / "text.txt").write_text(text, encoding="utf-8")
        studio = Studio(Workspace(root), TOKEN, "127.0.0.1", PORT)
        client = TestClient(studio.app, base_url=f"http://127.0.0.1:{PORT}", headers={"X-Studio-Token": TOKEN})
        print(f"machine: {describe()}")
        for name, document in (("flat", flat_document()), ("deep", deep_document()), ("medium", flat_document(20))):
            body = {"document": document, "settings": SETTINGS}
            (first,), _, _ = check_latency(client, body, 1, edit=True)
            paced, paced_verdicts, settled = check_latency(client, body, args.rounds, edit=True)
            rapid, _, _ = check_latency(client, body, args.rounds, edit=True, settle=False)
            same, _, _ = check_latency(client, body, args.rounds, edit=False)
            answer = client.post("/api/graph/check", json=body).json()
            print(f"{name}: {len(document['nodes'])} nodes on the top level, {answer['description']}")
            print(f"  first check {first:.0f} ms; an edit at an editor's pace: median {statistics.median(paced):.0f} "
                  f"ms, worst {max(paced):.0f} ({paced_verdicts} of {args.rounds} with the causality verdict, which "
                  f"came after a median {statistics.median(settled):.0f} ms); edits back to back: median "
                  f"{statistics.median(rapid):.0f} ms, worst {max(rapid):.0f}; the same document again: median "
                  f"{statistics.median(same):.0f} ms; goal {GOAL_MS} ms")

if __name__ == "__main__":
    main()
