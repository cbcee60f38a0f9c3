"""A training run, from settings to a trained model and everything written beside it.

`prepare` turns `Settings` into a ready `Run`: the corpus and its tokenizer
(trained on it, or the checkpoint's), the model of the chosen family (new, or
restored from a checkpoint to resume), the batches, the held-out tokens and
where the checkpoint goes, after every check that can fail early (shapes,
memory, a directory that is not a checkpoint). It is typed against the family
protocol (model/family.py) and the backend contract, naming neither a family
nor a backend.
`Run.train` runs the `Trainer`; `Run.finish` appends the results line and draws
the loss plot. `prepare_compare` does the same for several model specs (the
family's shape strings) on the same data. `train` is the whole thing in one call, for use from Python:

    import microgpt
    run, summary = microgpt.train("input.txt", steps=2000, d_model=128, batch_size=16)
    print(run.sample(200))
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from microgpt import machine
from microgpt.all_settings import known_settings
from microgpt.backends import Backend, backend_class, resolve_auto
from microgpt.checkpoint import CONFIG, CheckpointError, is_checkpoint, load_checkpoint
from microgpt.config import TrainConfig
from microgpt.data import (
    RandomBatches,
    SequentialBatches,
    default_corpus,
    held_out_count,
    read_corpus,
    split_validation,
)
from microgpt.data_parallel import RankShare, micro_batch_size
from microgpt.distributed import SingleProcess, communicator
from microgpt.errors import ConfigError
from microgpt.memory import check_memory
from microgpt.model.family import config_dict, family, n_params
from microgpt.plot import plot_available, write_loss_plot
from microgpt.presets import REFERENCE_OPTIMIZER
from microgpt.progress import Progress
from microgpt.run_dir import (
    WriterLock,
    check_plain_file,
    check_replaceable,
    check_run_files,
    check_target,
    check_writable,
)
from microgpt.run_files import COMPARE_PLOT, DEFAULT_ROOT, RunPaths, open_own
from microgpt.sample import generate
from microgpt.settings import Settings
from microgpt.tokenizer import Tokenizer, tokenizer_kind, train_tokenizer
from microgpt.trainer import RunSummary, Trainer, step_on_disk

DEFAULT_CORPUS_NAME = "python-docs"
RESUME_AUTO = "auto"  # --resume auto: the checkpoint in --model if there is one, else a new run there


@dataclass
class Corpus:
    text: str
    description: str  # "FILE (N characters)", for messages and the checkpoint
    name: str  # the default checkpoint name
    file: str | None  # None: the bundled Python docs
    sha256: str

    @classmethod
    def load(cls, file: str | None, max_bytes: int) -> Corpus:
        if file is None:
            text, description = default_corpus()
            name = DEFAULT_CORPUS_NAME
        else:
            text = read_corpus(file, max_bytes)
            description, name = f"{file} ({len(text):,} characters)", Path(file).stem
        return cls(text, description, name, file, hashlib.sha256(text.encode("utf-8")).hexdigest())

    def run_info(self, train_config: TrainConfig, best_val_loss: float | None = None) -> dict:
        """What a run keeps in train_state.json besides the step and data position: its corpus (the file as an
        absolute path, so a resume finds it from any directory) and settings."""
        absolute = None if self.file is None else str(Path(self.file).resolve())
        return {"corpus": self.description, "corpus_file": absolute, "corpus_sha256": self.sha256,
                "best_val_loss": best_val_loss, "train_config": vars(train_config)}


@dataclass
class Run:
    """One training run, ready to train: the model, its data, its settings and where it writes."""

    model: object  # a model of the family `family_name` (model/family.py)
    family_name: str
    tokenizer: Tokenizer
    corpus: Corpus
    batches: SequentialBatches | RandomBatches
    val_tokens: np.ndarray | None
    train_config: TrainConfig
    paths: RunPaths
    run_info: dict
    label: str | None  # the run id or spec, for results.jsonl and the plot title
    resumed: bool = False
    comm: object = SingleProcess()  # the processes training this model (microgpt/distributed.py)
    lock: WriterLock | None = None  # held on the checkpoint directory while the run lives
    notes: list[str] = field(default_factory=list)  # settings of a resume that override the checkpoint's
    done: bool = False  # --resume auto of a checkpoint already at its --steps: nothing to train or write

    def __enter__(self) -> Run:  # noqa: PYI034 - typing.Self needs Python 3.11
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        """Release the checkpoint directory for other runs."""
        if self.lock is not None:
            self.lock.release()

    def train(self, progress: Progress | None = None) -> RunSummary:
        if self.done:
            return RunSummary(steps=self.model.params.step, steps_run=0, final_loss=math.nan, val_loss=None,
                              best_val_loss=self.run_info.get("best_val_loss"), seconds=0.0, tokens_per_sec=0.0,
                              checkpoint=self.paths.checkpoint)
        progress = progress or Progress(quiet=True)
        trainer = Trainer(self.model, self.family_name, self.tokenizer, self.batches, self.val_tokens,
                          self.train_config, self.paths, progress, self.run_info, self.comm)
        return trainer.run()

    def finish(self, summary: RunSummary) -> Path | None:
        """After a run that saved a checkpoint: one line in results.jsonl beside it, and the loss plot where
        matplotlib is installed. Returns the plot's path, or None when none was drawn."""
        if summary.checkpoint is None or summary.steps_run == 0:
            return None
        png = self.paths.loss_plot
        try:
            self._log_result(summary)
            if not plot_available():
                return None
            title = (f"{self.label or summary.checkpoint.name}: {self.description}, "
                     f"{self.model.n_params:,} parameters")
            return write_loss_plot(self.paths.metrics, png, title)
        except OSError as exc:
            raise CheckpointError(f"cannot write {exc.filename or png} ({exc.strerror or exc}); the checkpoint at "
                                  f"{summary.checkpoint} was saved") from None

    @property
    def description(self) -> str:
        """The model in one line, as its family describes it."""
        return family(self.family_name).describe(self.model.config)

    def sample(self, n_tokens: int, prompt: str = "", temperature: float = 0.8, seed: int | None = None,
               on_text=None) -> str:
        """n_tokens tokens of text from the trained model (the run's seed unless one is given)."""
        seed = self.train_config.seed if seed is None else seed
        return generate(self.model, self.tokenizer, prompt, n_tokens, temperature=temperature, seed=seed,
                        on_text=on_text)

    def _log_result(self, summary: RunSummary) -> None:
        """One line in results.jsonl beside a saved checkpoint: what was trained, how long, and how well."""
        tc = self.train_config
        record = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "run": self.label, "family": self.family_name,
            "model": self.description, "config": config_dict(self.model.config), "tokenizer": self.tokenizer.kind,
            "parameters": self.model.n_params, "steps": summary.steps,
            "steps_run": summary.steps_run, "batch_size": tc.batch_size, "grad_accum": tc.grad_accum,
            "processes": self.comm.size, "lr": tc.lr,
            "final_loss": summary.final_loss, "val_loss": summary.val_loss, "best_val_loss": summary.best_val_loss,
            "seconds": round(summary.seconds, 3), "tokens_per_sec": round(summary.tokens_per_sec, 1),
            "backend": self.model.be.name, "machine": machine.describe(), "checkpoint": str(summary.checkpoint),
            "interrupted": summary.interrupted,
        }
        with open_own(self.paths.results, "a") as log:
            log.write(json.dumps(record) + "\n")


