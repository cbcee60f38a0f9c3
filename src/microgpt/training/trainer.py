"""The training loop: steps, validation, checkpoints, logs, and a clean stop.

`Trainer.run` trains a model to `TrainConfig.steps` (a total, so a resumed run
continues to the same target), validates on all of the held-out tokens every
`eval_every` steps (by default as often as keeps validation a bounded share of the
run, validation.py; or every `val_interval` seconds), keeps the best checkpoint, saves
every `save_every` steps and at the end, and writes a JSONL metrics log (on a
resume, first cut back to the checkpoint's step, so a run killed after its last
save leaves no steps that the resumed run repeats). Its speed is given overall and
for training alone (validation and checkpoint writing left out).

It stops cleanly. Ctrl-C (SIGINT), SIGTERM (what a scheduler sends before a
kill), SIGHUP (a closed terminal or ssh session), SIGQUIT and SIGXCPU (a CPU
time limit) finish the step, save and return, with the signal in the summary
(the CLI exits 128 + its number); a signal during a save lets the save finish.
SIGUSR1 and SIGUSR2 save at the end of the current step and training goes on
(a scheduler's "time is nearly up" warning). With several processes the ranks
agree on both inside the next step, so a signal to any one acts on all, and
rank 0 alone saves. In a thread other than the main one, where Python allows
no signal handlers, a run trains without them and says so. Each step's update is the
optimiser's (optim.py: schedule, clipping, Adam or AdamW); its learning rate,
with clipping the gradient norm, and the model's own per-step figures (a
family's loss_and_backward may return some) go into the metrics log, and with
--log tensorboard into event files too (tensorboard_log.py). A NaN or
infinite loss stops before the update; weights that are unsound to save
(checkpoint.WEIGHT_LIMIT) stop the run before the save; so do ranks that do not
reach a step's all-reduce in time (--collective-timeout); either way the last
good checkpoint stays on disk, and the message says which step it holds.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from microgpt.core.errors import (
    HungRanks,
    Named,
    NonFiniteLoss,
    TrainingStopped,
    WriterStopped,
)
from microgpt.core.progress import Progress
from microgpt.core.user_files import bounded_lines, open_regular
from microgpt.model.checkpoint import (
    CheckpointError,
    UnsoundWeights,
    is_checkpoint,
    remove_checkpoint,
    save_checkpoint,
)
from microgpt.model.thread_split import ThreadSplit
from microgpt.parallel.communicator import SingleProcess
from microgpt.settings.training import TrainConfig
from microgpt.training.data_parallel import micro_batch_size, train_step
from microgpt.training.failure import clear_failure, record_failure
from microgpt.training.optim import Optimizer
from microgpt.training.run_files import MAX_LOG_LINE, RunPaths, open_own
from microgpt.training.tensorboard_log import open_board
from microgpt.training.validation import validation_every

TRY_LOWER_LR = (". Try a lower ", Named("lr"), ".")  # a stop's last words: the fix a diverged run most often needs


@dataclass
class RunSummary:
    steps: int  # the step counter at the end
    steps_run: int  # steps taken in this run
    final_loss: float
    val_loss: float | None
    best_val_loss: float | None
    seconds: float
    tokens_per_sec: float
    checkpoint: Path | None
    stop_signal: int | None = None  # SIGINT or SIGTERM when a signal stopped the run
    training_tokens_per_sec: float | None = None  # training alone: validation and checkpoint writing left out
    losses: list[float] = field(default_factory=list, repr=False)  # each step's: left out of the one-line repr
    metrics: dict[str, float] = field(default_factory=dict)  # the model's own figures at the last step
    blas: str | None = None  # the float32 products' library, where the backend chooses one (backends/blas.py)
    precision: str = "fp32"  # of the products' inputs

    @property
    def interrupted(self) -> bool:
        return self.stop_signal is not None


class Trainer:
    """Trains a model of any family (model/family.py) named `family_name`, saved with its tokenizer."""

    def __init__(self, model, family_name: str, tokenizer, batches, val_tokens: np.ndarray | None,
                 config: TrainConfig, paths: RunPaths, progress: Progress, run_info: dict, comm=None):
        self.model, self.family_name, self.tokenizer, self.batches = model, family_name, tokenizer, batches
        self.comm = comm or SingleProcess()  # the processes training this model; rank 0 alone writes
        self.val_tokens, self.config, self.paths, self.progress = val_tokens, config, paths, progress
        self.run_info = run_info  # corpus and flags, kept in train_state.json
        self.optimizer = Optimizer(model.params, config)
        self.threads = ThreadSplit(model)  # each batch split over the backend's threads, for every family
        self.best_val_loss: float | None = run_info.get("best_val_loss")
        if val_tokens is not None:
            self._val_windows = validation_windows(val_tokens, model.config.seq_len)
            self._val_batch = micro_batch_size(config.batch_size, config.grad_accum, self.comm.size)
        self._stop_signal: int | None = None
        self._save_signal: int | None = None  # a save asked for by SIGUSR1/SIGUSR2, until it is done
        # the step the checkpoint on disk holds: a resumed model's step, or none yet
        self._saved_step: int | None = step_on_disk(paths.checkpoint)  # the checkpoint a failure leaves
        self._staged_log: Path | None = None  # a new run's log while the old checkpoint's log is still in place
        # a new run over an old checkpoint: the old run's -best, until this run saves its own or replaces the
        # checkpoint (a run owns its -best; an older model's must not stay beside it)
        self._old_best = model.params.step == 0 and paths.best is not None and is_checkpoint(paths.best)
        self._time_offset = 0.0  # seconds the resumed run's log had already counted

    def train_state(self) -> dict:
        return {**self.run_info, "step": self.model.params.step, "data": self.batches.state(),
                "best_val_loss": self.best_val_loss}

    def save(self, directory: Path | None) -> None:
        if directory is None:
            return
        try:
            save_checkpoint(directory, self.model, self.tokenizer, self.train_state(), family_name=self.family_name)
        except UnsoundWeights as exc:
            stopped = WriterStopped(f"training stopped at step {self.model.params.step}: {exc}; ", *self._kept(),
                                    *TRY_LOWER_LR)
            if directory == self.paths.checkpoint and self._saved_step is not None:
                record_failure(self.paths.failure, self.model.params.step, self._saved_step, str(stopped))
            raise stopped from None
        if directory == self.paths.checkpoint:
            self._saved_step = self.model.params.step
            clear_failure(self.paths.failure)
            if self._staged_log is not None:  # the new checkpoint is in place: its log replaces the old one
                os.replace(self._staged_log, self.paths.metrics)
                self._staged_log = None
            if self._old_best:
                remove_checkpoint(self.paths.best)
                self._old_best = False
        elif directory == self.paths.best:
            self._old_best = False

    def validation_loss(self) -> float:
        """Mean loss over every held-out window, a micro-batch of windows per forward pass (the memory cap
        was checked for a micro-batch's training step, which needs more)."""
        windows, batch = self._val_windows, self._val_batch
        chunks = [windows[i : i + batch] for i in range(0, len(windows), batch)]
        return sum(self.threads.loss(chunk) * len(chunk) for chunk in chunks) / len(windows)

    def run(self) -> RunSummary:
        cfg, params = self.config, self.model.params
        first_step = params.step
        tokens_per_step = cfg.batch_size * self.model.config.seq_len
        validate_every = validation_every(cfg, self.model.config.seq_len)
        losses: list[float] = []
        last_metrics: dict[str, float] = {}
        val_loss = None
        start = last_val = time.perf_counter()
        aside = 0.0  # seconds of validation and checkpoint writing, which the training-alone rate leaves out
        self.progress.start(total=cfg.steps, initial=first_step)
        previous_handlers = self._install_handlers()
        stopping = False
        try:
            with self._metrics_log(first_step) as metrics, open_board(self.paths.tensorboard, first_step) as board:
                # one process stops at once; several agree on a stop inside the next step, then all stop
                while params.step < cfg.steps and not stopping and not (self.comm.size == 1 and self._stop_signal):
                    result = self._step()
                    loss, stopping, save_now = result.loss, result.stop, result.save
                    losses.append(loss)
                    last_metrics = result.metrics
                    step, now = params.step, time.perf_counter()
                    record = self._record(result, step, round(self._time_offset + now - start, 4))
                    if self._validation_due(step, validate_every, now - last_val):
                        val_loss, last_val = self._validate(), time.perf_counter()
                        record["val_loss"], aside = val_loss, aside + last_val - now
                    if metrics:
                        self._write_metric(metrics, record)
                    if board:  # --log tensorboard: the same figures, and the speed the progress shows
                        board.write(record, tokens_per_step * len(losses) / (time.perf_counter() - start))
                    aside += self._save_when_due(step, save_now)
                    elapsed = time.perf_counter() - start
                    parts = {key.removesuffix("_loss"): value for key, value in result.metrics.items()
                             if key.endswith("_loss")}  # a lookahead model's heads
                    self.progress.update(step, loss, val_loss, tokens_per_step * len(losses) / elapsed, parts,
                                         training_rate(tokens_per_step * len(losses), elapsed - aside))
            self.progress.close()
            seconds = time.perf_counter() - start
            if stopping and self._stop_signal is None:
                self._stop_signal = signal.SIGTERM  # another process was told to stop (its launcher's signal)
            if self._stop_signal is not None or losses:
                self.save(self.paths.checkpoint)  # the handlers stay, so a signal now lets this save finish
        finally:
            self.progress.close()
            for sig, handler in previous_handlers.items():
                signal.signal(sig, handler)
            if self._staged_log is not None:  # never saved: the old checkpoint keeps its own log
                self._staged_log.unlink(missing_ok=True)
        return RunSummary(
            steps=params.step, steps_run=len(losses), final_loss=losses[-1] if losses else math.nan,
            val_loss=val_loss, best_val_loss=self.best_val_loss, seconds=seconds,
            tokens_per_sec=tokens_per_step * len(losses) / seconds if seconds > 0 else 0.0,
            checkpoint=self.paths.checkpoint, stop_signal=self._stop_signal, losses=losses, metrics=last_metrics,
            training_tokens_per_sec=training_rate(tokens_per_step * len(losses), seconds - aside),
            blas=self.model.be.blas, precision=self.model.be.precision,
        )

    def _validation_due(self, step: int, validate_every: int | None, since_last: float) -> bool:
        """Whether to validate after `step`: every `validate_every` steps, or where that is unset every
        --val-interval seconds (`since_last`: seconds since the last pass), and after the last step."""
        if self.val_tokens is None:
            return False
        due = step % validate_every == 0 if validate_every else since_last >= self.config.val_interval
        return due or step == self.config.steps

    def _save_when_due(self, step: int, save_now: bool) -> float:
        """Save the checkpoint after `step` where --save-every or a save signal (`save_now`) asks for it, except
        after the last step, which run() saves once it ends; the seconds the save took, which the
        training-alone rate leaves out."""
        seconds = 0.0
        if step < self.config.steps and (save_now or (self.config.save_every and step % self.config.save_every == 0)):
            saving = time.perf_counter()
            self.save(self.paths.checkpoint)
            seconds = time.perf_counter() - saving
        if save_now:
            self._save_signal = None
        return seconds

    def _step(self):
        """One optimiser step over the next batch (data_parallel.train_step), its failures said in one line. A
        stop asked in any process ends the loop in every one, after the same step; a diverging step's overflow
        warnings are left unsaid: the checks name it once."""
        windows = self.batches.next()
        try:
            with np.errstate(over="ignore", invalid="ignore"):
                return train_step(self.threads, windows, self.optimizer, self.comm, self.config.grad_accum,
                                  self._stop_signal is not None, self._save_signal is not None)
        except NonFiniteLoss as exc:
            stopped = TrainingStopped(f"training stopped: {exc}; ", *self._kept(), *TRY_LOWER_LR)
            if self.comm.is_writer and self._saved_step is not None:
                record_failure(self.paths.failure, exc.step, self._saved_step, str(stopped))
            raise stopped from None
        except HungRanks as exc:  # no save: the checkpoint on disk stays the last whole one
            kept = self._kept() if self.comm.is_writer else ("the checkpoint on disk is the last one saved",)
            raise exc.adding(*kept) from None

    @staticmethod
    def _record(result, step: int, seconds: float) -> dict:
        """A step's line of the metrics log: the model's own figures, then the trainer's keys, which win."""
        record = {**result.metrics, "step": step, "loss": result.loss, "time": seconds, "lr": result.update.lr}
        if result.update.grad_norm is not None:
            record["grad_norm"] = result.update.grad_norm
        return record

    def _kept(self) -> tuple:
        """What is on disk after a stop, truthfully: a message's parts."""
        if self.paths.checkpoint is None:
            return "nothing was saved (", Named("save", False), ")"
        if self._saved_step is None:
            return ("no checkpoint had been saved yet",)
        return (f"the checkpoint at {self.paths.checkpoint} (step {self._saved_step}) was kept as it was",)

    def _metrics_log(self, first_step: int):
        """The JSONL metrics file, or no log with --no-save. A resumed run keeps the records up to its
        checkpoint's step and adds to them (its times continuing from theirs). A new run starts a log; where it
        replaces a checkpoint, it writes `<log>.new` until its first save, so a run that fails before then
        leaves the old checkpoint's log as it was."""
        path = self.paths.metrics
        if path is None:
            return contextlib.nullcontext()
        try:
            if first_step > 0 and path.exists():
                # copied a line at a time (one past MAX_LOG_LINE is left out: a log of zeros is never held whole);
                # a byte that is not UTF-8 (a damaged line) becomes U+FFFD, and that line is dropped as unreadable
                tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
                last = None
                try:
                    with open_regular(path) as log, open_own(tmp, "w") as cut:
                        for raw in bounded_lines(log, MAX_LOG_LINE):
                            line = raw.decode("utf-8", errors="replace").rstrip("\n")
                            step = _record_step(line)
                            if step is not None and step <= first_step:
                                cut.write(line + "\n")
                                last = line
                    os.replace(tmp, path)
                finally:
                    tmp.unlink(missing_ok=True)
                self._time_offset = json.loads(last).get("time", 0.0) if last is not None else 0.0
            if first_step == 0 and self._saved_step is not None and path.exists():
                self._staged_log = path.with_name(path.name + ".new")
                return open_own(self._staged_log, "w")
            return open_own(path, "a" if first_step > 0 else "w")
        except OSError as exc:
            raise CheckpointError(f"cannot write {exc.filename or path} ({exc.strerror or exc}); {self._kept()}") from None

    def _write_metric(self, metrics, record: dict) -> None:
        try:
            metrics.write(json.dumps(record) + "\n")
            metrics.flush()
        except OSError as exc:
            raise CheckpointError(f"cannot write {self.paths.metrics} ({exc.strerror or exc}); {self._kept()}") from None

    def _validate(self) -> float:
        val_loss = self.validation_loss()
        if self.best_val_loss is None or val_loss < self.best_val_loss:
            self.best_val_loss = val_loss
            self.save(self.paths.best)
        return val_loss

    def _install_handlers(self) -> dict:
        """The stop and save handlers, in place of the ones before (returned, to be put back). Python runs
        handlers only in the main thread: elsewhere there are none, and one line says so."""
        if threading.current_thread() is not threading.main_thread():
            print("note: training outside the main thread, where Python allows no signal handlers: Ctrl-C and "
                  "SIGTERM will not save a checkpoint; --save-every N saves as it goes", file=sys.stderr)
            return {}
        handlers = {sig: signal.signal(sig, self._request_stop) for sig in STOP_SIGNALS}
        handlers.update({sig: signal.signal(sig, self._request_save) for sig in SAVE_SIGNALS})
        return handlers

    def _request_save(self, signum, frame) -> None:
        if self._save_signal is None and self._stop_signal is None and self.comm.is_writer:
            print(f"\n{signal.Signals(signum).name}: saving a checkpoint after this step, then training on",
                  file=sys.stderr, flush=True)
        self._save_signal = signum

    def _request_stop(self, signum, frame) -> None:
        if self._stop_signal is not None:
            if signum == signal.SIGINT:  # a second Ctrl-C: stop now, the checkpoint on disk is untouched
                raise KeyboardInterrupt
            return  # already stopping; a repeated SIGTERM waits for the save like the first
        self._stop_signal = signum
        if self.comm.is_writer:
            name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
            again = " (Ctrl-C again to quit without saving)" if signum == signal.SIGINT else ""
            print(f"\n{name}: stopping after this step and saving a checkpoint{again}", file=sys.stderr, flush=True)


STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGXCPU")
                     if hasattr(signal, name))  # save, then exit with 128 + the signal
