"""What a worker does with a block: scan it (the first pass) or encode it (the second), in any process.

`start(job)` sets up a process for one pass (the reading settings and, to encode, the tokenizer); then
`scan_block` and `encode_block` are pure functions of a block, so that the output is the same however many
processes share the blocks. The scan returns each piece's document number and length in characters, the
characters used (for char) and, when asked, the texts (the bpe tokenizer's sample); the encoding returns
the pieces' tokens, one array, where each piece's tokens end, and the characters they stand for (fewer than
the text's where a tokenizer.json's normaliser drops some: prepare reports the share kept).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from microgpt.core.errors import DataError
from microgpt.data.prepare.blocks import Block
from microgpt.data.prepare.documents import documents
from microgpt.data.tokenizer import from_json
from microgpt.data.tokenizer.bpe import pieces

CODE_POINTS = 0x110000
BPE_BATCH_CHARS = 1 << 18  # text per call of the library's batch encoder: bounds its per-token records

_job: dict = {}


def start(job: dict) -> None:
    """Set this process up for a pass: job has "text_field", "errors", "codepoints" (scan: collect the
    characters used), and to encode, "tokenizer" (its to_json()) and "dtype"."""
    _job.clear()
    _job.update(job)
    if "tokenizer" in job:
        tokenizer = from_json(job["tokenizer"])
        _job["counter"] = tokenizer
        _job["encoder"] = _char_encoder(tokenizer.vocab) if tokenizer.kind == "char" else \
            _bpe_encoder(tokenizer.library_tokenizer) if tokenizer.kind == "bpe" else _encoder(tokenizer)


@dataclass
class Scanned:
    slots: np.ndarray  # (pieces,) int64: each piece's document number
    chars: np.ndarray  # (pieces,) int64: its length in characters
    ends: np.ndarray  # (pieces,) bool: whether it ends its document
    bad: list[int]  # documents --errors skip drops
    replaced: int
    text_bytes: int
    codepoints: np.ndarray | None  # (distinct,) int64: the characters of its pieces (with --tokenizer char)
    texts: list[str] | None  # its pieces' texts, when the block asked to keep them
    done: int  # the block's place in the inputs on disk (the progress bar's)


def scan_block(block: Block) -> Scanned:
    found = documents(block, _job["text_field"], _job["errors"])
    texts = [text for _, text, _ in found.pieces]
    codepoints = None
    if _job["codepoints"]:
        used = np.zeros(CODE_POINTS, dtype=bool)  # (code points,)
        used[_code_points("".join(texts))] = True
        codepoints = np.flatnonzero(used)
    return Scanned(np.array([slot for slot, _, _ in found.pieces], dtype=np.int64),
                   np.array([len(text) for text in texts], dtype=np.int64),
                   np.array([ends for _, _, ends in found.pieces], dtype=bool), found.bad, found.replaced,
                   found.text_bytes, codepoints, texts if block.keep_text else None, block.done)


@dataclass
class Encoded:
    tokens: np.ndarray  # (tokens,) of the dataset's dtype: the pieces' tokens, one after another
    slots: np.ndarray  # (pieces,) int64: each piece's document number
    lengths: np.ndarray  # (pieces,) int64: how many of the tokens are its
    ends: np.ndarray  # (pieces,) bool: whether it ends its document
    written: np.ndarray  # (pieces,) bool: whether it has text (a document counts by its text, as the scan
    # counts it: a tokenizer that drops whitespace encodes a document of blanks to no tokens)
    characters: np.ndarray  # (pieces,) int64: the characters its tokens stand for (fewer than its text's where
    # the tokenizer's normaliser drops some)
    text_bytes: int  # the text read (the progress bar's unit)
    done: int  # the block's place in the inputs on disk


def encode_block(block: Block) -> Encoded:
    found = documents(block, _job["text_field"], _job["errors"])
    texts = [text for _, text, _ in found.pieces]
    tokens, lengths = _job["encoder"](texts, block.source)
    stops = np.cumsum(lengths)  # (pieces,): where each piece's tokens end
    characters = np.array([_job["counter"].count_characters(tokens[stop - length : stop])
                           for stop, length in zip(stops.tolist(), lengths.tolist())], dtype=np.int64)
    return Encoded(tokens.astype(_job["dtype"], copy=False),
                   np.array([slot for slot, _, _ in found.pieces], dtype=np.int64), lengths,
                   np.array([ends for _, _, ends in found.pieces], dtype=bool),
                   np.array([bool(text) for text in texts], dtype=bool), characters, found.text_bytes, block.done)


def _code_points(text: str) -> np.ndarray:
    """(len(text),) uint32: the text's code points (surrogatepass: a lone surrogate is one too)."""
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4")


def _char_encoder(vocab: str):
    codepoints = np.array([ord(ch) for ch in vocab], dtype=np.int64)
    table = np.full(int(codepoints.max()) + 1 if len(vocab) else 1, -1, dtype=np.int32)  # (max code point + 1,)
    table[codepoints] = np.arange(len(vocab))

    def encode(texts: list[str], source: str) -> tuple[np.ndarray, np.ndarray]:
        points = _code_points("".join(texts))  # (characters,)
        ids = table[points] if not len(points) or points.max() < len(table) else None  # (characters,)
        if ids is None or (len(ids) and ids.min() < 0):  # -1: a character not in the vocabulary
            raise DataError(f"{source} has characters it did not have when it was scanned: it changed while "
                            "being prepared; prepare it again")
        return ids, np.array([len(text) for text in texts], dtype=np.int64)

    return encode


def _encoder(tokenizer):
    """Any other kind: its own encode, text by text."""
    def encode(texts: list[str], source: str) -> tuple[np.ndarray, np.ndarray]:
        ids = [np.zeros(0, dtype=np.int64), *(np.asarray(tokenizer.encode(text, source)) for text in texts)]
        return np.concatenate(ids), np.array([len(part) for part in ids[1:]], dtype=np.int64)

    return encode


def _bpe_encoder(library_tokenizer):
    def encode(texts: list[str], source: str) -> tuple[np.ndarray, np.ndarray]:
        cut = [pieces(text) for text in texts]  # each text's pieces: the tokens of the whole, in parallel
        flat = [piece for parts in cut for piece in parts]
        counts = np.zeros(len(flat), dtype=np.int64)  # (pieces of all texts,)
        arrays = [np.zeros(0, dtype=np.int64)]
        first = 0
        while first < len(flat):
            last, size = first, 0
            while last < len(flat) and (last == first or size + len(flat[last]) <= BPE_BATCH_CHARS):
                size += len(flat[last])
                last += 1
            for i, encoding in enumerate(library_tokenizer.encode_batch(flat[first:last])):
                arrays.append(np.array(encoding.ids, dtype=np.int64))
                counts[first + i] = len(encoding.ids)
            first = last
        owner = np.repeat(np.arange(len(texts)), [len(parts) for parts in cut])  # (pieces,): whose piece
        lengths = np.bincount(owner, weights=counts, minlength=len(texts)).astype(np.int64)
        return np.concatenate(arrays), lengths

    return encode
