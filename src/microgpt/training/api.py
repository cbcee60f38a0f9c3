"""`microgpt.train`: a whole run from Python in one call, as `microgpt train` runs it.

    import microgpt
    run, summary = microgpt.train("input.txt", steps=2000, d_model=128, batch_size=16)
    print(run.sample(200))
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path

from microgpt.core.errors import ConfigError, DataError
from microgpt.core.progress import Progress
from microgpt.parallel.communicator import communicator
from microgpt.settings.sources import Settings, known_settings
from microgpt.training.plan import plan_run, start
from microgpt.training.resolve import RESUME_AUTO
from microgpt.training.run import Run
from microgpt.training.trainer import RunSummary


def train(file: str | None = None, *, resume: str | Path | None = None, init_from: str | Path | None = None,
          save: bool = True, progress: bool = False, overwrite: bool = False, **settings) -> tuple[Run, RunSummary]:
    """Train from Python: `file` (default: the bundled Python docs) and any settings by their keys
    (steps=500, d_model=128, heads="8,8,16,32", backend="numpy", model="checkpoints/mine", ...); `resume`
    (a checkpoint, or "auto"), `init_from` and `overwrite` as the flags do; `progress` shows the progress bar
    (or lines) on stderr. Returns the run (its model, tokenizer and `sample`) and its summary (no steps run
    where resume="auto" found its checkpoint finished); writes what the CLI writes. Under an MPI launcher every
    rank calls it, and one rank's error ends them all, as with the CLI: one found while setting up raises in
    rank 0 (the others exit with status 2), one while training prints one line naming the rank and aborts
    every rank (parallel/mpi.py)."""
    if file is not None:
        settings["file"] = str(file)
    comm = communicator()
    with comm.failing_together("microgpt.train"):  # under mpiexec, an error in any rank ends every rank
        with comm.preparing_together("microgpt.train"), speaking_python():  # a set-up error in any rank: each
            chosen = Settings(settings, keywords=True)  # raises, none trains
            backend, _ = start(chosen, comm)
            place = None if resume is None else resume if resume == RESUME_AUTO else Path(resume)
            run = plan_run(chosen, backend, place, save, init_from=None if init_from is None else Path(init_from),
                          overwrite=overwrite)
        with run:
            summary = run.train(Progress(quiet=not progress))
            run.finish(summary)
    return run, summary


# The invocation flags as train's keywords name them (the settings' flags are their keys with dashes).
INVOCATION_KEYWORDS = {"--no-save": "save=False", "--overwrite": "overwrite=True", "--resume": "resume",
                       "--init-from": "init_from", "--quiet": "progress=False"}
FLAG = re.compile(r"(--[a-z][a-z0-9-]*)(?: (\d[\w.,]*))?")  # a flag, with the number after it if one is


@contextlib.contextmanager
def speaking_python() -> Iterator[None]:
    """A ConfigError or DataError of setting up, its flags named as train's keywords (in_keywords)."""
    try:
        yield
    except (ConfigError, DataError) as exc:
        raise type(exc)(in_keywords(str(exc))) from None


def in_keywords(message: str) -> str:
    """A message as Python names things: `--warmup 500` as `warmup=500`, `--lr-schedule` as `lr_schedule`,
    `--no-random-batches` as `random_batches=False`, `--no-save` as `save=False`; other words are left."""
    known = known_settings()

    def spell(match: re.Match) -> str:
        flag, number = match.group(1), match.group(2)
        if flag in INVOCATION_KEYWORDS:
            return INVOCATION_KEYWORDS[flag] + (f" {number}" if number else "")
        key = flag[2:].replace("-", "_")
        if key.startswith("no_") and key[3:] in known:
            return f"{key[3:]}=False"
        if key not in known:
            return match.group(0)
        return f"{key}={number}" if number else key

    return FLAG.sub(spell, message)


def settings_listing() -> str:
    """Every setting `train` takes as a keyword, with its default, a line each (for `help(microgpt.train)`)."""
    return "\n".join(f"    {f.key}={f.default_text}" for f in known_settings().values())


train.__doc__ += "\n\n    The settings, by keyword (default):\n" + settings_listing()
