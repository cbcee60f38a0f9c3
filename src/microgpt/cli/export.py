"""`microgpt export MODEL --format onnx|torch --out FILE`: a checkpoint as a model other tools run (docs/export.md).

- `--format onnx`: an ONNX model (token ids [batch, T] in, logits [batch, T, vocab] out) for ONNX Runtime;
  with `--kv-cache`, past keys and values go in and out, for decoding a token at a time;
- `--format torch`: a model.pt that `microgpt.export.torch_module.load` turns into a torch.nn.Module.

Every family exports (a lookahead model's main head); the file is checked against microgpt's own logits
before it is written, beside --out first and then renamed into place. Anything wrong is one line, exit 2,
and nothing written; Ctrl-C, SIGTERM or SIGHUP remove the file being written and say so in one line.
"""

from __future__ import annotations

import sys
from pathlib import Path

from microgpt.cli.common import add_flags_with_defaults, train_settings
from microgpt.core.stops import Stopped, stopping_on_signals
from microgpt.export import FORMATS, write_export


def add_parser(commands) -> None:
    p = commands.add_parser("export", help="write a checkpoint as an ONNX model or a PyTorch module",
                            description=__doc__.split("\n\n")[0].split(":", 1)[1].strip())
    p.add_argument("model", metavar="MODEL", help="checkpoint directory (written by microgpt train)")
    p.add_argument("--format", choices=FORMATS, help="onnx (for ONNX Runtime) or torch (a torch.nn.Module's "
                   "plan and state dict); without it, from --out's suffix (.onnx, .pt)")
    p.add_argument("--out", type=Path, required=True, metavar="FILE",
                   help="the file to write (beside it first, then renamed into place); refused if it is a "
                   "directory, inside a checkpoint, a run's file, or exists without --overwrite")
    p.add_argument("--kv-cache", action="store_true",
                   help="onnx: past keys and values in and out (position, past_key.N, past_value.N -> "
                   "present_key.N, present_value.N), for graphs whose positions mix through causal attention "
                   "and rope only")
    p.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    add_flags_with_defaults(p, train_settings("max_memory"))
    p.set_defaults(run=run)


def run(args) -> int:
    try:
        with stopping_on_signals():  # SIGTERM and SIGHUP unwind as Ctrl-C does, removing the temporary file
            print(write_export(args.model, args.format, args.out, kv_cache=args.kv_cache, overwrite=args.overwrite,
                               max_memory=args.max_memory))
    except Stopped as exc:
        print(f"microgpt export: stopped by {exc}; no temporary file is left beside {args.out}", file=sys.stderr)
        return 128 + exc.signum
    return 0
