"""Every run under a folder, a row each: what `microgpt runs` prints and what the studio's Compare lists.

`find_checkpoints` walks a folder (at most SCAN_DEPTH levels down, never through a link, no hidden
directories) for checkpoint directories. `run_rows` gives each one a row: its family, description, tokenizer
and parameter count (from config.json), its step of its steps, best and last validation loss, tokens/s and the
machine (from the latest line of the results.jsonl beside it), the losses in held-out bits per character (what
compares across tokenizers: `bits_per_char`), and its status: training (a process holds
its writer lock), finished, failed (it stopped short on an unsound step, training/failure.py), unfinished,
unknown (its training state records no readable --steps) or damaged (a file that cannot be read, which
marks its own row and never fails the list; a config.json or train_state.json that is a pipe, a device or
unreadable is opened, never read, and one that is not JSON is named with its parse error: its checkpoint is
listed so, where it would vanish). A run's `-best` copy
is folded into the run's row (where and when it was best); a `-best` left alone by a run killed before its
first save keeps a row of its own.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from microgpt.core.errors import ConfigError
from microgpt.core.user_files import bounded_lines, open_regular
from microgpt.model.checkpoint import (
    CONFIG,
    FILES,
    TRAIN_STATE,
    WEIGHTS,
    CheckpointError,
    is_checkpoint,
    read_config,
    read_small,
    state_step,
)
from microgpt.model.family import family, n_params
from microgpt.training.failure import failure_of
from microgpt.training.run_dir import WriterLock
from microgpt.training.run_files import MAX_LOG_LINE, RESULTS_LOG, RunPaths
from microgpt.use.evaluate import Evaluation

SCAN_DEPTH = 3  # directories below a folder searched for checkpoints
DAMAGE = (TypeError, ValueError, AttributeError, KeyError, RecursionError, OSError)  # what a hand-edited file raises


def find_checkpoints(root: Path, refused: Callable[[Path], bool] = lambda path: False) -> list[Path]:
    """Every checkpoint directory under `root`, and every directory `refused` names (listed, never read)."""
    found, level = [], [root]
    for _ in range(SCAN_DEPTH):
        below = []
        for directory in level:
            try:
                entries = sorted(os.scandir(directory), key=lambda e: e.name)
            except OSError:
                continue
            for entry in entries:
                if entry.name.startswith(".") or not entry.is_dir(follow_symlinks=False):
                    continue
                path = Path(entry.path)
                (found if is_listed(path, refused) else below).append(path)
        level = below
    return found


def is_listed(path: Path, refused: Callable[[Path], bool]) -> bool:
    """Whether find_checkpoints lists a directory: one `refused` names, one of a checkpoint's files whose JSON
    cannot be opened or is not JSON (a damaged row, not a run that vanishes; asked first, so nothing reads a
    pipe), and one microgpt wrote."""
    return refused(path) or (checkpoint_files(path) and unreadable(path, str) is not None) or is_checkpoint(path)


def checkpoint_files(directory: Path) -> bool:
    """Whether a directory holds a checkpoint's weights and config.json, and nothing but a checkpoint's files."""
    try:
        names = {entry.name for entry in os.scandir(directory)}
    except OSError:
        return False
    return {WEIGHTS, CONFIG} <= names <= set(FILES)


def unreadable(path: Path, name: Callable[[Path], str]) -> str | None:
    """Why the checkpoint's config.json or train_state.json cannot be read (a pipe, a device, no permission: opened,
    never read, so that a FIFO cannot hold the list) or is not JSON (its parse error), or None."""
    for file in (CONFIG, TRAIN_STATE):
        try:
            open_regular(path / file).close()
            json.loads(read_small(path / file))
        except FileNotFoundError:
            continue
        except OSError as exc:
            return f"{name(path)}/{file} cannot be read ({exc.strerror or exc}); {name(path)} is damaged"
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and a number too long are ValueErrors
            return (f"{name(path)}/{file} is not valid JSON ({str(exc)[:80] or type(exc).__name__}); {name(path)} "
                    "is damaged: remove it, or train it again")
    return None


def run_rows(checkpoints: list[Path], name: Callable[[Path], str] = str,
             refusal: Callable[[Path], str | None] = lambda path: None) -> list[dict]:
    """A row per checkpoint, named by `name`; a checkpoint `refusal` speaks of, or whose JSON cannot be opened, is
    a damaged row, never read."""
    latest = latest_results(checkpoints)
    rows = {}
    for path in checkpoints:
        refused = refusal(path) or unreadable(path, name)
        if refused is not None:
            rows[path] = damaged(path, name, refused)
            continue
        try:
            rows[path] = row_of(path, name, latest.get(str(path.resolve()), {}))
        except DAMAGE as exc:
            rows[path] = damaged(path, name, f"{name(path)} is damaged and cannot be listed ({exc}); remove it "
                                             "or retrain it")
    fold_best_copies(rows, name)
    for row in rows.values():
        if not row.get("damaged"):
            row["val_bpc"] = bits_per_char(row["val_loss"], row)
            row["best_val_bpc"] = bits_per_char(row["best_val_loss"], row)
    return list(rows.values())


def bits_per_char(loss: float | None, row: dict) -> float | None:
    """A validation loss (nats per token) in bits per character of the validation text, as `microgpt eval`
    computes it (Evaluation.bits_per_char), from the tokens and characters of the text the run validated on;
    None where the loss or the characters are not known (a bpe or tokenizer.json run trained before runs
    recorded them)."""
    tokens, characters = row.get("val_tokens"), row.get("val_characters")
    if loss is None or not tokens or not characters:
        return None
    return Evaluation(positions=tokens, nll=loss, seconds=0.0, characters=characters).bits_per_char


def validation_text(state: dict, tokenizer: str | None) -> tuple[int | None, int | None]:
    """(tokens, characters) of the text a run validated on: what training recorded (data/corpus.py, Corpus.split),
    else for a char run its held-out token count twice (a token is a character); (None, None) where unknown."""
    recorded = state.get("validation_text")
    if isinstance(recorded, dict) and all(_count(recorded.get(key)) for key in ("tokens", "characters")):
        return recorded["tokens"], recorded["characters"]
    train_config = state.get("train_config")
    held = train_config.get("val_tokens") if isinstance(train_config, dict) else None
    return (held, held) if tokenizer == "char" and _count(held) else (None, None)


def validation_of(path: Path) -> dict:
    """A checkpoint's tokenizer kind and the tokens and characters of its validation text (for `bits_per_char`),
    None for what cannot be read."""
    tokenizer = model_figures(path).get("tokenizer")
    tokens, characters = validation_text(read_json(path / TRAIN_STATE), tokenizer)
    return {"tokenizer": tokenizer, "val_tokens": tokens, "val_characters": characters}


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def damaged(path: Path, name: Callable[[Path], str], why: str) -> dict:
    return {"path": name(path), "name": path.name, "damaged": True, "status": "damaged", "error": why,
            "has_metrics": False}


def results_files(checkpoints: list[Path]) -> list[Path]:
    """The results.jsonl files beside the checkpoints (never one that is a link)."""
    files = {path.parent / RESULTS_LOG for path in checkpoints}
    return sorted(f for f in files if f.is_file() and not f.is_symlink())


def latest_results(checkpoints: list[Path]) -> dict[str, dict]:
    """Each checkpoint's latest line of the results.jsonl beside it, by the checkpoint's resolved path: read a line
    at a time (a line past MAX_LOG_LINE is damage, left out whole), and none from a results.jsonl
    that cannot be read (its rows show without its figures)."""
    latest: dict[str, dict] = {}
    for results in results_files(checkpoints):
        try:
            with open_regular(results) as f:
                for line in bounded_lines(f, MAX_LOG_LINE):
                    try:
                        record = json.loads(line.decode("utf-8", errors="replace"))
                        latest[str((results.parent / Path(record["checkpoint"]).name).resolve())] = record
                    except (ValueError, KeyError, TypeError, RecursionError):
                        continue
        except OSError:
            continue
    return latest


def row_of(path: Path, name: Callable[[Path], str], record: dict) -> dict:
    """A checkpoint's row: its step of its steps, its figures, and its status."""
    state = read_json(path / TRAIN_STATE)
    train_config = state.get("train_config")
    steps = train_config.get("steps") if isinstance(train_config, dict) else None
    steps = steps if isinstance(steps, int) and not isinstance(steps, bool) else None
    step = state_step(state)
    finished = step is not None and steps is not None and step >= steps
    training = WriterLock(path).holder()
    row = {
        "path": name(path), "name": path.name, "family": None, "model": record.get("model"),
        "tokenizer": record.get("tokenizer"),
        "parameters": record.get("parameters"), "step": step, "steps": steps, "finished": finished,
        "final_loss": record.get("final_loss"), "val_loss": record.get("val_loss"),
        "best_val_loss": record.get("best_val_loss", state.get("best_val_loss")),
        "best_step": None, "best_checkpoint": None, "best_of": None, "seconds": record.get("seconds"),
        "tokens_per_sec": record.get("tokens_per_sec"), "time": record.get("time"),
        "machine": record.get("machine"), "has_metrics": RunPaths(path).metrics.is_file(),
        "status": ("training" if training else "finished" if finished
                   else "unfinished" if steps is not None else "unknown"),  # unknown: no readable --steps
    }
    failed = None if training else failure_of(RunPaths(path).failure, step)  # a resume of it failed, too
    if failed is not None:
        row.update(status="failed", error=failed)
    row.update({key: value for key, value in model_figures(path).items() if row.get(key) is None})
    row["val_tokens"], row["val_characters"] = validation_text(state, row["tokenizer"])
    return row


