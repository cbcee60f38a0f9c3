"""The run settings beside a graph document in the node editor (data, training, and in family mode the family's
shape), read and checked by the library's rules as compose.py reads the canvas's, each problem said on its
setting; and what the check needs of them: the vocabulary and context the document is compiled for, the
micro-batch a step runs, a tokenizer for the causality check, the family's config in family mode.

A text's vocabulary is kept while the file is unchanged (compose.corpus_text keeps the text by its path,
modification time and size), so a check after an edit reads nothing again.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass, field

from microgpt.core.checks import shown
from microgpt.core.errors import ConfigError, DataError
from microgpt.data.corpus import default_corpus, split_validation
from microgpt.data.tokenizer import tokenizer_kind
from microgpt.data.tokenizer.char import CharTokenizer
from microgpt.model.family import family
from microgpt.settings.known import known_settings
from microgpt.settings.sources import Settings
from microgpt.studio.compose import corpus_of, read_value, yaml_value
from microgpt.training.corpus import check_dataset_settings, with_held_out
from microgpt.training.data_parallel import micro_batch_size

DEFAULT_VOCAB = 65  # tinyshakespeare's characters, as `graph check`: the vocabulary while the data is in doubt
MODE_KEYS = ("family", "graph")  # the editor's mode and its document say these, not the settings
CALCULATOR_CHARACTERS = string.digits + "+= \n"  # a calculator prior reads ids as these; letters fill the rest
_cache: dict = {}  # "default": the default corpus; "characters": (the last text, its characters), by identity


@dataclass
class RunSettings:
    values: dict = field(default_factory=dict)  # the clean settings, as YAML writes them
    settings: Settings | None = None  # None when a setting has a problem
    config: object | None = None  # the family's config in family mode
    vocab: int = DEFAULT_VOCAB
    seq_len: int = known_settings()["seq_len"].default
    micro_batch: int = known_settings()["batch_size"].default
    characters: str | None = None  # a char tokenizer's vocabulary, the text's own

    @property
    def tokenizer_key(self) -> str:
        return self.characters or str(self.vocab)

    def tokenizer(self) -> CharTokenizer:
        """The text's char tokenizer, or a stand-in of the vocabulary's size (only a calculator prior reads what
        the ids stand for: digits, + = space and newline first, as `graph check` has them)."""
        if self.characters is not None:
            return CharTokenizer(self.characters)
        characters = CALCULATOR_CHARACTERS + string.ascii_letters
        characters += "".join(chr(0x100 + i) for i in range(max(0, self.vocab - len(characters))))
        return CharTokenizer(characters[: self.vocab])


def setting_named(message: str, keys) -> str | None:
    """The setting a library message names first (by its flag, or its YAML key), among `keys`."""
    best, first, fields = None, len(message) + 1, known_settings()
    for key in keys:
        found = re.search(rf"(?<![\w-])({re.escape(fields[key].flag)}|{re.escape(key)})(?![\w-])", message)
        if found and found.start() < first:
            best, first = key, found.start()
    return best


def _read(settings: dict, checked) -> dict:
    """Each given setting read by its own check (text as the flag's, other values as YAML's)."""
    values, fields = {}, known_settings()
    for key, raw in settings.items():
        if key not in fields:
            checked.add(f"unknown setting {shown(key)}; the settings are the train flags' YAML keys (seq_len, "
                        "batch_size, ...)", setting=str(key))
            continue
        if key in MODE_KEYS:
            checked.add(f"{key} is the editor's to say (its mode, its document); drop it from the settings",
                        setting=key)
            continue
        try:
            value = read_value(key, raw) if isinstance(raw, str) or raw is None else fields[key].check.from_yaml(raw)
        except ValueError as exc:
            checked.add(f"{fields[key].flag} must be {exc}, not {shown(raw)}", setting=key)
            continue
        if value is not None:
            values[key] = value
    return values


def _characters(text: str) -> str:
    """The text's characters, sorted; the last text's kept as one item (text, characters), since two checks
    run at once on worker threads."""
    kept_text, kept = _cache.get("characters", (None, None))
    if kept_text is text:
        return kept
    characters = "".join(sorted(set(text)))
    _cache["characters"] = (text, characters)
    return characters


def _corpus(values: dict, workspace):
    if values.get("file") is None:  # the bundled docs, made once
        if "default" not in _cache:
            _cache["default"] = default_corpus()[0]
        return _cache["default"], None
    return corpus_of(values["file"], workspace, values.get("max_corpus"))


def run_settings(given: dict, family_name: str | None, workspace, checked) -> RunSettings:
    """The settings read and checked (problems added to `checked` on their setting), and what a check needs."""
    run = RunSettings()
    values = {"family": family_name or "graph", **_read(given, checked)}
    run.seq_len = values.get("seq_len", run.seq_len)
    for key, value in values.items():
        try:
            workspace.check_run_paths({key: value})
        except ConfigError as exc:
            checked.add(str(exc), setting=key)
            return run
    try:
        text, dataset = _corpus(values, workspace)
    except (ConfigError, DataError) as exc:
        checked.add(str(exc), setting="file")
        return run
    if checked.errors:
        return run
    try:
        settings = Settings(values)
        train_config = settings.train_config()
        if dataset is not None:
            check_dataset_settings(settings, dataset.path)
            run.vocab = dataset.tokenizer.size
        elif tokenizer_kind(settings.value("tokenizer")).default_vocab_size is None:
            run.characters = _characters(text)
            run.vocab = len(run.characters)
        else:
            run.vocab = settings.value("vocab_size") or tokenizer_kind(settings.value("tokenizer")).default_vocab_size
        if family_name is not None:
            run.config = settings.model_config(run.vocab)
            kind = family(family_name)
            if hasattr(kind, "check_training"):
                kind.check_training(run.config, train_config)
        run.seq_len = settings.value("seq_len")
        resolved = train_config if dataset is not None else with_held_out(train_config, len(text), run.seq_len)
        if run.characters is not None:  # a char per token: the text's windows are known before training
            split_validation(range(len(text)), resolved.val_tokens, run.seq_len)
        settings.check_all_used(resolved)
        run.micro_batch = micro_batch_size(train_config.batch_size, train_config.grad_accum, 1)
    except (ConfigError, DataError) as exc:
        checked.add(str(exc), setting=setting_named(str(exc), values) or setting_named(str(exc), known_settings()))
        run.config = None
        return run
    run.settings = settings
    run.values = {key: yaml_value(value) for key, value in values.items()}
    return run