def start_backend(name: str, comm=None, threads: int | None = None) -> tuple[Backend, str | None]:
    """The backend a run asked for, and for "auto" a note saying which one it picked and why. A backend on the
    CPU uses `threads` for BLAS and its kernels (default: threads.default_threads). With several processes on
    the GPU, each first takes its own GPU (`comm.use_local_gpu`)."""
    picked = resolve_auto() if name == "auto" else name
    kind = backend_class(picked)
    if comm is not None and kind.on_gpu:
        comm.use_local_gpu()
    backend = kind.start(threads)
    if name != "auto":
        return backend, None
    return backend, f"backend: {picked} (auto: {'a GPU is usable' if kind.on_gpu else 'no usable GPU'})"


def make_batches(train_tokens: np.ndarray, seq_len: int, config: TrainConfig, comm=None):
    """The global batches, of which each of several processes keeps its share."""
    if config.random_batches:
        batches = RandomBatches(train_tokens, seq_len, config.batch_size, config.seed)
    else:
        batches = SequentialBatches(train_tokens, seq_len, config.batch_size, config.stride)
    return batches if comm is None or comm.size == 1 else RankShare(batches, comm.rank, comm.size)


def prepare(settings: Settings, backend: Backend, resume: Path | str | None = None, save: bool = True, comm=None,
            init_from: Path | None = None, overwrite: bool = False) -> Run:
    """A run ready to train: a new model from the settings, the checkpoint `resume` continued, or a new run
    that starts from the weights of the checkpoint `init_from` (fine-tuning: a fresh optimiser and schedule,
    step 0). `resume` RESUME_AUTO continues the checkpoint in --model if there is one (a Run that is `done`
    when it is at its steps already) and is a new run there otherwise. `comm` (default: as launched,
    microgpt/distributed.py) says how many processes share the global batch.

    With `save`, the checkpoint directory is checked (run_dir.check_target; for a new run, check_replaceable,
    which refuses to start over an unfinished checkpoint unless `overwrite`), locked for this run and found
    writable before anything trains (by the writing process alone); use the Run as a context manager (or
    call `close`) to release it.
    """
    if resume is not None and init_from is not None:
        raise ConfigError("--init-from starts a new run from a checkpoint's weights and --resume continues one; "
                          "give one of them")
    check_overwrite(overwrite, save, resume)
    comm = comm or communicator()
    comm.time_out_after(settings.value("collective_timeout"))
    comm = comm.for_backend(backend)
    asked_to_save, save = save, save and comm.is_writer  # rank 0 alone writes
    auto = resume == RESUME_AUTO
    if auto:
        resume = auto_resume(settings, asked_to_save)  # every rank finds the same
    cap = settings.value("max_memory")
    resume_state: dict = {}
    if resume is not None:
        model, tokenizer, info = load_checkpoint(resume, backend, with_optimizer=True, max_memory=cap)
        resume_state = _train_state(resume, info)
        # a checkpoint from before the optimiser settings existed was trained with the reference's
        saved = {**REFERENCE_OPTIMIZER, **resume_state.get("train_config", {}), "family": info["family"],
                 "tokenizer": tokenizer.kind}
        if resume_state.get("corpus_file"):
            saved["file"] = resume_state["corpus_file"]
        settings = settings.resumed_from(saved)
    train_config = settings.train_config()
    notes = schedule_overrides(settings, saved, train_config) if resume is not None else []
    micro_batch = micro_batch_size(train_config.batch_size, train_config.grad_accum, comm.size)
    corpus = Corpus.load(settings.value("file"), settings.value("max_corpus"))
    label = settings.named.id if settings.named else None
    target = (settings.path("model") or resume or DEFAULT_ROOT / (label or corpus.name)) if save else None
    if target is not None:
        check_target(target)
        if init_from is not None and init_from.resolve() in (target.resolve(), RunPaths(target).best.resolve()):
            raise ConfigError(f"--init-from {init_from} would be replaced by this run's checkpoint (--model "
                              f"{target}, or its -best); give the fine-tuned model its own --model")
        replacing = check_replaceable(target, overwrite) if resume is None else None
        if replacing:
            notes.append(replacing)
    family_name = settings.value("family")
    if resume is not None:
        settings.check_shape_against(family_name, model.config, resume)
        check_tokenizer_against(settings, tokenizer, resume, resume_state.get("vocab_size_asked"))
        check_memory(settings.family, model.config, micro_batch, backend, cap)
        if train_config.steps <= model.params.step and not auto:
            raise ConfigError(f"{resume} is already at step {model.params.step}; "
                              f"ask for more with --steps (a total, e.g. --steps {model.params.step + 1000})")
    elif init_from is not None:
        source, source_tokenizer, info = load_checkpoint(init_from, backend, max_memory=cap)
        family_name = info["family"]
        fix = "drop it to fine-tune this checkpoint"
        settings.check_shape_against(family_name, source.config, init_from, fix=fix)
        check_tokenizer_against(settings, source_tokenizer, init_from, None, fix=fix)
        tokenizer = source_tokenizer.extended_for(corpus.text)  # the old ids keep their meaning
        config = dataclasses.replace(source.config, vocab_size=tokenizer.size)
        kind = family(family_name)
        check_memory(kind, config, micro_batch, backend, cap)
        model = kind.build(config, backend, tokenizer, train_config.seed)
        model.params.from_host(carry_weights(source.params.to_host(), model.params.to_host()))
        added = tokenizer.size - source_tokenizer.size
        notes.append(f"fine-tuning {init_from} (step {step_on_disk(init_from)}): its weights, with a new optimiser, "
                     f"schedule and step 0" + (f"; {added} new token{'s' if added != 1 else ''} "
                                               f"({tokenizer.decode(range(source_tokenizer.size, tokenizer.size))!r}) "
                                               "got new embedding and output rows, initialised as a new model's"
                                               if added else ""))
    else:
        tokenizer = new_tokenizer(settings, corpus)
        notes.append(short_vocabulary(settings, tokenizer))
        config = settings.model_config(tokenizer.size)
        check_memory(settings.family, config, micro_batch, backend, cap)
        model = settings.family.build(config, backend, tokenizer, train_config.seed)
    seq_len = model.config.seq_len
    tokens = tokenizer.encode(corpus.text, source=corpus.description)
    train_config = with_held_out(train_config, len(tokens), seq_len)
    settings.check_all_used(train_config, save=asked_to_save)
    train_tokens, val_tokens = split_validation(tokens, train_config.val_tokens, seq_len)
    if init_from is None:  # a fine-tuned model keeps its source's config, and its counts (carried as weights)
        prepare_family_training(family(family_name), model, train_config, train_tokens, new=resume is None)
    batches = make_batches(train_tokens, seq_len, train_config, comm)
    if resume_state:
        if resume_state.get("corpus_sha256") not in (None, corpus.sha256):
            print(f"note: {corpus.description} differs from the text this checkpoint was trained on", file=sys.stderr)
        if resume_state["data"]["kind"] == batches.state()["kind"]:
            batches.restore(resume_state["data"])
    done = resume is not None and model.params.step >= train_config.steps
    lock = None if target is None or done else _claim(target, model.n_params)  # last: a refused run leaves nothing
    run_info = corpus.run_info(train_config, resume_state.get("best_val_loss"))
    if init_from is not None:
        run_info["init_from"] = str(init_from.resolve())
    elif resume_state.get("init_from"):
        run_info["init_from"] = resume_state["init_from"]
    asked = resume_state.get("vocab_size_asked") if resume is not None else settings.value("vocab_size")
    if asked is not None:
        run_info["vocab_size_asked"] = asked  # what --vocab-size said, where the tokenizer may have fewer
    if not comm.is_writer:  # rank 0 alone validates
        val_tokens = None
    return Run(model, family_name, tokenizer, corpus, batches, val_tokens, train_config, RunPaths(target), run_info,
               label, resumed=resume is not None, comm=comm, lock=lock, notes=[note for note in notes if note],
               done=done)