def fold_best_copies(rows: dict, name: Callable[[Path], str]) -> None:
    """A run's `-best` copy folded into the run's row (where and when it was best); an orphan one kept."""
    for path, row in list(rows.items()):
        if row.get("damaged"):
            continue
        run = path.with_name(path.name.removesuffix("-best"))
        if run == path or RunPaths(run).best != path:
            continue
        if run in rows and not rows[run].get("damaged"):  # the run's best copy: one row, the run's
            del rows[path]
            rows[run].update(best_checkpoint=row["path"], best_step=row["step"])
            if rows[run]["best_val_loss"] is None:
                rows[run]["best_val_loss"] = row["best_val_loss"]
        else:  # all that is left of a run killed before its first save
            row.update(best_of=name(run), best_checkpoint=row["path"], best_step=row["step"],
                       status=f"best copy of {name(run)}")


def model_figures(path: Path) -> dict:
    """A checkpoint's family, parameter count, description and tokenizer kind, from its config.json (none where it
    does not read)."""
    try:
        config = read_config(path)
        kind = family(config["family"])
        built = kind.Config(**config["model"])
        tokenizer = config.get("tokenizer")
        return {"family": config["family"], "parameters": n_params(kind, built), "model": kind.describe(built),
                "tokenizer": tokenizer.get("kind") if isinstance(tokenizer, dict) else None}
    except (CheckpointError, ConfigError, TypeError, ValueError, RecursionError):
        return {}


def read_json(path: Path) -> dict:
    try:
        value = json.loads(read_small(path))
    except (OSError, ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}
