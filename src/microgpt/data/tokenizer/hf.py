"""Any Hugging Face tokenizer, read from its tokenizer.json rather than trained: `--tokenizer PATH/tokenizer.json`.

`load_tokenizer_file(path)` reads a file the `tokenizers` library wrote (a BPE, WordPiece, Unigram or
WordLevel model, with whatever normaliser, pre-tokenizer and decoder it has). The checkpoint keeps the whole
file (`to_json`: the library's own JSON as a string), so a model trained on it needs nothing else. Truncation,
padding and BPE dropout are switched off on reading: a text encodes whole, and the same way every time; no
special tokens are added (no [CLS] ... [SEP] around a training text).

Ids are the file's: `size` is the largest id + 1 (an id the file skips is one the model never sees), at
most what microgpt's int32 ids hold. A vocabulary larger is refused, as is a sparse one (ids past twice its
tokens and SPARE_IDS, which the library would lay out whole, gigabytes for an id of billions), a file that is
not a regular file of at most MAX_FILE_BYTES, not JSON (or nested too deeply, or with too long a number to
read) or not one the library reads, and a text with a character the tokenizer would silently drop (a BPE
without an unknown token or byte fallback). A character it maps to its unknown token ([UNK]) is allowed: the
training run says how many tokens are unknown (`unknown_note` in __init__.py).

Characters (bits per character compares across tokenizers): each id stands for a fixed number of characters
(`_characters_per_token`), so counts add up across any cut, as bpe.py's do. A byte-level token (a ByteLevel
decoder, or a <0xNN> byte-fallback token) counts the characters its bytes start; any other token counts the
characters it adds to the decoded text in the middle of a sequence (a WordPiece word-start token its space
too, a "##" piece only its letters, a "▁" the space it stands for); with no decoder, its own characters; the
unknown token one; a special token its text. For a tokenizer that loses nothing (byte-level BPE, Unigram or
BPE with byte fallback) the count of a text's tokens is the text's length within a character or so; for one
that drops whitespace or punctuation spacing (BERT's WordPiece) it is the length of the text the tokens
decode to. The incremental decoder reads tokens as continuing a text (after a word of the tokenizer's own,
`probe`), so sampled text after a prompt keeps the space a word-start token brings. A long text is encoded
in pieces (in parallel, in the library) cut only where encoding the two sides apart gives what encoding them
together does (`pieces`); a tokenizer that cannot be cut so (a Prepend normaliser) encodes it whole.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer as LibraryTokenizer

from microgpt.core.errors import ConfigError, DataError
from microgpt.core.user_files import TooLarge, read_json
from microgpt.data.tokenizer.bpe import LONE_SURROGATE, MAX_VOCAB, byte_alphabet

FILE_NAME = "tokenizer.json"  # what a directory given as the tokenizer holds (a model's folder from the hub)
# the largest tokenizer.json read: the hub's largest are about 35 MB (Gemma's); kept as a JSON string in
# config.json or a dataset's manifest, escaping adds a fifth or so, which stays under the manifest's 64 MiB
MAX_FILE_BYTES = 48 * 1024**2
SPARE_IDS = 1024  # ids a tokenizer.json may skip beyond as many as it has tokens (a model's padded vocabulary)
PIECE_CHARS = 1 << 16  # about how long a piece of a long text is, when the tokenizer can be cut there
CUT_WINDOW = 512  # characters each side of a cut that must encode alike cut and whole for the cut to stand
CUT_TRIES = 32  # candidate cuts tried for a piece before the rest of the text is encoded whole
BATCH_PIECES = 64  # pieces encoded per library call
BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")  # a byte-fallback token
CUT_BEFORE = re.compile(r"(?<=\S)[\n ]")  # a candidate cut: just before a newline or space after a non-space


def load_tokenizer_file(path: str | Path) -> HFTokenizer:
    """The tokenizer of a tokenizer.json (or of a directory holding one); a DataError naming the file and the
    problem when it is missing, unreadable, not a tokenizers file or has more ids than int32 holds."""
    path = Path(path)
    if path.is_dir():
        if not (path / FILE_NAME).is_file():
            raise DataError(f"the tokenizer directory {path} has no {FILE_NAME}; give the path of a Hugging Face "
                            "tokenizer.json")
        path = path / FILE_NAME
    try:
        data = read_json(path, MAX_FILE_BYTES)
    except FileNotFoundError:
        raise DataError(f"the tokenizer file {path} does not exist; give the path of a Hugging Face tokenizer.json "
                        "(or char or bpe)") from None
    except TooLarge:
        raise DataError(f"the tokenizer file {path} is {path.stat().st_size:,} bytes, more than a tokenizer.json has "
                        f"(at most {MAX_FILE_BYTES:,}); give the path of a Hugging Face tokenizer.json") from None
    except OSError as exc:
        raise DataError(f"the tokenizer file {path} cannot be read ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise DataError(f"the tokenizer file {path} is {exc}; give the tokenizer.json of a Hugging Face "
                        "tokenizer") from None
    return HFTokenizer.from_library_json(data, f"the tokenizer file {path}")


def _ids(data: dict, where: str) -> set[int]:
    """The ids the library JSON gives its tokens, read before the library parses it (which refuses one past
    uint32 in its own words, and lays out every id up to the largest when it writes the file back)."""
    model = data["model"]
    vocab = model.get("vocab")
    if isinstance(vocab, dict):
        ids = {value for value in vocab.values() if isinstance(value, int)}
    elif isinstance(vocab, list):  # Unigram: [token, score] pairs, the id their place
        ids = set(range(len(vocab)))
    else:
        raise DataError(f"{where} has no vocabulary (model.vocab); it is not a tokenizer the tokenizers library wrote")
    added = data.get("added_tokens") or []
    return ids | {token["id"] for token in added if isinstance(token, dict) and isinstance(token.get("id"), int)}


def _decoder_types(node) -> set[str]:
    """The decoder types of the JSON's decoder, a Sequence's members included."""
    if not isinstance(node, dict):
        return set()
    return {node.get("type"), *(kind for member in node.get("decoders") or [] for kind in _decoder_types(member))}


class HFTokenizer:
    """A `tokenizers.Tokenizer` read from a file (`library`), with `data` its JSON as the checkpoint keeps it."""

    kind = "hf"
    default_vocab_size = None  # read from its file: --vocab-size does not apply

    def __init__(self, library: LibraryTokenizer, data: str, where: str = "the hf tokenizer"):
        self.library, self.data = library, data
        config = json.loads(data)
        self.model_type = config["model"]["type"]
        vocab = library.get_vocab(with_added_tokens=True)  # token text -> id
        if not vocab:
            raise DataError(f"{where} has an empty vocabulary; give a trained tokenizer")
        self._size = max(vocab.values()) + 1
        if self._size > MAX_VOCAB:
            raise DataError(f"{where} has ids up to {self._size - 1:,}, more than microgpt's token ids (int32) "
                            f"hold ({MAX_VOCAB - 1:,}); use a tokenizer with a smaller vocabulary")
        unknown = config["model"].get("unk_token")
        self.unknown_id: int | None = (config["model"].get("unk_id") if self.model_type == "Unigram"
                                       else vocab.get(unknown) if unknown is not None else None)
        self._may_drop = self.model_type == "BPE" and self.unknown_id is None and not config["model"].get("byte_fallback")
        decoders = _decoder_types(config.get("decoder"))
        self._ids = np.array(sorted(vocab.values()), dtype=np.int64)  # (entries,) the ids there are, ascending
        specials = {i: token for i, token in library.get_added_tokens_decoder().items() if token.special}
        self.probe = self._find_probe(specials)
        self._characters = self._characters_per_token(specials, decoders, config.get("decoder") is None)
        # byte-fallback tokens decode as one run (an invalid run all U+FFFD), so a run is decoded whole
        self._byte_ids = frozenset(i for token, i in vocab.items() if BYTE_TOKEN.fullmatch(token)
                                   ) if "ByteFallback" in decoders else frozenset()

    @classmethod
    def from_library_json(cls, data, where: str) -> HFTokenizer:
        """The tokenizer of the library's JSON (parsed); a DataError naming `where` when it is not one."""
        if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
            raise DataError(f"{where} is JSON but not a tokenizers file (no 'model'); give the tokenizer.json of a "
                            "Hugging Face tokenizer")
        ids = _ids(data, where)
        top = max(ids, default=-1)
        if top >= MAX_VOCAB:
            raise DataError(f"{where} has ids up to {top:,}, more than microgpt's token ids (int32) hold "
                            f"({MAX_VOCAB - 1:,}); use a tokenizer with a smaller vocabulary")
        if top >= 2 * len(ids) + SPARE_IDS:
            raise DataError(f"{where} has ids up to {top:,} for {len(ids):,} tokens, more gaps than a tokenizer.json "
                            f"has (its ids are below {2 * len(ids) + SPARE_IDS:,}); the file was edited or damaged")
        data = {**data, "truncation": None, "padding": None}  # a training text encodes whole
        if data["model"].get("type") == "BPE":
            data["model"] = {**data["model"], "dropout": None}  # the same text encodes the same way every time
        try:
            library = LibraryTokenizer.from_str(json.dumps(data))
        except Exception as exc:  # noqa: BLE001 - the library raises a bare Exception for any unreadable input
            raise DataError(f"{where} is not a tokenizer the tokenizers library can read ({exc}); give the "
                            "tokenizer.json of a Hugging Face tokenizer") from None
        return cls(library, library.to_str(), where)

    def _find_probe(self, specials: dict) -> int | None:
        """A token that decodes alone to a plain word: what the ids are read after, as in mid-text."""
        for i in self._ids.tolist():
            if i not in specials and self.library.decode([i], skip_special_tokens=False).isalpha():
                return i
        return None

    def _characters_per_token(self, specials: dict, decoders: set, no_decoder: bool) -> np.ndarray:
        """(entries,) the characters each id of `_ids` stands for (the module docstring says how)."""
        ids = self._ids.tolist()
        tokens = [self.library.id_to_token(i) for i in ids]
        if no_decoder:  # the library would join the tokens with spaces, which stand for nothing
            counts = [len(token) for token in tokens]
        else:
            before = [] if self.probe is None else [self.probe]
            shown = len(self.library.decode(before, skip_special_tokens=False))
            decoded = self.library.decode_batch([[*before, i] for i in ids], skip_special_tokens=False)
            counts = [max(0, len(text) - shown) for text in decoded]
        byte_of = {ch: b for b, ch in enumerate(byte_alphabet())} if "ByteLevel" in decoders else {}
        for k, (i, token) in enumerate(zip(ids, tokens)):
            fallback = BYTE_TOKEN.fullmatch(token) if "ByteFallback" in decoders else None
            if i == self.unknown_id:
                counts[k] = 1  # one or more characters it has no token for
            elif fallback:
                counts[k] = int((int(fallback.group(1), 16) & 0xC0) != 0x80)
            elif i in specials:
                counts[k] = len(specials[i].content)  # encoded only from its text, which it stands for
            elif byte_of and all(ch in byte_of for ch in token):
                counts[k] = sum((byte_of[ch] & 0xC0) != 0x80 for ch in token)
        return np.array(counts, dtype=np.int64)

    @classmethod
    def train(cls, text: str, vocab_size: None = None) -> HFTokenizer:
        """Refused: this kind is read from a file (`load_tokenizer_file`), never learnt from a text."""
        raise ConfigError("an hf tokenizer is read from its file, not trained: give --tokenizer PATH/tokenizer.json")

    @property
    def size(self) -> int:
        return self._size

    def encode(self, text: str, source: str = "the text") -> np.ndarray:
        """int32 ids (n,), no special tokens added; a DataError naming source and the place of a character the
        tokenizer cannot encode (its library refuses it, or would drop it without a trace)."""
        found = LONE_SURROGATE.search(text)
        if found:
            self._refuse(text, found.start(), source, "a lone surrogate, which UTF-8 cannot encode")
        if self._may_drop:
            self._check_kept(text, source)
        cut = self.pieces(text)
        parts = [np.zeros(0, dtype=np.int32)]  # each (tokens of one piece,)
        for first in range(0, len(cut), BATCH_PIECES):
            batch = cut[first : first + BATCH_PIECES]
            try:
                encodings = self.library.encode_batch(batch, add_special_tokens=False)
            except Exception as exc:  # noqa: BLE001 - the library raises a bare Exception for a token it lacks
                self._refuse(text, self._first_unencodable(text), source, f"which the tokenizer cannot encode ({exc})")
            parts.extend(np.array(encoding.ids, dtype=np.int32) for encoding in encodings)
        return np.concatenate(parts)

    def pieces(self, text: str) -> list[str]:
        """text cut into pieces of about PIECE_CHARS characters, each cut just before a newline or space that
        encodes the same cut as whole (CUT_WINDOW characters each side); after CUT_TRIES candidates that do
        not (a tokenizer whose words span them), the rest stays whole."""
        out, start = [], 0
        while len(text) - start > 2 * PIECE_CHARS:
            candidates = CUT_BEFORE.finditer(text, start + PIECE_CHARS)
            cut = next((m.start() for _, m in zip(range(CUT_TRIES), candidates) if self._cuts_alike(text, m.start())),
                       None)
            if cut is None:
                break
            out.append(text[start:cut])
            start = cut
        out.append(text[start:])
        return out

    def _cuts_alike(self, text: str, cut: int) -> bool:
        left, right = text[max(0, cut - CUT_WINDOW) : cut], text[cut : cut + CUT_WINDOW]
        apart = self.library.encode_batch([left, right, left + right], add_special_tokens=False)
        return apart[0].ids + apart[1].ids == apart[2].ids

    def _check_kept(self, text: str, source: str) -> None:
        """A BPE without an unknown token drops a character it has no token for (merging its neighbours across
        the gap, so offsets do not show it): each distinct character is tried alone; the first lost is refused."""
        lost = [ch for ch in set(text) if self._drops(ch)]
        if lost:
            self._refuse(text, min(text.index(ch) for ch in lost), source,
                         "for which the tokenizer has no token and no unknown token, so it would be lost")

    def _drops(self, ch: str) -> bool:
        """Whether ch is lost for want of a token (not removed on purpose by the normaliser or pre-tokenizer)."""
        normalized = self.library.normalizer.normalize_str(ch) if self.library.normalizer else ch
        pre = self.library.pre_tokenizer
        words = [word for word, _ in pre.pre_tokenize_str(normalized)] if pre else [normalized]
        return any(word and not self.library.model.tokenize(word) for word in words)

    def _first_unencodable(self, text: str) -> int:
        """The offset of the first character that the library refuses to encode on its own (0 if none is)."""
        bad = []
        for ch in set(text):
            try:
                self.library.encode(ch, add_special_tokens=False)
            except Exception:  # noqa: BLE001 - the library's bare Exception is the answer sought
                bad.append(text.index(ch))
        return min(bad, default=0)

    @staticmethod
    def _refuse(text: str, index: int, source: str, why: str):
        ch = text[index] if index < len(text) else ""
        line = text.count("\n", 0, index) + 1
        raise DataError(f"{source} has the character {ch!r} (U+{ord(ch or ' '):04X}) at offset {index} (line {line}), "
                        f"{why}; remove it, or use a tokenizer that covers it") from None

    def decode(self, ids) -> str:
        return self.library.decode([int(i) for i in ids], skip_special_tokens=False)

    def decoder(self) -> ContinuingDecoder:
        return ContinuingDecoder(self.library, self.probe, self._byte_ids)

    def to_json(self) -> dict:
        return {"kind": self.kind, "data": self.data}

    @classmethod
    def from_json(cls, data: dict) -> HFTokenizer:
        text = data.get("data")
        if not isinstance(text, str):
            raise DataError("the hf tokenizer's JSON has no 'data' string (the tokenizers library's JSON)")
        try:
            library = LibraryTokenizer.from_str(text)
        except Exception as exc:  # noqa: BLE001 - the library raises a bare Exception for any unreadable input
            raise DataError(f"the hf tokenizer's data is not a tokenizer the tokenizers library can read ({exc})") from None
        return cls(library, text)

    def describe(self) -> str:
        return f"hf: {self.size:,} tokens ({self.model_type}, from a tokenizer.json)"

    def extended_for(self, text: str) -> HFTokenizer:
        """Itself, which cannot grow: a DataError naming a character of text it cannot encode, if there is one."""
        self.encode(text, source="the text to fine-tune on")
        return self

    def count_characters(self, ids) -> int:
        """The characters the ids stand for, a fixed count per id (module docstring), so pieces add up."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        at = np.minimum(np.searchsorted(self._ids, ids), len(self._ids) - 1)  # (n,) where each id is, if there
        return int(np.where(self._ids[at] == ids, self._characters[at], 0).sum())

    def start_text(self) -> str:
        """A newline, else a space, else a full stop, where one encodes to known tokens; else the probe word."""
        for text in ("\n", " ", "."):
            try:
                ids = self.encode(text)
            except DataError:
                continue
            if len(ids) and self.unknown_id not in ids.tolist():
                return text
        return self.decode([self.probe if self.probe is not None else int(self._ids[0])])


class ContinuingDecoder:
    """Text as ids arrive, read as continuing a text (after `probe`): each id's text is the difference between
    decoding a short window of ids with and without it, held back while it ends in an incomplete character
    (U+FFFD) or a run of byte-fallback tokens (`byte_ids`, which decode together) and given once the rest
    arrives; `flush` gives what is held. The pieces joined are the ids' text after the probe's, as `decode` of
    the probe and the ids gives it (checked on random ids for each kind of model, in tests/data/test_hf_tokenizer.py)."""

    def __init__(self, library: LibraryTokenizer, probe: int | None, byte_ids: frozenset = frozenset()):
        self.library, self._byte_ids = library, byte_ids
        self._ids = [] if probe is None else [probe]
        self._prefix = 0  # the window starts here
        self._read = len(self._ids)  # ids before this have been given out

    def _text(self) -> tuple[str, str]:
        """The window decoded without the ids not given out yet, and with them."""
        window = self._ids[self._prefix :]
        before = self.library.decode(window[: self._read - self._prefix], skip_special_tokens=False)
        return before, self.library.decode(window, skip_special_tokens=False)

    def add(self, token_id: int) -> str:
        self._ids.append(int(token_id))
        if token_id in self._byte_ids:
            return ""
        before, now = self._text()
        if len(now) <= len(before) or now.endswith("\ufffd"):
            return ""
        self._prefix, self._read = self._read, len(self._ids)
        return now[len(before) :]

    def flush(self) -> str:
        before, now = self._text()
        self._prefix = self._read = len(self._ids)
        return now[len(before) :]