def check_overwrite(overwrite: bool, save: bool, resume) -> None:
    """--overwrite starts a new run that saves over the checkpoint in its place; refused where it means nothing."""
    if overwrite and resume is not None:
        raise ConfigError("--overwrite starts a new run over the checkpoint in --model and --resume continues one; "
                          "give one of them")
    if overwrite and not save:
        raise ConfigError("--overwrite does nothing with --no-save: nothing is saved; drop one of them")


def auto_resume(settings: Settings, save: bool) -> Path | None:
    """--resume auto: the checkpoint in --model to continue, or None when there is none (a new run there)."""
    if not save:
        raise ConfigError("--resume auto continues or starts the checkpoint in --model DIR, and --no-save saves "
                          "nothing; drop --no-save, or continue a checkpoint unsaved with --resume DIR")
    place = settings.path("model")
    if place is None:
        also = f" (or model: in {settings.named.origin})" if settings.named else ""
        raise ConfigError(f"--resume auto needs --model DIR{also}: the checkpoint to continue, or the place to "
                          "start a new run when there is none yet")
    return place if is_checkpoint(place) else None


def new_tokenizer(settings: Settings, corpus: Corpus) -> Tokenizer:
    """The --tokenizer a new run asks for, learnt from its text (with --vocab-size for a kind that takes one; a
    --vocab-size given to one that does not is refused by Settings.check_all_used, naming where it came from)."""
    kind = settings.value("tokenizer")
    takes_size = tokenizer_kind(kind).default_vocab_size is not None
    return train_tokenizer(kind, corpus.text, settings.value("vocab_size") if takes_size else None)


