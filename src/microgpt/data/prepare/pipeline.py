"""`prepare`: the inputs to a dataset directory, in two passes over them, with nothing half-written.

The order: claim --out (out_dir.py: its lock, and refusals), find the inputs (inputs.py), scan them (scan.py:
every problem with them shows here, before anything is written), make the tokenizer (char: the characters
scanned; bpe: trained on the first --tokenizer-sample), check that its tokens keep most of the text (a
tokenizer.json's normaliser may drop it: refused under MIN_KEPT, on the start of the text and again on all
of it), choose the split (split.py), tokenize and write the shards into the partial directory (encode.py),
then the manifest, and rename it into place. Anything that
stops it on the way (an error, a full disk, Ctrl-C, SIGTERM) removes the partial directory.
"""

from __future__ import annotations

import errno
import shlex
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from microgpt.core.errors import DataError
from microgpt.core.stops import stopping_on_signals
from microgpt.data.dataset import MANIFEST_VERSION, VERSION_KEY
from microgpt.data.prepare.encode import encode
from microgpt.data.prepare.inputs import InputFile, find_inputs
from microgpt.data.prepare.out_dir import Output
from microgpt.data.prepare.pool import available_cores, useful_workers
from microgpt.data.prepare.progress import MB, note
from microgpt.data.prepare.scan import RATIO_SAMPLE_CHARS, Scan, scan
from microgpt.data.prepare.settings import PrepareSettings
from microgpt.data.prepare.split import Split, choose_split
from microgpt.data.shards import token_dtype
from microgpt.data.tokenizer import Tokenizer, is_tokenizer_file, load_tokenizer_file
from microgpt.data.tokenizer.bpe import BPETokenizer
from microgpt.data.tokenizer.char import CharTokenizer

MIN_KEPT = 0.5  # a tokenizer whose tokens stand for less of the text is refused: a model would learn a fraction
NOTE_KEPT = 0.95  # one that keeps less than this is noted in the summary


@dataclass
class Summary:
    out: Path
    tokenizer: str  # its description
    dtype: str
    splits: dict[str, dict]  # the manifest's
    inputs: int  # files
    input_bytes: int  # on disk
    text_bytes: int  # decompressed
    written_bytes: int
    seconds: float
    errors: dict  # the manifest's: mode, replaced, skipped
    empty: int  # empty documents, not written
    characters: int  # in the documents written
    kept: int  # of them, what the tokens stand for (fewer where a tokenizer.json's normaliser drops some)
    notes: list[str] = field(default_factory=list)


def prepare(inputs: list[str | Path], out: str | Path, settings: PrepareSettings | None = None,
            overwrite: bool = False, quiet: bool = False, command: str | None = None) -> Summary:
    """Prepare the inputs (files or directories) into the dataset directory `out`; its Summary."""
    settings = settings or PrepareSettings()
    started = time.perf_counter()
    output = Output(out, overwrite)
    command = command or shlex.join(["microgpt", "prepare", *map(str, inputs), "--out", str(out)])
    try:
        with stopping_on_signals():
            output.claim()
            files = find_inputs(inputs, settings.glob, output.out)
            workers = useful_workers(settings.workers or available_cores(), files)
            found = scan(files, settings, workers, quiet)
            notes: list[str] = []
            tokenizer = _tokenizer(settings, found, quiet, notes)
            chars_per_token, kept = _measure(tokenizer, found)
            check_kept(kept, "the start of the text")  # before anything is written
            split = choose_split(settings, found.chars_by_bucket, found.docs_by_bucket, chars_per_token)
            notes += [split.note] if split.note else []
            try:
                written = encode(files, settings, workers, quiet, found, tokenizer, split, output.begin())
                check_kept(written.kept / found.characters, "the text")
                _count_characters(written.splits, found, split)
                errors = {"mode": settings.errors, "replaced": found.replaced, "skipped": len(found.skipped)}
                output.commit(_manifest(tokenizer, written.splits, split.record(settings), files, command, errors))
            except OSError as exc:
                raise _write_error(exc, output.out) from None
            finally:
                output.abort()
    except KeyboardInterrupt as exc:  # Ctrl-C or Stopped: say whether it came only once the dataset was complete
        exc.complete = output.committed
        raise
    finally:
        output.release()
    if written.kept < NOTE_KEPT * found.characters:
        notes.append(f"the tokenizer drops {1 - written.kept / found.characters:.1%} of the text's characters "
                     "(its normaliser or pre-tokenizer): a model trained on the dataset never sees them")
    return Summary(output.out, tokenizer.describe(), token_dtype(tokenizer.size).name, written.splits, len(files),
                   sum(file.size for file in files), found.text_bytes, written.bytes, time.perf_counter() - started,
                   errors, found.empty, found.characters, written.kept, notes)


