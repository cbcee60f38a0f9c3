"""A training run, ready to train (`Run`); what it trains on is corpus.py's `Corpus`.

plan.py makes a `Run` from the resolved settings; `Run.train` runs the
`Trainer` (trainer.py), and `Run.finish` appends the results line beside the
checkpoint and draws the loss plot. `Run.sample` continues a text from the
trained model, for the CLI's sample after training and for Python
(`run, summary = microgpt.train(...); run.sample(200)`, api.py).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from microgpt.core import machine
from microgpt.core.progress import Progress
from microgpt.data.batches import RandomBatches, SequentialBatches
from microgpt.data.corpus import Corpus
from microgpt.data.tokenizer import Tokenizer
from microgpt.model.checkpoint import CheckpointError
from microgpt.model.family import config_dict, family
from microgpt.parallel.communicator import SingleProcess
from microgpt.settings.training import TrainConfig
from microgpt.training.plot import plot_available, write_loss_plot
from microgpt.training.run_dir import WriterLock
from microgpt.training.run_files import RunPaths, open_own
from microgpt.training.trainer import RunSummary, Trainer
from microgpt.use.sample import generate


@dataclass
class Run:
    """One training run, ready to train: the model, its data, its settings and where it writes."""

    model: object  # a model of the family `family_name` (model/family.py)
    family_name: str
    tokenizer: Tokenizer
    corpus: Corpus
    batches: SequentialBatches | RandomBatches
    val_tokens: np.ndarray | None
    train_config: TrainConfig
    paths: RunPaths
    run_info: dict
    label: str | None  # the run id or spec, for results.jsonl and the plot title
    resumed: bool = False
    comm: object = SingleProcess()  # the processes training this model (parallel/communicator.py)
    lock: WriterLock | None = None  # held on the checkpoint directory while the run lives
    notes: list[str] = field(default_factory=list)  # settings of a resume that override the checkpoint's
    done: bool = False  # --resume auto of a checkpoint already at its --steps: nothing to train or write
    held_out_by: str = "--val-tokens"  # who set how much text is held out, for the lines about it

    def __enter__(self) -> Run:  # noqa: PYI034 - typing.Self needs Python 3.11
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        """Release the checkpoint directory for other runs."""
        if self.lock is not None:
            self.lock.release()

    def train(self, progress: Progress | None = None) -> RunSummary:
        if self.done:
            return RunSummary(steps=self.model.params.step, steps_run=0, final_loss=math.nan, val_loss=None,
                              best_val_loss=self.run_info.get("best_val_loss"), seconds=0.0, tokens_per_sec=0.0,
                              checkpoint=self.paths.checkpoint)
        progress = progress or Progress(quiet=True)
        trainer = Trainer(self.model, self.family_name, self.tokenizer, self.batches, self.val_tokens,
                          self.train_config, self.paths, progress, self.run_info, self.comm)
        return trainer.run()

    def finish(self, summary: RunSummary) -> Path | None:
        """After a run that saved a checkpoint: one line in results.jsonl beside it, and the loss plot where
        matplotlib is installed. Returns the plot's path, or None when none was drawn."""
        if summary.checkpoint is None or summary.steps_run == 0:
            return None
        png = self.paths.loss_plot
        try:
            self._log_result(summary)
            if not plot_available():
                return None
            title = (f"{self.label or summary.checkpoint.name}: {self.description}, "
                     f"{self.model.n_params:,} parameters")
            return write_loss_plot(self.paths.metrics, png, title)
        except OSError as exc:
            raise CheckpointError(f"cannot write {exc.filename or png} ({exc.strerror or exc}); the checkpoint at "
                                  f"{summary.checkpoint} was saved") from None

    @property
    def description(self) -> str:
        """The model in one line, as its family describes it."""
        return family(self.family_name).describe(self.model.config)

    def sample(self, n_tokens: int, prompt: str = "", temperature: float = 0.8, seed: int | None = None,
               on_text=None) -> str:
        """n_tokens tokens of text from the trained model (the run's seed unless one is given)."""
        seed = self.train_config.seed if seed is None else seed
        return generate(self.model, self.tokenizer, prompt, n_tokens, temperature=temperature, seed=seed,
                        on_text=on_text)

    def _log_result(self, summary: RunSummary) -> None:
        """One line in results.jsonl beside a saved checkpoint: what was trained, how long, and how well."""
        tc = self.train_config
        record = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "run": self.label, "family": self.family_name,
            "model": self.description, "config": config_dict(self.model.config), "tokenizer": self.tokenizer.kind,
            "parameters": self.model.n_params, "steps": summary.steps,
            "steps_run": summary.steps_run, "batch_size": tc.batch_size, "grad_accum": tc.grad_accum,
            "processes": self.comm.size, "lr": tc.lr,
            "final_loss": summary.final_loss, "val_loss": summary.val_loss, "best_val_loss": summary.best_val_loss,
            "seconds": round(summary.seconds, 3), "tokens_per_sec": round(summary.tokens_per_sec, 1),
            "training_tokens_per_sec": (None if summary.training_tokens_per_sec is None
                                        else round(summary.training_tokens_per_sec, 1)),
            "backend": self.model.be.name, "blas": summary.blas, "precision": summary.precision,
            "machine": machine.describe(), "checkpoint": str(summary.checkpoint),
            "interrupted": summary.interrupted,
        }
        with open_own(self.paths.results, "a") as log:
            log.write(json.dumps(record) + "\n")
