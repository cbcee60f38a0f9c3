"""The run settings beside a graph document in the node editor (data, training, and in family mode the family's
shape): which of them the inspector shows and how (`settings_form`, GET /api/graph/settings), each read by its
setting's own check (the flag's) and checked by the library's rules, each problem said on its setting; and what
the check needs of them: the vocabulary and context the document is compiled for, the micro-batch a step runs,
a tokenizer for the causality check, the family's config in family mode.

A text is kept while its file is unchanged (`corpus_text`, by its path, modification time and size), and its
characters with it, so a check after an edit reads nothing again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from microgpt.core.checks import Choice, Switch, shown
from microgpt.core.errors import NO_VALUE, ConfigError, DataError, Named, UserError, as_flag
from microgpt.core.registry import FAMILIES
from microgpt.data.corpus import Corpus
from microgpt.data.dataset import is_dataset
from microgpt.data.tokenizer import Tokenizer
from microgpt.model.family import family
from microgpt.model.graph.from_family import WRITERS
from microgpt.model.priors import STAND_IN_VOCAB, stand_in_tokenizer
from microgpt.settings.known import family_keys, known_settings
from microgpt.settings.sources import Settings
from microgpt.training.plan import plan

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
MODE_KEYS = ("family", "graph")  # the editor's mode and its document say these, not the settings
_cache: dict = {}  # "default": the bundled docs' Corpus, read once


@dataclass
class DraftSettings:
    """A draft's run settings as planned (training/plan.py), and what the check of its graph needs of them."""

    values: dict = field(default_factory=dict)  # the clean settings, as YAML writes them
    settings: Settings | None = None  # None when a setting has a problem
    config: object | None = None  # the family's config in family mode
    vocab: int = STAND_IN_VOCAB
    seq_len: int = known_settings()["seq_len"].default
    micro_batch: int = known_settings()["batch_size"].default
    characters: str | None = None  # a char tokenizer's vocabulary, the text's own

    @property
    def tokenizer_key(self) -> str:
        return self.characters or str(self.vocab)

    def tokenizer(self) -> Tokenizer:
        """The text's char tokenizer, or a stand-in of the vocabulary's size (model/priors.py)."""
        return stand_in_tokenizer(self.vocab, self.characters)


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


def corpus_of(file: str | None, workspace, max_corpus: int | None) -> Corpus:
    """What a run would train on: a text file inside the workspace (read as train reads it), the bundled docs,
    or a prepared dataset (its manifest and shard sizes read, the checksums left to the run). The last file's
    Corpus is kept by its path, modification time, size and limit (checks run on worker threads, two at a
    time: the key and its Corpus are stored and read as one item), and with it the tokenizer made from it."""
    limit = max_corpus or known_settings()["max_corpus"].default
    if file is None:
        if "default" not in _cache:
            _cache["default"] = Corpus.load(None, limit)
        return _cache["default"]
    path = workspace.inside(file, what="the data file")
    if is_dataset(path):
        return Corpus.load(str(path), limit, verify=False)
    try:
        stat = path.stat()
    except OSError:
        return Corpus.load(str(path), limit)  # its one line: no such file, a name too long, unreadable
    key = (str(path), stat.st_mtime_ns, stat.st_size, limit)
    kept_key, kept = workspace.corpus_cache.get("last", (None, None))
    if kept_key == key:
        return kept
    corpus = Corpus.load(str(path), limit)
    workspace.corpus_cache["last"] = (key, corpus)  # one item: a check of another file on another thread never mixes
    return corpus


def as_field(named: Named) -> str:
    """A setting as the inspector names it: its field ("lr"), with a value as YAML writes it ("lr: 0.5"); a named
    run's as every front end says it."""
    if named.origin is not None:
        return as_flag(named)
    if named.value is NO_VALUE:
        return named.key
    return f"{named.key}: {','.join(map(str, named.value)) if isinstance(named.value, tuple) else named.value}"


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
            checked.add(ConfigError(Named(key), f" must be {exc}, not {shown(raw)}").worded(as_field), setting=key)
            continue
        if value is not None:
            values[key] = value
    return values


def run_settings(given: dict, family_name: str | None, workspace, checked) -> DraftSettings:
    """The settings read and planned as `microgpt train` plans them (problems added to `checked` on their
    setting, in the inspector's words), and what a check needs. In graph mode the document is the caller's to
    compile, so the plan leaves the model to it."""
    run = DraftSettings()
    values = {"family": family_name or "graph", **_read(given, checked)}
    run.seq_len = values.get("seq_len", run.seq_len)
    for key, value in values.items():
        try:
            workspace.check_run_paths({key: value})
        except ConfigError as exc:
            checked.add(exc.worded(as_field), setting=key)
            return run
    try:
        corpus = corpus_of(values.get("file"), workspace, values.get("max_corpus"))
    except (ConfigError, DataError) as exc:
        checked.add(exc.worded(as_field), setting="file")
        return run
    if checked.errors:
        return run
    try:
        settings = Settings(values)
        planned = plan(settings, corpus=corpus, model=family_name is not None, place=False)
    except UserError as exc:
        checked.add(exc.worded(as_field), setting=exc.key)
        return run
    run.config, run.vocab, run.seq_len = planned.config, planned.vocab_size, planned.seq_len
    run.micro_batch = planned.settings.micro_batch
    if planned.tokenizer is not None and planned.tokenizer.kind == "char":
        run.characters = planned.tokenizer.vocab
    run.settings = settings
    run.values = {key: yaml_value(value) for key, value in values.items()}
    return run
