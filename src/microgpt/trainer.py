"""The training loop: steps, validation, checkpoints, logs, and a clean stop.

`Trainer.run` trains a model to `TrainConfig.steps` (a total, so a resumed run
continues to the same target), validates on held-out tokens every
`val_interval` seconds or `eval_every` steps, keeps the best checkpoint, saves
every `save_every` steps and at the end, and writes a JSONL metrics log. It
stops cleanly: Ctrl-C saves a checkpoint first; a NaN or infinite loss stops at
once and leaves the last good checkpoint as it was.
"""

from __future__ import annotations

import contextlib
import json
import math
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from microgpt.checkpoint import save_checkpoint
from microgpt.config import TrainConfig
from microgpt.data_parallel import train_step
from microgpt.distributed import SingleProcess
from microgpt.model import GPT, NonFiniteLoss
from microgpt.progress import Progress

VAL_MAX_WINDOWS = 64  # validation uses at most this many windows of seq_len + 1


class TrainingStopped(RuntimeError):
    """Training stopped early (a non-finite loss); the message says why and what was kept."""


@dataclass
class RunPaths:
    """Where a run writes: the checkpoint directory and the files beside it."""

    checkpoint: Path | None  # None with --no-save

    @property
    def best(self) -> Path | None:
        return None if self.checkpoint is None else self.checkpoint.with_name(self.checkpoint.name + "-best")

    @property
    def metrics(self) -> Path | None:
        return None if self.checkpoint is None else self.checkpoint.with_name(self.checkpoint.name + ".metrics.jsonl")


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
    interrupted: bool = False
    losses: list[float] = field(default_factory=list)


class Trainer:
    def __init__(self, model: GPT, vocab: str, batches, val_tokens: np.ndarray | None, config: TrainConfig,
                 paths: RunPaths, progress: Progress, run_info: dict, comm=None):
        self.model, self.vocab, self.batches = model, vocab, batches
        self.comm = comm or SingleProcess()  # the processes training this model; rank 0 alone writes
        self.val_tokens, self.config, self.paths, self.progress = val_tokens, config, paths, progress
        self.run_info = run_info  # corpus and flags, kept in train_state.json
        self.best_val_loss: float | None = run_info.get("best_val_loss")
        if val_tokens is not None:  # up to VAL_MAX_WINDOWS non-overlapping windows of seq_len + 1, made once
            seq_len = model.config.seq_len
            count = min(VAL_MAX_WINDOWS, (len(val_tokens) - 1) // seq_len)
            self._val_windows = np.stack([val_tokens[s : s + seq_len + 1] for s in range(0, count * seq_len, seq_len)])
        self._stop_requested = False

    def train_state(self) -> dict:
        return {**self.run_info, "step": self.model.params.step, "data": self.batches.state(),
                "best_val_loss": self.best_val_loss}

    def save(self, directory: Path | None) -> None:
        if directory is not None:
            save_checkpoint(directory, self.model, self.vocab, self.train_state())

    def validation_loss(self) -> float:
        """Mean loss over the held-out windows, batch_size windows per forward."""
        windows, batch = self._val_windows, self.config.batch_size
        chunks = [windows[i : i + batch] for i in range(0, len(windows), batch)]
        return sum(self.model.loss(chunk) * len(chunk) for chunk in chunks) / len(windows)

    def run(self) -> RunSummary:
        cfg, params = self.config, self.model.params
        first_step = params.step
        tokens_per_step = cfg.batch_size * self.model.config.seq_len
        losses: list[float] = []
        val_loss = None
        start = last_val = time.perf_counter()
        self.progress.start(total=cfg.steps, initial=first_step)
        if self.paths.checkpoint is not None:
            self.paths.checkpoint.parent.mkdir(parents=True, exist_ok=True)
        stopping = False
        previous_handler = signal.signal(signal.SIGINT, self._request_stop)
        previous_term = signal.signal(signal.SIGTERM, self._request_stop)  # a scheduler's or mpiexec's stop
        try:
            with self._metrics_log(resumed=first_step > 0) as metrics:
                while params.step < cfg.steps and not stopping:
                    windows = self.batches.next()
                    try:
                        # a stop asked in any process ends the loop in every one, after the same step
                        loss, stopping = train_step(self.model, windows, cfg.lr, self.comm, cfg.grad_accum,
                                                    self._stop_requested)
                    except NonFiniteLoss as exc:
                        kept = (f"the checkpoint at {self.paths.checkpoint} was left as it was"
                                if self.paths.checkpoint else "nothing was saved")
                        raise TrainingStopped(f"training stopped: {exc}; {kept}. Try a lower --lr.") from None
                    losses.append(loss)
                    step, now = params.step, time.perf_counter()
                    record = {"step": step, "loss": loss, "time": round(now - start, 4)}
                    due_by_steps = cfg.eval_every and step % cfg.eval_every == 0
                    due_by_time = not cfg.eval_every and now - last_val >= cfg.val_interval
                    if self.val_tokens is not None and (due_by_steps or due_by_time or step == cfg.steps):
                        val_loss, last_val = self._validate(), time.perf_counter()
                        record["val_loss"] = val_loss
                    if metrics:
                        metrics.write(json.dumps(record) + "\n")
                        metrics.flush()
                    if cfg.save_every and step % cfg.save_every == 0 and step < cfg.steps:
                        self.save(self.paths.checkpoint)
                    elapsed = time.perf_counter() - start
                    self.progress.update(step, loss, val_loss, tokens_per_step * len(losses) / elapsed)
        finally:
            signal.signal(signal.SIGINT, previous_handler)
            signal.signal(signal.SIGTERM, previous_term)
            self.progress.close()
        seconds = time.perf_counter() - start
        if stopping or losses:
            self.save(self.paths.checkpoint)
        return RunSummary(
            steps=params.step, steps_run=len(losses), final_loss=losses[-1] if losses else math.nan,
            val_loss=val_loss, best_val_loss=self.best_val_loss, seconds=seconds,
            tokens_per_sec=tokens_per_step * len(losses) / seconds if seconds > 0 else 0.0,
            checkpoint=self.paths.checkpoint, interrupted=stopping, losses=losses,
        )

    def _metrics_log(self, resumed: bool):
        """The JSONL metrics file (a resumed run adds to its log, a new run starts one), or no log with --no-save."""
        if self.paths.metrics is None:
            return contextlib.nullcontext()
        return open(self.paths.metrics, "a" if resumed else "w", encoding="utf-8")

    def _validate(self) -> float:
        val_loss = self.validation_loss()
        if self.best_val_loss is None or val_loss < self.best_val_loss:
            self.best_val_loss = val_loss
            self.save(self.paths.best)
        return val_loss

    def _request_stop(self, signum, frame) -> None:
        if self._stop_requested:  # a second Ctrl-C: stop now, the checkpoint on disk is untouched
            raise KeyboardInterrupt
        self._stop_requested = True
        if self.comm.is_writer:
            print("\nstopping after this step and saving a checkpoint (Ctrl-C again to quit without saving)",
                  file=sys.stderr, flush=True)
