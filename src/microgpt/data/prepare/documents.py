"""A block's documents as text: UTF-8 decoding by --errors, JSON Lines records read, the separator added.

`documents(block, field, errors)` gives the block's pieces: (document number, text, whether the piece ends
its document). A record is one piece; a text file's blocks are pieces of its one document. The separator
rule: a document's text ends with "\\n"; one that does not gets one added (so documents never run into each
other, with either tokenizer); an empty document (an empty file, a "" or null field) stays empty, and is
counted but never written. A lone surrogate (a JSON escape such as \\ud800, which is no character) counts as
undecodable, as a bad byte does.

Bad input is a DataError in one line naming the file and the place: NUL bytes (a binary file), a line that
is not JSON or lacks the field, and with --errors strict a byte that is not UTF-8.
"""

from __future__ import annotations

import codecs
import json
import re
from dataclasses import dataclass, field

from microgpt.core.errors import DataError
from microgpt.data.prepare.blocks import Block

SEPARATOR = "\n"
LONE_SURROGATE = re.compile("[\ud800-\udfff]")
REPLACEMENT = "\ufffd"
_replaced = [0]  # what the counting error handler has put in since it was last read


def _count_and_replace(exc: UnicodeDecodeError) -> tuple[str, int]:
    _replaced[0] += 1
    return REPLACEMENT, exc.end


codecs.register_error("microgpt-count-replace", _count_and_replace)


@dataclass
class Decoded:
    pieces: list[tuple[int, str, bool]] = field(default_factory=list)  # (document number, text, ends it)
    bad: list[int] = field(default_factory=list)  # documents --errors skip drops
    replaced: int = 0  # undecodable sequences --errors replace turned into U+FFFD
    text_bytes: int = 0  # the bytes of text read (decompressed, UTF-8)


def documents(block: Block, text_field: str, errors: str) -> Decoded:
    if block.kind == "text":
        return _text(block, errors)
    if block.kind == "jsonl":
        return _jsonl(block, text_field, errors)
    out = Decoded()
    for i, text in enumerate(block.payload):
        text = text or ""
        out.text_bytes += len(text)
        out.pieces.append((block.first_slot + i, _ended(text), True))
    return out


def _ended(text: str) -> str:
    """The separator rule: a document's text ends with a newline."""
    return text if not text or text.endswith(SEPARATOR) else text + SEPARATOR


def _where(block: Block, offset: int) -> str:
    inside = " of its decompressed text" if block.compressed else ""
    return f"byte {offset:,}{inside}"


def _nul_check(block: Block, data: bytes) -> None:
    at = data.find(b"\0")
    if at >= 0:
        raise DataError(f"{block.source} looks binary (a NUL byte at {_where(block, block.offset + at)}); leave it out, "
                        "e.g. with --glob '*.txt'")


def _undecodable(block: Block, exc: UnicodeDecodeError, start: int, line: int | None = None) -> DataError:
    at = f"line {line}, " if line is not None else ""
    return DataError(f"{block.source}: {at}{_where(block, block.offset + start + exc.start)} is not UTF-8 "
                     f"({exc.reason}); convert it to UTF-8, or give --errors replace (U+FFFD for such bytes) or "
                     "--errors skip (drop their documents)")


def _decode(block: Block, data: bytes, errors: str, start: int = 0, line: int | None = None) -> tuple[str | None, int]:
    """(text, replacements): None for text under --errors skip when the bytes do not decode."""
    try:
        return data.decode("utf-8"), 0
    except UnicodeDecodeError as exc:
        if errors == "strict":
            raise _undecodable(block, exc, start, line) from None
        if errors == "skip":
            return None, 0
    before = _replaced[0]
    text = data.decode("utf-8", "microgpt-count-replace")
    return text, _replaced[0] - before


def _text(block: Block, errors: str) -> Decoded:
    _nul_check(block, block.payload)
    text, replaced = _decode(block, block.payload, errors)
    out = Decoded(replaced=replaced, text_bytes=len(block.payload))
    if text is None:
        out.bad.append(block.first_slot)
    else:
        out.pieces.append((block.first_slot, _ended(text) if block.last else text, block.last))
    return out


def _jsonl(block: Block, text_field: str, errors: str) -> Decoded:
    _nul_check(block, block.payload)
    out = Decoded(text_bytes=len(block.payload))
    whole, replaced = _decode(block, block.payload, "skip")  # the fast way, for the block that decodes
    lines = whole.split("\n") if whole is not None else None
    raw_lines = block.payload.split(b"\n") if lines is None else None
    start = 0
    for i in range(len(lines if lines is not None else raw_lines)):
        number, slot = block.first_line + i, block.first_slot + i
        if lines is not None:
            line = lines[i]
        else:
            raw = raw_lines[i]
            line, replaced = _decode(block, raw, errors, start, number)
            start += len(raw) + 1
            out.replaced += replaced
            if line is None:
                out.bad.append(slot)
                continue
        if not line.strip():
            continue
        text = _record_text(block, line, number, text_field)
        if LONE_SURROGATE.search(text):
            if errors == "strict":
                found = LONE_SURROGATE.search(text).group()
                raise DataError(f"{block.source} line {number}: its {text_field!r} holds \\u{ord(found):04x}, a lone "
                                "surrogate, which is no character; fix that line, or give --errors replace or "
                                "--errors skip")
            if errors == "skip":
                out.bad.append(slot)
                continue
            text, count = LONE_SURROGATE.subn(REPLACEMENT, text)
            out.replaced += count
        out.pieces.append((slot, _ended(text), True))
    return out


def _record_text(block: Block, line: str, number: int, text_field: str) -> str:
    """The text field of one JSON Lines record ("" for null); a DataError naming the line otherwise."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise DataError(f"{block.source} line {number} is not JSON ({exc.msg} at column {exc.colno}); fix or remove "
                        "that line") from None
    except RecursionError:
        raise DataError(f"{block.source} line {number} is JSON nested too deeply to read; fix or remove that "
                        "line") from None
    except ValueError:  # int(): more digits than sys.get_int_max_str_digits()
        raise DataError(f"{block.source} line {number} is JSON with a number of too many digits to read; fix or "
                        "remove that line") from None
    if not isinstance(record, dict):
        raise DataError(f"{block.source} line {number} is a JSON {type(record).__name__}, not an object with a "
                        f"{text_field!r} field; give JSON Lines of objects")
    if text_field not in record:
        fields = ", ".join(map(repr, list(record)[:8])) or "none"
        raise DataError(f"{block.source} line {number} has no {text_field!r} field (its fields: {fields}); give "
                        "--text-field with the one that holds the text")
    text = record[text_field]
    if text is None:
        return ""
    if not isinstance(text, str):
        raise DataError(f"{block.source} line {number}: its {text_field!r} is a JSON {type(text).__name__}, not "
                        "text; give --text-field with the field that holds the text")
    return text
