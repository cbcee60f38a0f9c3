"""`microgpt inspect MODEL [FILE]`: inside a checkpoint's model, through its graph (use/inspect, docs/inspect.md).

Without a figure or a CSV to write, it lists the paths of the model's node outputs with their widths, the names
`microgpt.load(MODEL).trace(text)[path]` takes. --attention, --logit-lens and --activations (of --node) draw the
text's (--text, or FILE's first seq_len tokens); --ablate-heads scores every head's ablation on FILE (or
--text) and ranks them.
"""

from __future__ import annotations

import sys
from pathlib import Path

from microgpt.cli.common import add_flags_with_defaults, train_settings
from microgpt.cli.sample import check_output_file, write_text_file
from microgpt.core.errors import ConfigError
from microgpt.core.fields import settings_fields
from microgpt.data.corpus import read_corpus
from microgpt.settings.commands import InspectSettings
from microgpt.use.inspect import score_heads
from microgpt.use.inspect.figures import activations_figure, attention_figure, lens_figure
from microgpt.use.inspect.paths import attention_paths, path_widths, resolve
from microgpt.use.loaded import load


def add_parser(commands) -> None:
    p = commands.add_parser("inspect", help="look inside a model: its paths, attention maps, the logit lens, head "
                            "ablations", description=__doc__.split("\n\n")[0].split(":", 1)[1].strip()
                            + " " + " ".join(__doc__.split("\n\n")[1].split()))
    p.add_argument("model", metavar="MODEL", help="checkpoint directory (written by microgpt train)")
    p.add_argument("file", metavar="FILE", nargs="?", help="UTF-8 text: held-out text to score heads on, and the "
                   "text traced where --text is not given")
    add_flags_with_defaults(p, settings_fields(InspectSettings)
                            + train_settings("backend", "threads", "precision", "max_memory", "max_corpus"))
    p.set_defaults(run=run)


def run(args) -> int:
    chosen = InspectSettings(**{f.field: getattr(args, f.key) for f in settings_fields(InspectSettings)})
    outputs = {flag: value for flag, value in (("--attention", chosen.attention), ("--logit-lens", chosen.logit_lens),
                                                ("--activations", chosen.activations),
                                                ("--ablate-heads", chosen.ablate_heads)) if value is not None}
    for flag, value in outputs.items():
        check_output_file(Path(value), flag)
    if outputs and chosen.text is None and args.file is None:
        raise ConfigError(f"{next(iter(outputs))} needs a text: give FILE or --text TEXT")
    loaded = load(args.model, backend=args.backend, threads=args.threads, max_memory=args.max_memory,
                  precision=args.precision)
    if loaded.backend_note:
        print(loaded.backend_note, file=sys.stderr)
    if not outputs:
        return list_paths(loaded)
    held_out = None if args.file is None else read_corpus(args.file, args.max_corpus, "a text file", prepared=False)
    if chosen.node is not None:
        resolve(loaded.graph, chosen.node)  # a bad path is refused before anything runs
    if chosen.attention or chosen.logit_lens or chosen.activations:
        trace = loaded.trace(loaded.graph.ids(chosen.text if chosen.text is not None else held_out)[: loaded.seq_len])
        if chosen.attention:
            layers = [attention_paths(loaded.graph.program).index(chosen.node)] if chosen.node in attention_paths(
                loaded.graph.program) else None
            print(f"attention maps of {len(trace.ids)} tokens -> "
                  f"{attention_figure(trace, Path(chosen.attention), layers)}")
        if chosen.activations:
            print(f"{chosen.node} over {len(trace.ids)} tokens -> "
                  f"{activations_figure(trace, chosen.node, Path(chosen.activations))}")
        if chosen.logit_lens:
            print(f"logit lens of {len(trace.ids)} tokens -> {lens_figure(trace.logit_lens(), Path(chosen.logit_lens))}")
    if chosen.ablate_heads:
        ablate_heads(loaded, loaded.graph.ids(held_out if held_out is not None else chosen.text)[: chosen.max_positions],
                     chosen)
    return 0


def list_paths(loaded) -> int:
    """Print each path and its width, in the order the graph runs them."""
    program = loaded.graph.program
    widths = path_widths(program)
    print(f"{loaded.path}: {loaded.family_name}, {len(widths)} node outputs (path, width), in the order they run")
    for path, width in widths.items():
        print(f"  {path:<40} {width}")
    print(f"attention nodes (t.attention(layer, head) takes the layer's index or path): "
          f"{', '.join(attention_paths(program)) or 'none'}")
    return 0


def ablate_heads(loaded, ids, chosen: InspectSettings) -> None:
    """Score every head's ablation on ids, write the CSV, print the five most harmful."""
    if len(ids) < 2:
        raise ConfigError("--ablate-heads needs a text of at least 2 tokens")

    def progress(done: int, total: int) -> None:
        print(f"\rablating heads: {done}/{total}", end="" if done < total else "\n", file=sys.stderr, flush=True)

    clean, heads = score_heads(loaded.graph, ids, chosen.mode, progress)
    lines = ["rank,path,layer,head,width,loss,delta"]
    lines += [f"{rank},{h.path},{h.layer},{h.head},{h.width},{h.loss:.6f},{h.delta:.6f}"
              for rank, h in enumerate(heads, 1)]
    write_text_file(Path(chosen.ablate_heads), "\n".join(lines) + "\n")
    print(f"{len(heads)} heads ablated ({chosen.mode}) on {len(ids)} tokens, loss {clean:.4f} nats per token without; "
          f"-> {chosen.ablate_heads}")
    for h in heads[:5]:
        print(f"  {h.path:<32} loss {h.loss:.4f} ({h.delta:+.4f})")
