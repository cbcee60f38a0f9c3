"""`microgpt sample MODEL`: generate text from a checkpoint, streamed as it is produced; or, with --fill TEXT, fill
the holes of a text (use/fill.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from microgpt.cli.common import add_flags_with_defaults, train_settings
from microgpt.core.errors import ConfigError
from microgpt.core.fields import settings_fields
from microgpt.settings.commands import SampleSettings
from microgpt.training.run_files import open_own
from microgpt.use.loaded import load
from microgpt.use.speculative import Speculation


def add_parser(commands) -> None:
    p = commands.add_parser("sample", help="generate text from a checkpoint",
                            description=__doc__.split(":", 1)[1].strip())
    p.add_argument("model", metavar="MODEL", help="checkpoint directory (written by microgpt train)")
    add_flags_with_defaults(p, settings_fields(SampleSettings) + train_settings("backend", "threads", "precision",
                                                                                   "max_memory"))
    p.set_defaults(run=run)


SEPARATOR = "\n---\n"  # between samples


def run(args) -> int:
    chosen = SampleSettings(**{f.field: getattr(args, f.key) for f in settings_fields(SampleSettings)})
    out = None if chosen.out is None else Path(chosen.out)
    model = load(args.model, backend=args.backend, threads=args.threads, max_memory=args.max_memory,
                 precision=args.precision)
    if model.backend_note:
        print(model.backend_note, file=sys.stderr)
    if chosen.fill is not None:
        return fill(model, chosen, out)
    model.tokenizer.encode(chosen.prompt, source="the prompt")  # a character outside the vocabulary fails first
    if out is not None:
        check_output_file(out)
    speculation = Speculation() if chosen.speculative else None
    if speculation is not None:
        speculation.decoder_for(model.model)  # a model without draft heads fails before anything is written
    write = (lambda text: None) if out is not None else (lambda text: (sys.stdout.write(text), sys.stdout.flush()))
    samples = []
    for i in range(chosen.num_samples):
        if i:
            write(SEPARATOR)
        text = model.sample(chosen.tokens, prompt=chosen.prompt, temperature=chosen.temperature,
                            seed=chosen.seed + i, top_k=chosen.top_k, top_p=chosen.top_p, cache=chosen.cache,
                            on_text=write, speculative=speculation)
        samples.append(text)
    write("\n")
    if speculation is not None:
        print(speculation.report(), file=sys.stderr)
    if out is not None:
        write_text_file(out, SEPARATOR.join(samples) + "\n")
        print(f"sample: {chosen.num_samples} sample{'s' if chosen.num_samples > 1 else ''} of {chosen.tokens} tokens "
              f"written to {out}", file=sys.stderr)
    return 0


def fill(model, chosen: SampleSettings, out: Path | None) -> int:
    """--fill: the text with its holes filled, printed (or written to --out), and what filled them on stderr."""
    if out is not None:
        check_output_file(out)
    filled = model.fill(chosen.fill, mask=chosen.mask)
    print(f"fill: {filled.used}", file=sys.stderr)
    if out is not None:
        write_text_file(out, filled.text + "\n")
        print(f"sample: the filled text written to {out}", file=sys.stderr)
    else:
        print(filled.text)
    return 0


def check_output_file(path: Path, flag: str = "--out") -> None:
    """Refuse, before any sampling, an --out that is a directory or whose directory cannot take a new file."""
    if path.is_dir():
        raise ConfigError(f"{flag} {path} is a directory; give a file path")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"{flag} {path}: cannot write in {parent} (missing or not writable); give a writable path")


def write_text_file(path: Path, text: str) -> None:
    """`text` into `path`, written beside it first and renamed into place, so a reader never sees half of it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open_own(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        raise ConfigError(f"cannot write {path} ({exc.strerror or exc})") from None
    finally:
        tmp.unlink(missing_ok=True)
