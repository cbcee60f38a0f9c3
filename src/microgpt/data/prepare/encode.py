"""The second pass: read the inputs again, tokenize every document and write its tokens into its split's shards.

The blocks are the first pass's, tokenized by the workers (work.py) and written in input order, so the
shards are the same for any number of workers. Each piece goes to the split its document's number hashes to
(split.py); the documents the first pass found undecodable under --errors skip are left out whole.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from microgpt.core.errors import DataError
from microgpt.data.dataset import SPLITS
from microgpt.data.prepare.blocks import read_blocks
from microgpt.data.prepare.inputs import InputFile
from microgpt.data.prepare.pool import ordered_map
from microgpt.data.prepare.progress import BytesProgress
from microgpt.data.prepare.scan import Scan
from microgpt.data.prepare.settings import PrepareSettings
from microgpt.data.prepare.split import Split
from microgpt.data.prepare.work import Encoded, encode_block
from microgpt.data.prepare.writer import ShardWriter
from microgpt.data.shards import token_dtype
from microgpt.data.tokenizer import Tokenizer


@dataclass
class Written:
    splits: dict[str, dict]  # the manifest's: {"train": {"documents", "tokens", "shards"}, "val": ...}
    bytes: int
    seconds: float
    kept: int  # the characters the written tokens stand for (tokenizer.count_characters)


def encode(inputs: list[InputFile], settings: PrepareSettings, workers: int, quiet: bool, found: Scan,
           tokenizer: Tokenizer, split: Split, directory: Path) -> Written:
    dtype = token_dtype(tokenizer.size)
    writers = {name: ShardWriter(directory, name, dtype, settings.shard_tokens) for name in SPLITS}
    documents = dict.fromkeys(SPLITS, 0)
    skipped = np.array(sorted(found.skipped), dtype=np.int64)  # (skipped documents,)
    job = {"text_field": settings.text_field, "errors": settings.errors, "tokenizer": tokenizer.to_json(),
           "dtype": dtype.str}
    progress = BytesProgress(sum(file.size for file in inputs), "tokenizing", quiet, text_total=found.text_bytes)
    text = kept = 0
    try:
        blocks = read_blocks(inputs, settings.text_field)
        with contextlib.closing(ordered_map(encode_block, blocks, workers, job)) as results:
            for result in results:
                kept += _write(result, writers, documents, skipped, split, settings.seed)
                text += result.text_bytes
                progress.update(result.done, text)
        shards = {name: writer.close() for name, writer in writers.items()}
    finally:
        progress.close()
        for writer in writers.values():
            writer.abandon()
    if sum(documents.values()) != found.documents:
        raise DataError(f"the inputs held {found.documents:,} documents when scanned and {sum(documents.values()):,} "
                        "when tokenized: they changed while being prepared; prepare them again")
    splits = {name: {"documents": documents[name], "tokens": writers[name].tokens, "shards": shards[name]}
              for name in SPLITS}
    return Written(splits, sum(writer.bytes for writer in writers.values()), progress.seconds(), kept)


def _write(result: Encoded, writers: dict[str, ShardWriter], documents: dict[str, int], skipped: np.ndarray,
           split: Split, seed: int) -> int:
    """One block's tokens into the shards of their documents' splits, a run of pieces of one split at a time;
    the characters the tokens written stand for."""
    if not len(result.slots):
        return 0
    kept = 0
    held = split.held_out(result.slots, seed)  # (pieces,)
    where = np.where(held, 1, 0)  # (pieces,): 0 train, 1 val, -1 left out
    if len(skipped):
        where[np.isin(result.slots, skipped)] = -1
    ends = np.concatenate([[0], np.cumsum(result.lengths)])  # (pieces + 1,): where each piece's tokens end
    runs = np.concatenate([[0], np.flatnonzero(np.diff(where)) + 1, [len(where)]])  # (runs + 1,)
    for first, last in zip(runs[:-1].tolist(), runs[1:].tolist()):
        if where[first] < 0:
            continue
        name = SPLITS[where[first]]
        writers[name].append(result.tokens[ends[first] : ends[last]])
        documents[name] += int((result.ends[first:last] & result.written[first:last]).sum())
        kept += int(result.characters[first:last].sum())
    return kept
