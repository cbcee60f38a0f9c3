"""The run settings beside a graph document in the node editor (data, training, and in family mode the family's
shape): which of them the inspector shows and how (`settings_form`, GET /api/graph/settings), each read by its
setting's own check (the flag's) and checked by the library's rules, each problem said on its setting; and what
the check needs of them: the vocabulary and context the document is compiled for, the micro-batch a step runs,
a tokenizer for the causality check, the family's config in family mode.

A text is kept while its file is unchanged (`corpus_text`, by its path, modification time and size), and its
characters with it, so a check after an edit reads nothing again.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass, field

from microgpt.core.checks import Choice, Switch, shown
from microgpt.core.errors import ConfigError, DataError
from microgpt.core.registry import FAMILIES
from microgpt.data.corpus import default_corpus, read_corpus, split_validation
from microgpt.data.dataset import is_dataset, open_dataset
from microgpt.data.tokenizer import tokenizer_kind
from microgpt.data.tokenizer.char import CharTokenizer
from microgpt.model.family import family
from microgpt.model.graph.from_family import WRITERS
from microgpt.settings.known import family_keys, known_settings
from microgpt.settings.sources import Settings
from microgpt.training.corpus import check_dataset_settings, with_held_out
from microgpt.training.data_parallel import micro_batch_size

# The inspector's settings: the data's, the training's, and each family's shape (its config's keys but these).
DATA_KEYS = ("file", "tokenizer", "vocab_size", "seq_len")
TRAINING_KEYS = ("steps", "batch_size", "lr", "warmup", "lr_schedule", "weight_decay", "grad_clip", "val_tokens",
                 "eval_every", "save_every", "seed", "backend", "threads", "gen")
TRAINING_TEMPLATE = {"threads": "1"}  # written into every new draft: one thread per run, so several share the cores
# The families the editor offers, each drawn as its graph (model/graph/from_family): a label and the values of a
# first model where the defaults will not do. A registered family with a from-family writer and no entry here is
# offered under its own name.
FAMILY_FORMS = {"gpt": ("GPT", {}), "ensemble": ("cooperative ensemble", {"cooperative": "d4x16n2,d4x16n2"}),
                "lookahead": ("lookahead", {})}
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


def offered_families() -> list[str]:
    """The families the editor offers: those registered that have a from-family graph."""
    return [name for name in WRITERS if name in FAMILIES]


def shape_keys(family_name: str) -> list[str]:
    """A family's shape settings as the inspector shows them: its config's keys but the data's."""
    return [key for key in family_keys(family(family_name)) if key not in DATA_KEYS]


def setting_description(key: str) -> dict:
    """A setting as the inspector shows it: its flag, help, default and the kind of input it takes."""
    f = known_settings()[key]
    entry = {"key": key, "flag": f.flag, "help": f.help, "default": f.default_text, "input": "text"}
    if isinstance(f.check, Switch):
        entry["input"] = "switch"
    elif isinstance(f.check, Choice):
        entry["input"], entry["options"] = "choice", list(f.check.options)
    return entry


def settings_form() -> dict:
    """What the inspector needs to show a draft's settings, as JSON: {"families": {name: {label, shape: [keys],
    template: {key: value}}}, "data": [keys], "training": [keys], "template": {key: value}, "settings": {key:
    its description}}."""
    families = {name: {"label": FAMILY_FORMS.get(name, (name, {}))[0], "shape": shape_keys(name),
                       "template": FAMILY_FORMS.get(name, (name, {}))[1]} for name in offered_families()}
    keys = {*DATA_KEYS, *TRAINING_KEYS, *(key for described in families.values() for key in described["shape"])}
    return {"families": families, "data": list(DATA_KEYS), "training": list(TRAINING_KEYS),
            "template": TRAINING_TEMPLATE, "settings": {key: setting_description(key) for key in sorted(keys)}}


def read_value(key: str, raw):
    """A value the page sent, read by its setting's check as the flag's text is; None for one left empty."""
    check = known_settings()[key].check
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return None
    if isinstance(check, Switch):
        return check.from_yaml(raw)
    return check.from_text(str(raw).strip())


def yaml_value(value):
    """A clean setting value as YAML writes it (tuples as lists)."""
    return list(value) if isinstance(value, tuple) else value


def corpus_of(file: str | None, workspace, max_corpus: int | None):
    """(text, None) for a text a run would train on, or ("", the dataset) for a prepared dataset in the
    workspace (its manifest and shard sizes read, the checksums left to the run)."""
    if file is not None and is_dataset(workspace.inside(file, what="the data file")):
        return "", open_dataset(workspace.inside(file, what="the data file"), verify=False)
    return corpus_text(file, workspace, max_corpus), None


def corpus_text(file: str | None, workspace, max_corpus: int | None) -> str:
    """The text a run would train on: a file inside the workspace (read as train reads it), or the bundled docs.
    The last file's text is kept by its path, modification time, size and limit (checks run on worker threads,
    two at a time: the key and its text are stored and read as one item)."""
    if file is None:
        return default_corpus()[0]
    path = workspace.inside(file, what="the data file")
    limit = max_corpus or known_settings()["max_corpus"].default
    try:
        stat = path.stat()
    except OSError:
        return read_corpus(path, limit)  # its one line: no such file, a name too long, unreadable
    key = (str(path), stat.st_mtime_ns, stat.st_size, limit)
    kept_key, kept_text = workspace.corpus_cache.get("last", (None, None))
    if kept_key == key:
        return kept_text
    text = read_corpus(path, limit)
    workspace.corpus_cache["last"] = (key, text)  # one item: a check of another file on another thread never mixes
    return text


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
