"""Reading the inputs in blocks: the unit of work a worker decodes and tokenizes, made in the reading process.

A block is a few MB of one file: for text, raw bytes cut at a place where the cut changes no token (below);
for JSON Lines, whole lines; for Parquet, a record batch's texts. Each block knows its file, the number of its
first document (`first_slot`: documents are numbered in input order, a text file taking one number, a JSON
Lines file one per line, a Parquet file one per row, so that a number never depends on decoding) and how far
into the inputs on disk the reading is when it ends (for the progress bar).

A text file is one document however long, read a block at a time. Its blocks end just before a newline or a
space that follows a printable ASCII character: no pre-token of the bpe tokenizer's GPT-2 pattern runs from a
non-space across a space (see tokenizer/bpe.py `pieces`), so the blocks' tokens are those of the whole text.
A text with no such place in MAX_BLOCK_BYTES is cut anyway, between two characters.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from microgpt.core.errors import DataError
from microgpt.data.prepare.inputs import InputFile
from microgpt.data.prepare.streams import Opened, opened, seekable_copy

BLOCK_BYTES = 1024**2  # what a worker takes at a time: its text, code points and ids are a few times this
MAX_BLOCK_BYTES = 64 * 1024**2  # a text without a safe place to cut in this much is cut anyway
MAX_LINE_BYTES = 128 * 1024**2  # a JSON Lines line is gathered whole: a longer one is refused as it grows
PRINTABLE = range(0x21, 0x7F)  # printable ASCII, not space: a byte that ends a character and is no whitespace


@dataclass
class Block:
    source: str  # the file, as messages name it
    kind: str  # "text", "jsonl" or "parquet"
    first_slot: int  # the number of its first document
    payload: bytes | list  # raw bytes (text, jsonl), or the texts of a record batch (parquet; None for a null)
    offset: int = 0  # where the payload starts in the file's (decompressed) bytes
    first_line: int = 1  # jsonl: the line number of its first line
    last: bool = True  # text: whether it ends the document
    compressed: bool = False  # whether offsets count decompressed bytes (for messages)
    keep_text: bool = False  # whether the scan returns its texts (for the tokenizer's sample)
    done: int | None = None  # bytes of the inputs on disk read when it ends (a reader may say how far in its file)


def read_blocks(inputs: list[InputFile], text_field: str, want_text: Callable[[], bool] = lambda: False,
                block_bytes: int | None = None) -> Iterator[Block]:
    """Every input's blocks (of about block_bytes, BLOCK_BYTES by default), in order; `want_text()` is asked
    for each block whether to keep its text."""
    block_bytes = block_bytes or BLOCK_BYTES
    slot = base = 0
    for file in inputs:
        with opened(file) as source:
            read = {"text": _text_blocks, "jsonl": _jsonl_blocks, "parquet": _parquet_blocks}[file.kind]
            taken = 1
            for block in read(source, text_field, block_bytes):
                block.first_slot += slot
                block.keep_text = want_text()
                within = source.position() if block.done is None else block.done
                block.done = base + min(within, file.size)
                taken = block.first_slot - slot + _slots(block)
                yield block
            slot += 1 if file.kind == "text" else taken
        base += file.size


def _slots(block: Block) -> int:
    """How many document numbers the block takes: a text's one, a JSON Lines block's lines, a batch's rows."""
    if block.kind == "jsonl":
        lines = block.payload.count(b"\n")
        return lines + (1 if block.payload and not block.payload.endswith(b"\n") else 0)
    return len(block.payload) if block.kind == "parquet" else 1


