"""The studio's inspect helper: `python -m microgpt.studio.inspection CHECKPOINT --node PATH --backend B` reads a
prompt on stdin and prints one JSON line: the model's paths, and for the prompt (its first seq_len tokens) the
figures `microgpt inspect` draws, from the same code (use/inspect/figures.py), as PNG data: the node's
activations, its heads' attention maps where it is an attention node, the logit lens, and every head's
ablation score on the prompt, the most harmful first.

The studio runs it in a subprocess, as it runs `microgpt sample` and the routing helper, so that no model is
loaded into the server. Any mistake (a bad path, a character outside the vocabulary) is one line on stderr and
exit status 2.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import tempfile
from pathlib import Path

from microgpt.core.errors import ConfigError, DataError
from microgpt.model.checkpoint import CheckpointError
from microgpt.use.inspect import score_heads
from microgpt.use.inspect.figures import activations_figure, attention_figure, lens_figure
from microgpt.use.inspect.paths import attention_paths, path_widths, resolve
from microgpt.use.loaded import load

MAX_PROMPT_CHARACTERS = 2_000  # what the page sends: a prompt, of which the first seq_len tokens are drawn


def png(draw, folder: Path, name: str) -> str:
    """A figure drawn into `folder` by draw(path), as base64 PNG data."""
    path = folder / f"{name}.png"
    draw(path)
    return base64.b64encode(path.read_bytes()).decode("ascii")


def inspect(checkpoint: str, node: str | None, backend: str, text: str) -> dict:
    loaded = load(checkpoint, backend=backend, threads=1)
    graph = loaded.graph
    layers = attention_paths(graph.program)
    found = {"paths": list(path_widths(graph.program).items()), "attention": layers}
    if not text:
        return found
    if len(text) > MAX_PROMPT_CHARACTERS:
        raise ConfigError(f"the prompt is {len(text):,} characters; the studio inspects at most "
                          f"{MAX_PROMPT_CHARACTERS:,} (`microgpt inspect` takes any text)")
    node = node if node else (layers[0] if layers else None)  # an attention node by default: it has maps
    if node is not None:
        resolve(graph, node)
    trace = loaded.trace(graph.ids(text)[: loaded.seq_len])
    with tempfile.TemporaryDirectory() as folder:
        figures = {"lens": png(lambda p: lens_figure(trace.logit_lens(), p), Path(folder), "lens")}
        if node is not None:
            figures["activations"] = png(lambda p: activations_figure(trace, node, p), Path(folder), "activations")
        if node in layers:
            figures["attention"] = png(lambda p: attention_figure(trace, p, [layers.index(node)]), Path(folder),
                                       "attention")
    found.update(node=node, tokens=trace.tokens, figures=figures)
    if len(trace.ids) >= 2:
        clean, heads = score_heads(graph, trace.ids)
        found["heads"] = {"clean": clean, "ranked": [[h.path, h.width, h.loss, h.delta] for h in heads]}
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m microgpt.studio.inspection", description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--node", default=None)
    parser.add_argument("--backend", default="auto")
    args = parser.parse_args(argv)
    text = sys.stdin.read()
    try:
        found = inspect(args.checkpoint, args.node, args.backend, text)
    except (ConfigError, DataError, CheckpointError, FileNotFoundError) as exc:
        print(f"inspect: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