def prepare_family_training(kind, model, train_config: TrainConfig, train_tokens: np.ndarray, new: bool) -> None:
    """What a family asks of a run before it trains: its check of the training settings, and for a new model
    what it counts from the training tokens (never the held-out ones)."""
    if hasattr(kind, "check_training"):
        kind.check_training(model.config, train_config)
    if new and hasattr(model, "learn_from"):
        model.learn_from(train_tokens)


def short_vocabulary(settings: Settings, tokenizer: Tokenizer) -> str | None:
    """A note where the text ran out of pairs to merge before the vocabulary --vocab-size asked for."""
    asked = settings.value("vocab_size") or tokenizer.default_vocab_size
    if asked is None or tokenizer.size >= asked:
        return None
    return (f"the text ran out of pairs to merge: its {tokenizer.kind} tokenizer has {tokenizer.size} tokens, not "
            f"the {asked} asked for (--vocab-size)")


def check_tokenizer_against(settings: Settings, tokenizer: Tokenizer, checkpoint: Path, asked: int | None,
                            fix: str = "drop it to resume, or train a new model with --model") -> None:
    """On resume (or fine-tuning) the tokenizer is the checkpoint's: a --tokenizer given that disagrees is an
    error, and so is a --vocab-size that is neither what the checkpoint's run asked for (`asked`) nor what its
    tokenizer has (fewer, where the text ran out of pairs to merge)."""
    if settings.given("tokenizer") and settings.value("tokenizer") != tokenizer.kind:
        raise ConfigError(f"{settings.describe('tokenizer')} does not match the checkpoint {checkpoint}, whose "
                          f"tokenizer is {tokenizer.kind}; {fix}")
    if settings.given("vocab_size") and settings.value("vocab_size") not in (asked, tokenizer.size):
        raise ConfigError(f"{settings.describe('vocab_size')} does not match the checkpoint {checkpoint}, whose "
                          f"tokenizer has {tokenizer.size} tokens; {fix}")