def _tokenizer(settings: PrepareSettings, found: Scan, quiet: bool, notes: list[str]) -> Tokenizer:
    if settings.tokenizer == "char":
        return CharTokenizer(found.vocabulary())
    if is_tokenizer_file(settings.tokenizer):
        return load_tokenizer_file(settings.tokenizer)
    sample = found.sample_text(settings.tokenizer_sample)  # bpe: the one kind trained on a sample
    what = f"training the {settings.tokenizer} tokenizer"
    note(f"{what} on the first {len(sample):,} characters of the text", quiet)
    started = time.perf_counter()
    tokenizer = BPETokenizer.train(sample, settings.vocab_size or BPETokenizer.default_vocab_size,
                                   on_progress=None if quiet else lambda line: note(f"{what}: {line}", quiet))
    note(f"{what}: done in {time.perf_counter() - started:.1f} s, {tokenizer.size:,} tokens", quiet)
    asked = settings.vocab_size or tokenizer.default_vocab_size
    if asked is not None and tokenizer.size < asked:
        notes.append(f"the tokenizer has {tokenizer.size:,} tokens, not the {asked:,} asked: its sample ran out of "
                     "pairs to merge; give a larger --tokenizer-sample or a smaller --vocab-size")
    return tokenizer


def _measure(tokenizer: Tokenizer, found: Scan) -> tuple[float, float]:
    """(characters per token, for turning --val-tokens into text to hold out; the share of the characters its
    tokens stand for): 1 and all for char, which keeps every character; for others, measured on the start of
    the sample."""
    if tokenizer.kind == "char":
        return 1.0, 1.0
    text = found.sample_text(RATIO_SAMPLE_CHARS)
    ids = tokenizer.encode(text)
    return len(text) / max(1, len(ids)), tokenizer.count_characters(ids) / max(1, len(text))


def check_kept(kept: float, where: str) -> None:
    """A DataError where the tokenizer's tokens stand for under MIN_KEPT of the characters of `where`: a
    normaliser (or pre-tokenizer) that drops most of the text, where a dataset would train on what is left."""
    if kept < MIN_KEPT:
        raise DataError(f"the tokenizer keeps {kept:.1%} of the characters of {where} (its normaliser or "
                        "pre-tokenizer drops the rest), so a model would learn a fraction of the corpus; give a "
                        "tokenizer.json made for this text, or check --text-field")


def _count_characters(splits: dict, found: Scan, split: Split) -> None:
    """Each split's characters of text into the manifest's splits (from the first pass's histogram): what
    held-out bits per character divide by, whatever the tokenizer."""
    held = int(found.chars_by_bucket[: split.held].sum())
    splits["train"]["characters"], splits["val"]["characters"] = found.characters - held, held


def _manifest(tokenizer: Tokenizer, splits: dict, held_out: dict, files: list[InputFile], command: str,
              errors: dict) -> dict:
    """The manifest (data/dataset.py's format)."""
    return {VERSION_KEY: MANIFEST_VERSION, "tokenizer": tokenizer.to_json(), "dtype": token_dtype(tokenizer.size).name,
            "splits": splits, "held_out": held_out,
            "inputs": [{"path": str(file.path), "bytes": file.size} for file in files],
            "command": command, "created": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "errors": errors}


def _write_error(exc: OSError, out: Path) -> DataError:
    if exc.errno == errno.ENOSPC:
        return DataError(f"the disk is full (no space left on the device of {out.parent}); nothing was kept: free "
                         "some space, or give --out on another disk")
    return DataError(f"cannot write the dataset beside {out} ({exc.strerror or exc}); nothing was kept: pick "
                     "another --out")


def describe(summary: Summary) -> list[str]:
    """The lines prepare prints at its end."""
    lines = [f"prepared {summary.out}: {summary.tokenizer}, {summary.dtype} tokens"]
    for name, split in summary.splits.items():
        lines.append(f"  {name + ':':6} {_count(split['documents'], 'document')}, {_count(split['tokens'], 'token')} "
                     f"in {_count(len(split['shards']), 'shard')}")
    rate = summary.text_bytes / summary.seconds / MB if summary.seconds > 0 else 0.0
    disk = "" if summary.input_bytes == summary.text_bytes else f" ({summary.input_bytes / MB:,.1f} MB on disk)"
    lines.append(f"  read {summary.text_bytes / MB:,.1f} MB of text{disk} from {summary.inputs} "
                 f"file{'s' if summary.inputs != 1 else ''} and wrote {summary.written_bytes / MB:,.1f} MB in "
                 f"{summary.seconds:.1f} s: {rate:,.1f} MB/s of text")
    errors = summary.errors
    kept = "all of them" if summary.kept >= summary.characters else \
        f"{summary.kept / max(1, summary.characters):.1%} of them"
    lines.append(f"  characters: {summary.characters:,} in the documents; the tokens stand for {kept}")
    lines.append(f"  undecodable (--errors {errors['mode']}): {errors['replaced']:,} replaced, "
                 f"{_count(errors['skipped'], 'document')} skipped; {_count(summary.empty, 'empty document')} left out")
    lines += [f"  note: {text}" for text in summary.notes]
    return lines


def _count(n: int, what: str) -> str:
    return f"{n:,} {what}{'s' if n != 1 else ''}"
