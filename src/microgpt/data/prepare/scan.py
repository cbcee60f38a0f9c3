"""The first pass: read every input once, check it, and count what the split and the tokenizer need.

Every problem with the input shows here, before anything is written (a binary file, a line that is not JSON,
an undecodable byte under --errors strict, an input with no documents). What it counts: the documents and
their characters, as histograms over the split's hash buckets (split.py); the documents --errors skip drops
and the replacements --errors replace made; the characters used (the char tokenizer's vocabulary); and the
start of the text: its first --tokenizer-sample for bpe (what it trains on), its first RATIO_SAMPLE_CHARS for
a tokenizer.json (what tokens per character is measured on, for --val-tokens, and the share of the characters
its tokens keep, checked before anything is written).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import numpy as np

from microgpt.core.errors import DataError
from microgpt.data.prepare.blocks import read_blocks
from microgpt.data.prepare.inputs import InputFile
from microgpt.data.prepare.pool import ordered_map
from microgpt.data.prepare.progress import BytesProgress
from microgpt.data.prepare.settings import PrepareSettings
from microgpt.data.prepare.split import BUCKETS, buckets
from microgpt.data.prepare.work import CODE_POINTS, Scanned, scan_block

RATIO_SAMPLE_CHARS = 1_000_000  # the text a tokenizer encodes to estimate its tokens per character


@dataclass
class Scan:
    chars_by_bucket: np.ndarray = field(default_factory=lambda: np.zeros(BUCKETS, dtype=np.int64))  # (BUCKETS,)
    docs_by_bucket: np.ndarray = field(default_factory=lambda: np.zeros(BUCKETS, dtype=np.int64))  # (BUCKETS,)
    documents: int = 0
    characters: int = 0
    empty: int = 0  # documents with no text, which are not written
    skipped: set[int] = field(default_factory=set)  # the numbers of the documents --errors skip drops
    replaced: int = 0
    text_bytes: int = 0
    used: np.ndarray | None = None  # (CODE_POINTS,) bool: the characters in the text, for char
    sample: list[str] = field(default_factory=list)
    sample_chars: int = 0
    seconds: float = 0.0
    _open: dict[int, int] = field(default_factory=dict)  # a text document's characters so far, by number

    def vocabulary(self) -> str:
        return "".join(map(chr, np.flatnonzero(self.used)))

    def sample_text(self, limit: int) -> str:
        return "".join(self.sample)[:limit]


def scan(inputs: list[InputFile], settings: PrepareSettings, workers: int, quiet: bool) -> Scan:
    found = Scan(used=np.zeros(CODE_POINTS, dtype=bool) if settings.tokenizer == "char" else None)
    wanted = {"char": 0, "bpe": settings.tokenizer_sample}.get(settings.tokenizer, RATIO_SAMPLE_CHARS)
    job = {"text_field": settings.text_field, "errors": settings.errors, "codepoints": found.used is not None}
    blocks = read_blocks(inputs, settings.text_field, want_text=lambda: found.sample_chars < wanted)
    on_disk = sum(file.size for file in inputs)
    plain = all(not file.compression and file.kind != "parquet" for file in inputs)  # its text is its bytes
    progress = BytesProgress(on_disk, "scanning", quiet, text_total=on_disk if plain else None)
    try:
        with contextlib.closing(ordered_map(scan_block, blocks, workers, job)) as results:
            for block_result in results:
                _add(found, block_result, settings.seed, wanted)
                progress.update(block_result.done, found.text_bytes)
            progress.update(progress.total, found.text_bytes)
    finally:
        progress.close()
    found.seconds = progress.seconds()
    if found.documents == 0:
        raise DataError(_no_documents(inputs, found, settings))
    return found


def _add(found: Scan, result: Scanned, seed: int, wanted: int) -> None:
    found.skipped.update(result.bad)
    found.replaced += result.replaced
    found.text_bytes += result.text_bytes
    if result.codepoints is not None:
        found.used[result.codepoints] = True
    if result.texts is not None and found.sample_chars < wanted:
        for slot, text in zip(result.slots.tolist(), result.texts):
            if slot not in found.skipped:
                found.sample.append(text)
                found.sample_chars += len(text)
    slots, chars = result.slots, result.chars.copy()
    if found._open or not result.ends.all():  # a text document across blocks: add its pieces up
        for i, slot in enumerate(slots.tolist()):
            chars[i] += found._open.pop(slot, 0)
            if not result.ends[i]:
                found._open[slot] = int(chars[i])
        slots, chars = slots[result.ends], chars[result.ends]
    if found.skipped:
        kept = ~np.isin(slots, list(found.skipped))
        slots, chars = slots[kept], chars[kept]
    written = chars > 0
    found.empty += int((~written).sum())
    slots, chars = slots[written], chars[written]
    where = buckets(slots, seed)
    np.add.at(found.chars_by_bucket, where, chars)
    np.add.at(found.docs_by_bucket, where, 1)
    found.documents += len(slots)
    found.characters += int(chars.sum())


def _no_documents(inputs: list[InputFile], found: Scan, settings: PrepareSettings) -> str:
    named = str(inputs[0].path) if len(inputs) == 1 else f"the {len(inputs)} inputs"
    if found.skipped:
        return (f"{named} hold{'s' if len(inputs) == 1 else ''} no documents that decode: --errors skip dropped all {len(found.skipped):,}; give "
                "--errors replace, or UTF-8 text")
    wanted = f"records with a {settings.text_field!r} field that is not empty" if any(
        file.kind != "text" for file in inputs) else "text"
    return f"{named} hold{'s' if len(inputs) == 1 else ''} no documents (nothing but empty ones); give {wanted}"