def carry_weights(source: dict[str, np.ndarray], fresh: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A new model's weights (`fresh`, as initialised) with each of `source`'s tensors copied into the leading
    corner of the tensor of the same name: all of it where the shapes agree, and the rows or columns of the old
    vocabulary where the new one is larger (its new tokens keep their fresh initialisation)."""
    carried = {}
    for name, tensor in fresh.items():
        old = source[name]
        tensor = tensor.copy()
        tensor[tuple(slice(0, n) for n in old.shape)] = old
        carried[name] = tensor
    return carried


def with_held_out(config: TrainConfig, n_tokens: int, seq_len: int) -> TrainConfig:
    """The config with its held-out count resolved for this text (data.held_out_count), so that a checkpoint
    records the split it was trained on and a resume keeps it."""
    return dataclasses.replace(config, val_tokens=held_out_count(config.val_tokens, n_tokens, seq_len))


def schedule_overrides(settings: Settings, saved: dict, config: TrainConfig) -> list[str]:
    """On a resume: each optimiser or schedule flag that changes what the checkpoint was trained with."""
    notes = [f"{known_settings()[key].flag} {settings.value(key)} overrides the checkpoint's {saved.get(key)}"
             for key in REFERENCE_OPTIMIZER if key in settings.explicit and settings.explicit[key] != saved.get(key)]
    old_steps = saved.get("steps")
    if config.lr_schedule == "cosine" and config.decay_steps is None and old_steps not in (None, config.steps):
        notes.append(f"the cosine decay now ends at step {config.steps} (--steps), not {old_steps}")
    return notes


def _claim(directory: Path, n_params: int) -> WriterLock:
    """Lock a checkpoint directory for this run, and make sure a checkpoint can be written there."""
    check_writable(directory, n_params)
    check_run_files(directory)
    return WriterLock(directory).acquire()


def _train_state(checkpoint: Path, info: dict) -> dict:
    """The training state a resume needs, or one clear line about what is missing."""
    state = info.get("train_state")
    if state is None:
        raise ConfigError(f"{checkpoint} holds weights only (no optimizer state), so it cannot be resumed; "
                          f"fine-tune it with --init-from {checkpoint} --model NEW, or train a new model in its "
                          "place without --resume")
    data = state.get("data")
    if not isinstance(state.get("step"), int) or not isinstance(data, dict) or not isinstance(data.get("kind"), str):
        raise CheckpointError(f"{checkpoint}/train_state.json lacks its step or data position; the training state "
                              "is damaged, so the run cannot resume (sample and eval can still use the weights)")
    return state


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

    def runs(self) -> Iterator[Run]:
        """Each spec's run, made when it is reached (so only one model is in memory at a time); close each run
        when it is done (which releases its directory), and the comparison at the end."""
        kind = family(self.family_name)
        for spec, config, lock in zip(self.specs, self.configs, self.locks):
            model = kind.build(config, self.backend, self.tokenizer, self.train_config.seed)
            prepare_family_training(kind, model, self.train_config, self.train_tokens, new=True)
            batches = make_batches(self.train_tokens, config.seq_len, self.train_config)
            paths = RunPaths(None if lock is None else lock.directory)
            yield Run(model, self.family_name, self.tokenizer, self.corpus, batches, self.val_tokens,
                      self.train_config, paths, self.corpus.run_info(self.train_config), spec, lock=lock)

    def close(self) -> None:
        """Release the directories of specs that did not train (a comparison that stopped early)."""
        for lock in self.locks:
            if lock is not None:
                lock.release()


def prepare_compare(settings: Settings, specs_text: str, backend: Backend, save: bool = True,
                    overwrite: bool = False) -> Comparison:
    """Every spec of `specs_text` (the family's shape strings, `parse_specs`) checked (shape, memory, and where
    it saves: each directory locked for this comparison, and none an unfinished checkpoint unless `overwrite`)
    before any training."""
    check_overwrite(overwrite, save, None)
    kind, family_name = settings.family, settings.value("family")
    if not hasattr(kind, "parse_specs"):
        raise ConfigError(f"--compare takes model specs, and the {family_name} family has none; compare its runs "
                          "with --config FILE (named runs) instead")
    for key in kind.SPEC_KEYS:
        if settings.given(key):
            raise ConfigError(f"{settings.describe(key)} sets the model shape, but --compare takes it from each spec; drop it")
    specs = kind.parse_specs(specs_text, settings)
    train_config = settings.train_config()
    micro_batch = micro_batch_size(train_config.batch_size, train_config.grad_accum, 1)
    corpus = Corpus.load(settings.value("file"), settings.value("max_corpus"))
    tokenizer = new_tokenizer(settings, corpus)
    configs = [Settings({**settings.explicit, **values}, settings.named).model_config(tokenizer.size)
               for _, values in specs]
    for (text, _), config in zip(specs, configs):
        check_memory(kind, config, micro_batch, backend, settings.value("max_memory"), f"spec {text}")
        if hasattr(kind, "check_training"):  # every spec's, before the first trains
            kind.check_training(config, train_config)
    names = [text for text, _ in specs]
    base, notes = None, [short_vocabulary(settings, tokenizer)]
    if save:
        label = settings.named.id if settings.named else corpus.name
        base = settings.path("model") or DEFAULT_ROOT / f"{label}-compare"
        if (base / CONFIG).exists() or (base.exists() and not base.is_dir()):
            raise ConfigError(f"{base} is a checkpoint or a file; --compare writes one checkpoint per spec inside "
                              "--model DIR, so pick a directory that is neither")
        for name in names:  # every spec's place and files, before the first spec trains
            check_target(base / name)
            notes.append(check_replaceable(base / name, overwrite))
            check_run_files(base / name)
        check_plain_file(base / COMPARE_PLOT)
    seq_len = configs[0].seq_len
    tokens = tokenizer.encode(corpus.text, source=corpus.description)
    train_config = with_held_out(train_config, len(tokens), seq_len)
    settings.check_all_used(train_config, save=save, compare=True)
    train_tokens, val_tokens = split_validation(tokens, train_config.val_tokens, seq_len)
    locks = ([_claim(base / name, n_params(kind, config)) for name, config in zip(names, configs)]
             if base is not None else [None] * len(specs))
    return Comparison(names, configs, family_name, corpus, tokenizer, train_tokens, val_tokens, train_config, backend,
                      base, locks, [note for note in notes if note])


def train(file: str | None = None, *, resume: str | Path | None = None, init_from: str | Path | None = None,
          save: bool = True, progress: bool = False, overwrite: bool = False, **settings) -> tuple[Run, RunSummary]:
    """Train from Python: `file` (default: the bundled Python docs) and any settings by their keys
    (steps=500, d_model=128, heads="8,8,16,32", backend="numpy", model="checkpoints/mine", ...); `resume`
    (a checkpoint, or "auto"), `init_from` and `overwrite` as the flags do; `progress` shows the progress bar
    (or lines) on stderr. Returns the run (its model, tokenizer and `sample`) and its summary (no steps run
    where resume="auto" found its checkpoint finished); writes what the CLI writes. Under an MPI launcher every
    rank calls it, and one rank's error ends them all, as with the CLI: one found while setting up raises in
    rank 0 (the others exit with status 2), one while training prints one line naming the rank and aborts
    every rank (mpi_comm.py)."""
    if file is not None:
        settings["file"] = str(file)
    comm = communicator()
    with comm.failing_together("microgpt.train"):  # under mpiexec, an error in any rank ends every rank
        with comm.preparing_together("microgpt.train"):  # a set-up error in any rank: each raises, none trains
            chosen = Settings(settings)
            backend, _ = start_backend(chosen.value("backend"), comm, chosen.value("threads"))
            place = None if resume is None else resume if resume == RESUME_AUTO else Path(resume)
            run = prepare(chosen, backend, place, save, init_from=None if init_from is None else Path(init_from),
                          overwrite=overwrite)
        with run:
            summary = run.train(Progress(quiet=not progress))
            run.finish(summary)
    return run, summary
