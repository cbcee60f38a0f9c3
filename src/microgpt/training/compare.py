"""`--compare`: several model specs trained in turn on the same text, tokenizer, batches, seed and steps.

`plan_compare` plans every spec as one run is planned (training/plan.py `plan`:
its settings, shape and training checks), then checks its memory and where it
saves (each directory claimed before the first spec trains), before any training;
`Comparison.runs` then makes each spec's run when it is reached, so only one
model is in memory at a time. The specs are the family's shape strings
(`parse_specs`); each spec is its own settings over the command's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from microgpt.backends import Backend
from microgpt.core.errors import ConfigError, Named, Placeholder
from microgpt.data.corpus import Corpus, short_vocabulary
from microgpt.data.tokenizer import Tokenizer
from microgpt.model.checkpoint import CONFIG
from microgpt.model.family import family, n_params
from microgpt.model.memory import check_memory
from microgpt.settings.sources import Settings
from microgpt.settings.training import TrainConfig
from microgpt.training.plan import claim, make_batches, plan
from microgpt.training.resolve import check_overwrite
from microgpt.training.run import Run
from microgpt.training.run_dir import (
    WriterLock,
    check_plain_file,
    check_replaceable,
    check_run_files,
    check_target,
)
from microgpt.training.run_files import COMPARE_PLOT, DEFAULT_ROOT, RunPaths
from microgpt.training.tensorboard_log import check_board_dir


@dataclass
class Comparison:
    """Several model specs to train in turn on the same data, batches, seed and steps."""

    specs: list[str]  # as written
    configs: list  # each spec's family config
    family_name: str
    corpus: Corpus
    tokenizer: Tokenizer
    train_tokens: np.ndarray
    val_tokens: np.ndarray | None
    train_config: TrainConfig
    backend: Backend
    base: Path | None  # the directory holding one checkpoint per spec; None without saving
    locks: list[WriterLock | None]  # each spec's checkpoint directory, claimed before the first spec trains
    notes: list[str]  # the finished checkpoints (or with --overwrite, unfinished ones) that the specs replace
    board: bool = False  # --log tensorboard: each spec's event files beside its checkpoint

    def runs(self) -> Iterator[Run]:
        """Each spec's run, made when it is reached (so only one model is in memory at a time); close each run
        when it is done (which releases its directory), and the comparison at the end."""
        kind = family(self.family_name)
        for spec, config, lock in zip(self.specs, self.configs, self.locks):
            model = kind.build(config, self.backend, self.tokenizer, self.train_config.seed)
            if hasattr(model, "learn_from"):  # the family's counts, from the training tokens alone
                model.learn_from(self.train_tokens)
            batches = make_batches(self.train_tokens, config.seq_len, self.train_config)
            paths = RunPaths(None if lock is None else lock.directory, board=self.board)
            yield Run(model, self.family_name, self.tokenizer, self.corpus, batches, self.val_tokens,
                      self.train_config, paths, self.corpus.run_info(self.train_config), spec, lock=lock)

    def close(self) -> None:
        """Release the directories of specs that did not train (a comparison that stopped early)."""
        for lock in self.locks:
            if lock is not None:
                lock.release()


def plan_compare(settings: Settings, specs_text: str, backend: Backend, save: bool = True,
                    overwrite: bool = False) -> Comparison:
    """Every spec of `specs_text` (the family's shape strings, `parse_specs`) checked (shape, memory, and where
    it saves: each directory locked for this comparison, and none an unfinished checkpoint unless `overwrite`)
    before any training."""
    check_overwrite(overwrite, save, None)
    kind, family_name = settings.family, settings.value("family")
    if not hasattr(kind, "parse_specs"):
        raise ConfigError(Named("compare"), f" takes model specs, and the {family_name} family has none; compare "
                          "its runs with ", Named("config", Placeholder("FILE")), " (named runs) instead")
    for key in kind.SPEC_KEYS:
        if settings.given(key):
            raise ConfigError(settings.mention(key), " sets the model shape, but ", Named("compare"),
                              " takes it from each spec; drop it")
    specs = kind.parse_specs(specs_text, settings)
    corpus = Corpus.load(settings.value("file"), settings.value("max_corpus"))
    planned = [plan(Settings({**settings.explicit, **values}, settings.named), save=save, corpus=corpus,
                    place=False) for _, values in specs]  # every spec's settings, shape and training checked
    train_config = planned[0].settings.train
    backend.use_precision(train_config.precision)
    board = planned[0].settings.run.log == "tensorboard"  # the tensorboard extra is checked here
    tokenizer = planned[0].tokenizer or corpus.new_tokenizer(settings.value("tokenizer"), settings.value("vocab_size"))
    configs = [dataclasses.replace(each.config, vocab_size=tokenizer.size) for each in planned]
    for (text, _), config, each in zip(specs, configs, planned):
        check_memory(kind, config, each.settings.micro_batch, backend, each.settings.run.max_memory, f"spec {text}")
    names = [text for text, _ in specs]
    base, notes = None, [short_vocabulary(settings.value("vocab_size"), tokenizer)]
    if save:
        label = settings.named.id if settings.named else corpus.name
        base = settings.path("model") or DEFAULT_ROOT / f"{label}-compare"
        if (base / CONFIG).exists() or (base.exists() and not base.is_dir()):
            raise ConfigError(f"{base} is a checkpoint or a file; ", Named("compare"), " writes one checkpoint per "
                              "spec inside ", Named("model", Placeholder("DIR")), ", so pick a directory that is "
                              "neither", key="model")
        for name in names:  # every spec's place and files, before the first spec trains
            check_target(base / name)
            notes.append(check_replaceable(base / name, overwrite))
            check_run_files(base / name)
            if board:
                check_board_dir(RunPaths(base / name, board=True).tensorboard)
        check_plain_file(base / COMPARE_PLOT)
    seq_len = configs[0].seq_len
    train_tokens, val_tokens, train_config = corpus.split(tokenizer, train_config, seq_len)
    settings.check_all_used(train_config, save=save, compare=True)
    locks = ([claim(base / name, n_params(kind, config)) for name, config in zip(names, configs)]
             if base is not None else [None] * len(specs))
    return Comparison(names, configs, family_name, corpus, tokenizer, train_tokens, val_tokens, train_config, backend,
                      base, locks, [note for note in notes if note], board)