SAVE_SIGNALS = tuple(getattr(signal, name) for name in ("SIGUSR1", "SIGUSR2") if hasattr(signal, name))  # save, go on


def training_rate(tokens: int, seconds: float) -> float | None:
    """Tokens per second of training alone, from the run's seconds less those of validation and checkpoints."""
    return tokens / seconds if seconds > 0 else None


def validation_windows(val_tokens: np.ndarray, seq_len: int) -> np.ndarray:
    """Every non-overlapping window of seq_len + 1 in the held-out tokens, so each held-out token but the
    first (and a remainder shorter than seq_len at the end) is a target once: (count, seq_len + 1)."""
    starts = range(0, len(val_tokens) - seq_len, seq_len)
    return np.stack([val_tokens[s : s + seq_len + 1] for s in starts])


def step_on_disk(checkpoint: Path | None) -> int | None:
    """The step of the checkpoint saved at `checkpoint`, or None when there is none there."""
    if checkpoint is None:
        return None
    try:
        step = json.loads((checkpoint / "train_state.json").read_text(encoding="utf-8")).get("step")
    except (OSError, ValueError, AttributeError, RecursionError):
        return None
    return step if isinstance(step, int) else None


def _record_step(line: str) -> int | None:
    """The step of one metrics line, or None for a line that is not a whole record (cut short by a kill)."""
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):  # cut short, or a number or nesting past what Python reads
        return None
    step = record.get("step") if isinstance(record, dict) else None
    return step if isinstance(step, int) else None
