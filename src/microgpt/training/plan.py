"""A run planned, in one pass: `plan` resolves the settings (resolve.py) and makes every check that needs no
training; `build` makes the run from that one object; `plan_run` does both. The command line, `microgpt.train`
(and `microgpt.plan`, the dry run) and the studio's graph run all plan through `plan`.

Planning reads the corpus, makes the tokenizer where it needs no learning (a
char tokenizer, a dataset's, the checkpoint's for a resume, the source's
extended by the text's new characters for a fine-tune; a bpe one is learnt
when the run is built), the family's config at that vocabulary, checks the
memory a step needs, and counts the held-out share where the tokens are known
before encoding (a character a token). Building makes or restores the model,
holds out the last tokens for validation, makes the batches (restoring the data
position on a resume) and, last, claims the checkpoint directory, so that a run
refused at any check leaves nothing behind. It is typed against the family
protocol (model/family.py) and the backend contract, naming neither a family
nor a backend.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from microgpt.backends import Backend, start_backend
from microgpt.core.errors import ConfigError, Named, Note, Placeholder, Wording, as_flag, said
from microgpt.data.batches import RandomBatches, SequentialBatches
from microgpt.data.corpus import Corpus, short_vocabulary, split_validation, with_held_out
from microgpt.data.tokenizer import Tokenizer, tokenizer_kind, unknown_note
from microgpt.model.family import family, n_params
from microgpt.model.memory import check_memory, estimate_training_bytes
from microgpt.parallel.communicator import communicator
from microgpt.settings.sources import Settings
from microgpt.settings.training import TrainConfig
from microgpt.training.data_parallel import RankShare
from microgpt.training.resolve import RunSettings, Start, resolve
from microgpt.training.run import Run
from microgpt.training.run_dir import WriterLock, check_run_files, check_writable
from microgpt.training.run_files import RunPaths
from microgpt.training.tensorboard_log import check_board_dir
from microgpt.training.trainer import step_on_disk


@dataclass(frozen=True)
class Plan:
    """A run as planned: every setting resolved and every check that needs no training made; nothing built or
    written. `describe` says what would be trained (the dry run)."""

    settings: RunSettings
    corpus: Corpus
    tokenizer: Tokenizer | None  # None: a bpe tokenizer, learnt from the text when the run is built
    vocab_size: int  # the tokenizer's, or the most a bpe one learnt from the text can have (it may stop short)
    config: object | None  # the family's config at vocab_size; None where the caller checks the model (resolve)
    seq_len: int
    train: TrainConfig  # the held-out share counted where the tokens are known before encoding; else as resolved
    backend: Backend | None  # the backend the memory was checked on (None: not checked)
    words: Wording = as_flag  # how `describe` names settings: the command line's, or a front end's (core/errors.py)

    def describe(self) -> list[str]:
        """What would be trained, a line each, as `microgpt train --dry-run` prints it."""
        plan, tc = self.settings, self.train
        source = plan.source.path if plan.source is not None else None
        starts = {Start.NEW: "a new run", Start.RESUME: f"resuming {source}",
                  Start.FINE_TUNE: f"fine-tuning {source} (its weights, step 0)"}
        tokenizer = (self.tokenizer.describe() if self.tokenizer is not None else
                     f"{plan.tokenizer}, learnt from the text when training starts (up to {self.vocab_size} tokens)")
        lines = [f"start: {starts[plan.start]}", f"corpus: {self.corpus.description}; tokenizer {tokenizer}"]
        if self.config is not None:
            kind = family(plan.family_name)
            lines.append(f"model: {kind.describe(self.config)}; {n_params(kind, self.config):,} parameters")
            if self.backend is not None:
                needs = estimate_training_bytes(kind, self.config, plan.micro_batch, self.backend)
                lines.append(f"memory per step: about {needs / 2**20:,.1f} MiB on the {self.backend.name} backend")
        held = ("a tenth of the text, counted once it is encoded" if tc.val_tokens is None else
                f"{tc.val_tokens:,} tokens held out" if tc.val_tokens else f"none held out ({said(plan.held_out_by, self.words)})")
        lines.append(f"training: {tc.steps:,} steps of {tc.batch_size} sequences of {self.seq_len} tokens "
                     f"(micro-batch {plan.micro_batch}), lr {tc.lr:g} ({tc.lr_schedule}), seed {tc.seed}; "
                     f"validation: {held}")
        lines.append(f"saves: {plan.target}" if plan.target is not None else "saves: nothing")
        return lines + [f"note: {said(note, self.words)}" for note in plan.notes]


def start(settings: Settings, comm=None) -> tuple[Backend, str | None]:
    """The backend the settings ask for, started with their threads, and a note saying which "auto" picked."""
    return start_backend(settings.value("backend"), comm, settings.value("threads"))


def plan(settings: Settings, backend: Backend | None = None, resume: Path | str | None = None, save: bool = True,
         comm=None, init_from: Path | None = None, overwrite: bool = False, corpus: Corpus | None = None,
         model: bool = True, place: bool = True) -> Plan:
    """A run planned (see plan_run for the arguments): the settings resolved, the corpus read (or `corpus`, read
    already), the tokenizer made where it needs no learning, the family's config at its vocabulary, the memory
    a step needs checked on `backend` (None: not checked), and the held-out share counted and checked where
    the tokens are known before encoding. `model` False leaves a new run's model to the caller, `place` False
    its checkpoint directory (resolve)."""
    comm = comm or communicator()
    resolved = resolve(settings, backend, comm, resume, save, init_from, overwrite, model, place)
    if backend is not None:  # one line where the backend cannot compute at this precision, before any writing
        backend.use_precision(resolved.train.precision)
    corpus = corpus or Corpus.load(resolved.run.file, resolved.run.max_corpus)
    if resolved.start is Start.NEW:
        check_dataset_settings(settings, corpus)
    tokenizer = planned_tokenizer(resolved, corpus)
    vocab_size = (tokenizer.size if tokenizer is not None else
                  corpus.largest_vocabulary(resolved.tokenizer, resolved.vocab_size))
    config = resolved.shape
    if config is not None and config.vocab_size != vocab_size:
        config = dataclasses.replace(config, vocab_size=vocab_size)
    if config is not None and backend is not None:
        check_memory(family(resolved.family_name), config, resolved.micro_batch, backend, resolved.run.max_memory)
    seq_len = config.seq_len if config is not None else settings.value("seq_len")
    train = resolved.train
    if tokenizer is not None and tokenizer.kind == "char" and corpus.dataset is None:  # a token per character
        train = with_held_out(train, len(corpus.text), seq_len)
        split_validation(range(len(corpus.text)), train.val_tokens, seq_len)
        check_validation_possible(resolved, train, corpus)
    return Plan(resolved, corpus, tokenizer, vocab_size, config, seq_len, train, backend)


def plan_run(settings: Settings, backend: Backend, resume: Path | str | None = None, save: bool = True, comm=None,
             init_from: Path | None = None, overwrite: bool = False) -> Run:
    """A run ready to train: a new model from the settings, the checkpoint `resume` continued (RESUME_AUTO: the
    one in --model if there is one, a Run that is `done` when it is at its steps already), or a new run from
    the weights of `init_from`. `comm` (default: as launched, parallel/communicator.py) says how many processes
    share the global batch; rank 0 alone writes and validates. With `save` the checkpoint directory is
    locked for the run: use the Run as a context manager (or call `close`) to release it."""
    comm = comm or communicator()
    planned = plan(settings, backend, resume, save, comm, init_from, overwrite)
    comm.time_out_after(planned.settings.run.collective_timeout)
    return build(planned, backend, comm.for_backend(backend))


def check_dataset_settings(settings: Settings, corpus: Corpus) -> None:
    """A tokenizer setting given for a prepared dataset, whose tokens are made already, is refused."""
    for key in ("tokenizer", "vocab_size"):
        if corpus.dataset is not None and settings.given(key):
            raise ConfigError(settings.mention(key), f" does nothing here: {corpus.file} is a prepared dataset, "
                              "tokenized by microgpt prepare; drop it, or prepare the data again with that tokenizer")


def planned_tokenizer(plan: RunSettings, corpus: Corpus) -> Tokenizer | None:
    """The run's tokenizer where it needs no learning: the checkpoint's (resumed), the source's extended by the
    text's new characters (fine-tuned), a dataset's, or one made from the text (char, a tokenizer.json);
    None for a bpe tokenizer, which is learnt when the run is built."""
    if plan.start is Start.RESUME:
        corpus.check_tokenizer(plan.source.tokenizer, plan.source.path)
        return plan.source.tokenizer
    if plan.start is Start.FINE_TUNE:
        return corpus.fine_tune_tokenizer(plan.source.tokenizer, plan.source.path)
    if corpus.dataset is None and tokenizer_kind(plan.tokenizer).default_vocab_size is not None:
        return None
    return corpus.new_tokenizer(plan.tokenizer, plan.vocab_size)


def build(planned: Plan, backend: Backend, comm) -> Run:
    """The run that `planned` describes, on `backend`, trained by the processes of `comm`."""
    plan, corpus = planned.settings, planned.corpus
    tokenizer = planned.tokenizer or corpus.new_tokenizer(plan.tokenizer, plan.vocab_size)
    model, notes = STARTS[plan.start](planned, tokenizer, backend)
    seq_len = model.config.seq_len
    train_tokens, val_tokens, train_config = corpus.split(tokenizer, plan.train, seq_len)
    if planned.train.val_tokens is None:  # not counted when planned: the tokens were not known
        check_validation_possible(plan, train_config, corpus)
    if corpus.dataset is None:  # a dataset's counts are prepare's to report
        notes.append(unknown_note(tokenizer, train_tokens, val_tokens))
    if plan.start is Start.NEW and hasattr(model, "learn_from"):
        model.learn_from(train_tokens)  # what a new model counts from its training tokens, never the held-out
    batches = make_batches(train_tokens, seq_len, train_config, comm)
    state = plan.source.train_state if plan.start is Start.RESUME else {}
    if state:
        if state.get("corpus_sha256") not in (None, corpus.sha256):
            print(f"note: {corpus.description} differs from the text this checkpoint was trained on", file=sys.stderr)
        if state["data"]["kind"] == batches.state()["kind"]:
            batches.restore(state["data"])
    done = plan.start is Start.RESUME and model.params.step >= train_config.steps
    paths = RunPaths(plan.target, board=plan.run.log == "tensorboard")
    if paths.tensorboard is not None:
        check_board_dir(paths.tensorboard)
    lock = None if plan.target is None or done else claim(plan.target, model.n_params)  # last: a refused run
    # leaves nothing
    return Run(model, plan.family_name, tokenizer, corpus, batches, val_tokens if comm.is_writer else None,
               train_config, paths, run_info(plan, corpus, train_config, backend), plan.label,
               resumed=plan.start is Start.RESUME, comm=comm, lock=lock,
               notes=[note for note in (*plan.notes, *notes) if note], done=done, held_out_by=plan.held_out_by)


def new_model(planned: Plan, tokenizer: Tokenizer, backend: Backend) -> tuple[object, list[str]]:
    """A new run's model, at its tokenizer's vocabulary (a bpe one's may stop short of what was asked)."""
    plan, config = planned.settings, planned.config
    if config.vocab_size != tokenizer.size:
        config = dataclasses.replace(plan.shape, vocab_size=tokenizer.size)
    return (family(plan.family_name).build(config, backend, tokenizer, plan.train.seed),
            [short_vocabulary(plan.vocab_size, tokenizer)])


def resumed_model(planned: Plan, tokenizer: Tokenizer, backend: Backend) -> tuple[object, list[str]]:
    """A resumed run's model: the checkpoint's, with its optimiser state."""
    plan = planned.settings
    trained_on = plan.source.train_state.get("backend")
    moved = (Note(f"resuming on the {backend.name} backend, and {plan.source.path} trained on {trained_on}: from "
                  "here its losses differ from an unbroken run's in the last bits (", Named("backend", trained_on),
                  " continues exactly)") if trained_on not in (None, backend.name) else None)
    return plan.source.model, [moved or backend.keep_blas(plan.source.train_state.get("blas"))]


def fine_tuned_model(planned: Plan, tokenizer: Tokenizer, backend: Backend) -> tuple[object, list[str]]:
    """A fine-tuned run's model: a new model of the source's shape carrying its weights, its tokenizer extended
    by the text's new characters (the old ids keep their meaning, the new ones get a new model's rows)."""
    plan, source = planned.settings, planned.settings.source
    model = family(plan.family_name).build(planned.config, backend, tokenizer, plan.train.seed)
    model.params.from_host(carry_weights(source.model.params.to_host(), model.params.to_host()))
    added = tokenizer.size - source.tokenizer.size
    new_tokens = (f"; {added} new token{'s' if added != 1 else ''} "
                  f"({tokenizer.decode(range(source.tokenizer.size, tokenizer.size))!r}) got new embedding and output "
                  "rows, initialised as a new model's") if added else ""
    note = (f"fine-tuning {source.path} (step {step_on_disk(source.path)}): its weights, with a new optimiser, "
            f"schedule and step 0{new_tokens}")
    return model, [note]


STARTS = {Start.NEW: new_model, Start.RESUME: resumed_model, Start.FINE_TUNE: fine_tuned_model}


def check_validation_possible(plan: RunSettings, config: TrainConfig, corpus: Corpus) -> None:
    """A validation setting given where nothing is held out does nothing: refused, saying why nothing is (a text
    too short to hold out a tenth of, or a dataset prepared without a held-out split)."""
    if config.val_tokens == 0 and plan.train.val_tokens is None and plan.validation_given:
        dataset_why = (f"the dataset {plan.run.file} has no held-out split; prepare it again with --val-fraction "
                       "or --val-tokens")
        why = ((dataset_why,) if corpus.dataset is not None else
               ("the text is too short to hold out a tenth of it; give ", Named("val_tokens", Placeholder("N"))))
        raise ConfigError(plan.validation_given[0], " does nothing here: there is no held-out text to validate on (",
                          *why, ")")


def run_info(plan: RunSettings, corpus: Corpus, config: TrainConfig, backend: Backend) -> dict:
    """What train_state.json keeps besides the step and data position: the corpus, the settings, the backend and its BLAS,
    --log, the best validation loss so far, the checkpoint fine-tuned from and what --vocab-size asked for."""
    state = plan.source.train_state if plan.source else {}
    info = {**corpus.run_info(config, state.get("best_val_loss")), "backend": backend.name, "log": plan.run.log}
    if backend.blas is not None:
        info["blas"] = backend.blas  # what a resume multiplies with where it can (backends/blas.py)
    if plan.start is Start.FINE_TUNE:
        info["init_from"] = str(plan.source.path.resolve())
    elif state.get("init_from"):
        info["init_from"] = state["init_from"]
    if plan.vocab_size is not None:
        info["vocab_size_asked"] = plan.vocab_size  # what --vocab-size said, where the tokenizer may have fewer
    return info


def make_batches(train_tokens: np.ndarray, seq_len: int, config: TrainConfig, comm=None):
    """The global batches, of which each of several processes keeps its share."""
    if config.random_batches:
        batches = RandomBatches(train_tokens, seq_len, config.batch_size, config.seed)
    else:
        batches = SequentialBatches(train_tokens, seq_len, config.batch_size, config.stride)
    return batches if comm is None or comm.size == 1 else RankShare(batches, comm.rank, comm.size)


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


def claim(directory: Path, n_params: int) -> WriterLock:
    """Lock a checkpoint directory for this run, and make sure a checkpoint can be written there."""
    check_writable(directory, n_params)
    check_run_files(directory)
    return WriterLock(directory).acquire()

