"""A run planned, in one pass: `plan_run` resolves the settings (resolve.py), then builds the run from that one
object.

Building reads the corpus, makes the tokenizer (learnt from the text for a new
run, the checkpoint's for a resume, the source's extended by the text's new
characters for a fine-tune), the family's config at that vocabulary, checks
the memory a step needs, makes or restores the model, holds out the last
tokens for validation, makes the batches (restoring the data position on a
resume) and, last, claims the checkpoint directory, so that a run refused at
any check leaves nothing behind. It is typed against the family protocol
(model/family.py) and the backend contract, naming neither a family nor a
backend.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np

from microgpt.backends import Backend, start_backend
from microgpt.core.errors import ConfigError
from microgpt.data.batches import RandomBatches, SequentialBatches
from microgpt.data.tokenizer import Tokenizer, unknown_note
from microgpt.model.family import family
from microgpt.model.memory import check_memory
from microgpt.parallel.communicator import communicator
from microgpt.settings.sources import Settings
from microgpt.settings.training import TrainConfig
from microgpt.training.corpus import Corpus, short_vocabulary
from microgpt.training.data_parallel import RankShare
from microgpt.training.resolve import RunSettings, Start, resolve
from microgpt.training.run import Run
from microgpt.training.run_dir import WriterLock, check_run_files, check_writable
from microgpt.training.run_files import RunPaths
from microgpt.training.tensorboard_log import check_board_dir
from microgpt.training.trainer import step_on_disk


def start(settings: Settings, comm=None) -> tuple[Backend, str | None]:
    """The backend the settings ask for, started with their threads, and a note saying which "auto" picked."""
    return start_backend(settings.value("backend"), comm, settings.value("threads"))


def plan_run(settings: Settings, backend: Backend, resume: Path | str | None = None, save: bool = True, comm=None,
            init_from: Path | None = None, overwrite: bool = False) -> Run:
    """A run ready to train: a new model from the settings, the checkpoint `resume` continued (RESUME_AUTO: the
    one in --model if there is one, a Run that is `done` when it is at its steps already), or a new run from
    the weights of `init_from`. `comm` (default: as launched, parallel/communicator.py) says how many processes
    share the global batch; rank 0 alone writes and validates. With `save` the checkpoint directory is
    locked for the run: use the Run as a context manager (or call `close`) to release it."""
    comm = comm or communicator()
    plan = resolve(settings, backend, comm, resume, save, init_from, overwrite)
    backend.use_precision(plan.train.precision)  # one line where the backend cannot, before anything is written
    comm.time_out_after(plan.run.collective_timeout)
    return build(plan, backend, comm.for_backend(backend))


def build(plan: RunSettings, backend: Backend, comm) -> Run:
    """The run that `plan` describes, on `backend`, trained by the processes of `comm`."""
    corpus = Corpus.load(plan.run.file, plan.run.max_corpus)
    model, tokenizer, notes = STARTS[plan.start](plan, corpus, backend)
    seq_len = model.config.seq_len
    train_tokens, val_tokens, train_config = corpus.split(tokenizer, plan.train, seq_len)
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
               train_config, paths, run_info(plan, corpus, train_config, backend.name), plan.label,
               resumed=plan.start is Start.RESUME, comm=comm, lock=lock,
               notes=[note for note in (*plan.notes, *notes) if note], done=done, held_out_by=plan.held_out_by)


def new_model(plan: RunSettings, corpus: Corpus, backend: Backend) -> tuple[object, Tokenizer, list[str]]:
    """A new run's model, with the tokenizer learnt from its text."""
    tokenizer = corpus.new_tokenizer(plan.tokenizer, plan.vocab_size)
    config = dataclasses.replace(plan.shape, vocab_size=tokenizer.size)
    kind = family(plan.family_name)
    check_memory(kind, config, plan.micro_batch, backend, plan.run.max_memory)
    return kind.build(config, backend, tokenizer, plan.train.seed), tokenizer, [short_vocabulary(plan.vocab_size,
                                                                                                 tokenizer)]


def resumed_model(plan: RunSettings, corpus: Corpus, backend: Backend) -> tuple[object, Tokenizer, list[str]]:
    """A resumed run's model: the checkpoint's, with its optimiser state, and its tokenizer."""
    model = plan.source.model
    corpus.check_tokenizer(plan.source.tokenizer, plan.source.path)
    check_memory(family(plan.family_name), model.config, plan.micro_batch, backend, plan.run.max_memory)
    trained_on = plan.source.train_state.get("backend")
    moved = (f"resuming on the {backend.name} backend, and {plan.source.path} trained on {trained_on}: from here "
             f"its losses differ from an unbroken run's in the last bits (--backend {trained_on} continues exactly)"
             if trained_on not in (None, backend.name) else None)
    return model, plan.source.tokenizer, [moved]


def fine_tuned_model(plan: RunSettings, corpus: Corpus, backend: Backend) -> tuple[object, Tokenizer, list[str]]:
    """A fine-tuned run's model: a new model of the source's shape carrying its weights, its tokenizer extended
    by the text's new characters (the old ids keep their meaning, the new ones get a new model's rows)."""
    source = plan.source
    tokenizer = corpus.fine_tune_tokenizer(source.tokenizer, source.path)
    config = dataclasses.replace(plan.shape, vocab_size=tokenizer.size)
    kind = family(plan.family_name)
    check_memory(kind, config, plan.micro_batch, backend, plan.run.max_memory)
    model = kind.build(config, backend, tokenizer, plan.train.seed)
    model.params.from_host(carry_weights(source.model.params.to_host(), model.params.to_host()))
    added = tokenizer.size - source.tokenizer.size
    new_tokens = (f"; {added} new token{'s' if added != 1 else ''} "
                  f"({tokenizer.decode(range(source.tokenizer.size, tokenizer.size))!r}) got new embedding and output "
                  "rows, initialised as a new model's") if added else ""
    note = (f"fine-tuning {source.path} (step {step_on_disk(source.path)}): its weights, with a new optimiser, "
            f"schedule and step 0{new_tokens}")
    return model, tokenizer, [note]


STARTS = {Start.NEW: new_model, Start.RESUME: resumed_model, Start.FINE_TUNE: fine_tuned_model}


def check_validation_possible(plan: RunSettings, config: TrainConfig, corpus: Corpus) -> None:
    """A validation setting given where nothing is held out does nothing: refused, saying why nothing is (a text
    too short to hold out a tenth of, or a dataset prepared without a held-out split)."""
    if config.val_tokens == 0 and plan.train.val_tokens is None and plan.validation_given:
        why = (f"the dataset {plan.run.file} has no held-out split; prepare it again with --val-fraction or "
               "--val-tokens" if corpus.dataset is not None else
               "the text is too short to hold out a tenth of it; give --val-tokens N")
        raise ConfigError(f"{plan.validation_given[0]} does nothing here: there is no held-out text to validate on "
                          f"({why})")


def run_info(plan: RunSettings, corpus: Corpus, config: TrainConfig, backend_name: str) -> dict:
    """What train_state.json keeps besides the step and data position: the corpus, the settings, the backend,
    --log, the best validation loss so far, the checkpoint fine-tuned from and what --vocab-size asked for."""
    state = plan.source.train_state if plan.source else {}
    info = {**corpus.run_info(config, state.get("best_val_loss")), "backend": backend_name, "log": plan.run.log}
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
