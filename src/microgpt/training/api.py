"""`microgpt.train`: a whole run from Python in one call, as `microgpt train` runs it; `microgpt.plan`: its dry
run, what the same call would train, planned by the same function (training/plan.py) and nothing built.

    import microgpt
    print("\n".join(microgpt.plan("input.txt", steps=2000, d_model=128).describe()))
    run, summary = microgpt.train("input.txt", steps=2000, d_model=128, batch_size=16)
    print(run.sample(200))

An error names each setting as Python does (`lr=0.5`, `save=False`): the error carries its settings as data
(core/errors.py), worded as keywords (core/errors.py `in_python_words`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from microgpt.core.errors import as_keyword, in_python_words, said
from microgpt.core.progress import Progress
from microgpt.parallel.communicator import communicator
from microgpt.settings.sources import Settings, known_settings
from microgpt.training.plan import Plan, plan_run, start
from microgpt.training.plan import plan as plan_of
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
    every rank (parallel/mpi.py). `microgpt.plan` takes the same arguments and trains nothing."""
    comm = communicator()
    with comm.failing_together("microgpt.train"):  # under mpiexec, an error in any rank ends every rank
        with comm.preparing_together("microgpt.train"), in_python_words():  # a set-up error in any rank: each
            chosen = settings_of(file, settings)  # raises, none trains
            backend, _ = start(chosen, comm)
            run = plan_run(chosen, backend, resume_of(resume), save, init_from=path_or_none(init_from),
                           overwrite=overwrite)
            run.notes = [said(note, as_keyword) for note in run.notes]  # in Python's words
        with run, in_python_words():  # a stop, too, in Python's words
            summary = run.train(Progress(quiet=not progress))
            run.finish(summary)
    return run, summary


def plan(file: str | None = None, *, resume: str | Path | None = None, init_from: str | Path | None = None,
         save: bool = True, overwrite: bool = False, **settings) -> Plan:
    """The dry run of `microgpt.train` with the same arguments: every setting resolved and every check that needs
    no training made, as train makes them, and nothing built or written. `.describe()` says what would be
    trained, a line each (as `microgpt train --dry-run` prints it)."""
    with in_python_words():
        chosen = settings_of(file, settings)
        backend, _ = start(chosen)
        planned = plan_of(chosen, backend, resume_of(resume), save, init_from=path_or_none(init_from),
                          overwrite=overwrite)
    return dataclasses.replace(planned, words=as_keyword)  # its notes in Python's words


def settings_of(file, settings: dict) -> Settings:
    """The keyword settings, with `file`."""
    return Settings({**settings, "file": str(file)} if file is not None else settings)


def resume_of(resume) -> Path | str | None:
    return None if resume is None else resume if resume == RESUME_AUTO else Path(resume)


def path_or_none(value) -> Path | None:
    return None if value is None else Path(value)


def settings_listing() -> str:
    """Every setting `train` takes as a keyword, with its default, a line each (for `help(microgpt.train)`)."""
    return "\n".join(f"    {f.key}={f.default_text}" for f in known_settings().values())


train.__doc__ += "\n\n    The settings, by keyword (default):\n" + settings_listing()