def _text_blocks(source: Opened, text_field: str, block_bytes: int) -> Iterator[Block]:
    """The blocks of one text document: each ends at a safe cut, the last holds the rest (b"" for an empty file)."""
    name, compressed = str(source.file.path), bool(source.file.compression)
    data, offset, at_end = b"", 0, False
    while True:
        while not at_end and len(data) <= block_bytes:
            more = source.stream.read(block_bytes)
            at_end, data = not more, data + more
        if at_end and len(data) <= block_bytes:
            yield Block(name, "text", 0, data, offset, last=True, compressed=compressed)
            return
        cut = safe_cut(data)
        if cut is None and not at_end and len(data) < MAX_BLOCK_BYTES:
            more = source.stream.read(block_bytes)
            at_end, data = not more, data + more
            continue
        if cut is None:
            cut = character_cut(data)
        yield Block(name, "text", 0, data[:cut], offset, last=False, compressed=compressed)
        offset, data = offset + cut, data[cut:]


def safe_cut(data: bytes) -> int | None:
    """The last place in data before a newline (else a space) that follows printable ASCII, past its start."""
    for separator in (b"\n", b" "):
        at = data.rfind(separator)
        while at > 0:
            if data[at - 1] in PRINTABLE:
                return at
            at = data.rfind(separator, 0, at)
    return None


def character_cut(data: bytes) -> int:
    """A place near the end of data (of at least 5 bytes) between two UTF-8 characters: before its last byte
    that continues none, within the last four."""
    at = len(data) - 1
    while 0x80 <= data[at] < 0xC0 and len(data) - at < 4:
        at -= 1
    return at


def _jsonl_blocks(source: Opened, text_field: str, block_bytes: int) -> Iterator[Block]:
    name, compressed = str(source.file.path), bool(source.file.compression)
    carry, offset, line, slot = [], 0, 1, 0  # carry: the pieces of a line not ended yet, joined once it ends
    while True:
        more = source.stream.read(block_bytes)
        if not more:
            rest = b"".join(carry)
            if rest:
                yield Block(name, "jsonl", slot, rest, offset, line, compressed=compressed)
            return
        end = more.rfind(b"\n") + 1
        if end == 0:
            carry.append(more)
            if sum(map(len, carry)) > MAX_LINE_BYTES:
                raise DataError(f"{name} line {line} is longer than {MAX_LINE_BYTES:,} bytes, more than a record "
                                "to train on holds; split it, or leave the file out")
            continue
        block, carry = b"".join([*carry, more[:end]]), [more[end:]]
        yield Block(name, "jsonl", slot, block, offset, line, compressed=compressed)
        lines = block.count(b"\n")
        offset, line, slot = offset + len(block), line + lines, slot + lines


def _parquet_blocks(source: Opened, text_field: str, block_bytes: int) -> Iterator[Block]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    name = str(source.file.path)
    with seekable_copy(source.file, source.stream) as path:
        try:
            table = pq.ParquetFile(path)
        except (pa.ArrowException, OSError) as exc:
            raise DataError(f"{name} is not a Parquet file the pyarrow package can read ({exc}); leave it out") \
                from None
        schema = table.schema_arrow
        if text_field not in schema.names:
            raise DataError(f"{name} has no column {text_field!r} (its columns: {', '.join(schema.names) or 'none'}); "
                            "give --text-field with the one that holds the text")
        column_type = schema.field(text_field).type
        string_view = getattr(pa.types, "is_string_view", lambda _: False)
        if not (pa.types.is_string(column_type) or pa.types.is_large_string(column_type) or string_view(column_type)):
            raise DataError(f"{name}: its column {text_field!r} holds {column_type}, not text; give --text-field with "
                            "the column that holds the text")
        rows = table.metadata.num_rows
        column = schema.names.index(text_field)
        stored = sum(table.metadata.row_group(g).column(column).total_uncompressed_size
                     for g in range(table.metadata.num_row_groups))
        batch_rows = max(1, min(65536, block_bytes * max(rows, 1) // max(stored, 1)))
        slot = 0
        try:
            for batch in table.iter_batches(batch_size=batch_rows, columns=[text_field]):
                texts = batch.column(0).to_pylist()
                slot += len(texts)
                yield Block(name, "parquet", slot - len(texts), texts, done=source.file.size * slot // max(rows, 1))
        except pa.ArrowException as exc:
            raise DataError(f"{name} cannot be read to its end ({exc}); it is damaged: write it again, or leave "
                            "it out") from None
