"""`microgpt.train`: a whole run from Python in one call, as `microgpt train` runs it.

    import microgpt
    run, summary = microgpt.train("input.txt", steps=2000, d_model=128, batch_size=16)
    print(run.sample(200))
"""

from __future__ import annotations

from pathlib import Path

from microgpt.core.progress import Progress
from microgpt.parallel.communicator import communicator
from microgpt.settings.sources import Settings, known_settings
from microgpt.training.prepare import prepare, start
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
        with comm.preparing_together("microgpt.train"):  # a set-up error in any rank: each raises, none trains
            chosen = Settings(settings, keywords=True)
            backend, _ = start(chosen, comm)
            place = None if resume is None else resume if resume == RESUME_AUTO else Path(resume)
            run = prepare(chosen, backend, place, save, init_from=None if init_from is None else Path(init_from),
                          overwrite=overwrite)
        with run:
            summary = run.train(Progress(quiet=not progress))
            run.finish(summary)
    return run, summary


def settings_listing() -> str:
    """Every setting `train` takes as a keyword, with its default, a line each (for `help(microgpt.train)`)."""
    return "\n".join(f"    {f.key}={f.default_text}" for f in known_settings().values())


train.__doc__ += "\n\n    The settings, by keyword (default):\n" + settings_listing()
