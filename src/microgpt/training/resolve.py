"""Every setting of a run resolved once, before anything is built: `resolve` turns `Settings` into `RunSettings`.

The sources and their precedence are settings/sources.py's: defaults, preset,
named run, the checkpoint (resumed, or fine-tuned from) and flags. The three
ways a run starts are three functions that each return a `RunSettings`:
`resolve_new`, `resolve_resume` (the checkpoint's family, tokenizer, training
settings, corpus and --log under the flags) and `resolve_fine_tune` (the source's
family, shape and tokenizer, with a new optimiser, schedule and step 0).
Every check that needs no text is made here, in one pass: the settings' own
checks, settings that would do nothing, the shape and tokenizer against a
checkpoint, the batch split, where the run writes, and the family's check of
the training settings. What needs the text (its held-out share, and the
validation settings that need it) is checked by plan.py from this object.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from microgpt.backends import Backend
from microgpt.core.errors import ConfigError, Named, Note, Placeholder
from microgpt.data.corpus import corpus_name
from microgpt.data.tokenizer import Tokenizer, matches_setting
from microgpt.model.checkpoint import CheckpointError, is_checkpoint, load_checkpoint
from microgpt.settings.presets import REFERENCE_OPTIMIZER
from microgpt.settings.sources import Settings
from microgpt.settings.training import RunConfig, TrainConfig
from microgpt.training.data_parallel import micro_batch_size
from microgpt.training.run_dir import check_replaceable, check_target
from microgpt.training.run_files import DEFAULT_ROOT, RunPaths

RESUME_AUTO = "auto"  # --resume auto: the checkpoint in --model if there is one, else a new run there


class Start(Enum):
    """How a run starts."""

    NEW = "new"  # a new model from the settings
    RESUME = "resume"  # a checkpoint continued: weights, optimiser, step, data position
    FINE_TUNE = "fine-tune"  # a new run from a checkpoint's weights: new optimiser, schedule and step 0


@dataclass(frozen=True)
class Source:
    """The checkpoint a run resumes or fine-tunes from, read once: its model (with its optimiser state when
    resumed), its tokenizer, and the training state it was saved with (resumed only; {} otherwise)."""

    path: Path
    model: object
    tokenizer: Tokenizer
    train_state: dict


@dataclass(frozen=True)
class RunSettings:
    """Every setting of one run, resolved; preparing the run reads nothing else."""

    start: Start
    source: Source | None  # the checkpoint resumed or fine-tuned from
    family_name: str
    shape: object | None  # the family's config; its vocab_size becomes the tokenizer's when the tokenizer is
    # made; None where the caller checks the model itself (the studio's graph, resolve's `model`)
    tokenizer: str  # the tokenizer's kind (a resumed or fine-tuned run's is its source's)
    vocab_size: int | None  # what --vocab-size asked for (a resumed run: what its first run asked for)
    train: TrainConfig  # val_tokens None: a tenth of the text, counted once it is read
    run: RunConfig
    target: Path | None  # the checkpoint directory to write; None: nothing is written (--no-save, or rank > 0)
    label: str | None  # the named run's id, for results.jsonl and the plot title
    micro_batch: int  # sequences per forward and backward pass in each process
    auto: bool  # --resume auto
    validation_given: tuple[Named, ...]  # validation settings given, refused if the text holds none out
    held_out_by: str  # who set --val-tokens ("--val-tokens 0", "the reference preset"), for the lines about it
    notes: tuple[str, ...]


def resolve(settings: Settings, backend: Backend | None, comm, resume: Path | str | None = None, save: bool = True,
            init_from: Path | None = None, overwrite: bool = False, model: bool = True,
            place: bool = True) -> RunSettings:
    """The run's settings from their sources, checked. `resume` RESUME_AUTO continues the checkpoint in
    --model if there is one and starts a new run there if not; only the writing process (`comm.is_writer`)
    has a target. `model` False: a new run whose model the caller checks itself (the studio compiles its
    graph document with a trace, to place each problem on its node), left without a shape; `place` False: a run
    planned without its checkpoint directory, which is neither chosen nor looked at (the studio names it when
    it starts the run), its settings checked as a saving run's."""
    if resume is not None and init_from is not None:
        raise ConfigError(Named("init_from"), " starts a new run from a checkpoint's weights and ", Named("resume"),
                          " continues one; give one of them")
    check_overwrite(overwrite, save, resume)
    auto = resume == RESUME_AUTO
    if auto:
        resume = auto_resume(settings, save)  # every rank finds the same
    common = {"save": save and comm.is_writer and place, "asked_to_save": save, "ranks": comm.size, "auto": auto}
    if resume is not None:
        return resolve_resume(settings, backend, Path(resume), **common)
    if init_from is not None:
        return resolve_fine_tune(settings, backend, init_from, overwrite=overwrite, **common)
    return resolve_new(settings, overwrite=overwrite, model=model, **common)


def resolve_new(settings: Settings, *, save: bool, asked_to_save: bool, ranks: int, auto: bool,
                overwrite: bool, model: bool = True) -> RunSettings:
    """A new model from the settings."""
    train, run = settings.train_config(), settings.run_config()
    micro_batch = micro_batch_size(train.batch_size, train.grad_accum, ranks)
    target = _target(settings, run, None) if save else None
    notes = [check_replaceable(target, overwrite)] if target is not None else []
    shape = settings.model_config(vocab_size=1) if model else None  # the vocabulary comes from the text
    check_training(settings.family, shape, train)
    settings.check_all_used(train, save=asked_to_save)
    return _settled(settings, Start.NEW, None, settings.value("family"), shape, train, run, target, micro_batch,
                    auto, notes, vocab_size=settings.value("vocab_size"))


def resolve_resume(settings: Settings, backend: Backend, checkpoint: Path, *, save: bool, asked_to_save: bool,
                   ranks: int, auto: bool) -> RunSettings:
    """The checkpoint continued: its family, tokenizer, training settings, corpus and --log, under the flags."""
    model, tokenizer, info = load_checkpoint(checkpoint, backend, with_optimizer=True,
                                             max_memory=settings.value("max_memory"))
    state = _train_state(checkpoint, info)
    # a checkpoint from before the optimiser settings existed was trained with the reference's
    saved = {**REFERENCE_OPTIMIZER, **state.get("train_config", {}), "family": info["family"],
             "tokenizer": tokenizer.kind}
    if state.get("corpus_file"):
        saved["file"] = state["corpus_file"]
    if state.get("log"):
        saved["log"] = state["log"]  # --log tensorboard goes on writing its event files
    settings = settings.resumed_from(saved)
    train, run = settings.train_config(), settings.run_config()
    notes = schedule_overrides(settings, saved, train)
    micro_batch = micro_batch_size(train.batch_size, train.grad_accum, ranks)
    target = _target(settings, run, checkpoint) if save else None
    settings.check_shape_against(info["family"], model.config, checkpoint)
    check_tokenizer_against(settings, tokenizer, checkpoint, state.get("vocab_size_asked"))
    if train.steps <= model.params.step and not auto:
        raise ConfigError(f"{checkpoint} is already at step {model.params.step}; ask for more with ", Named("steps"),
                          " (a total, e.g. ", Named("steps", model.params.step + 1000), ")", key="steps")
    check_training(settings.family, model.config, train)
    settings.check_all_used(train, save=asked_to_save)
    source = Source(checkpoint, model, tokenizer, state)
    return _settled(settings, Start.RESUME, source, info["family"], model.config, train, run, target, micro_batch,
                    auto, notes, vocab_size=state.get("vocab_size_asked"))


def resolve_fine_tune(settings: Settings, backend: Backend, init_from: Path, *, save: bool, asked_to_save: bool,
                      ranks: int, auto: bool, overwrite: bool) -> RunSettings:
    """A new run from the weights of `init_from`: its family, shape and tokenizer (extended by the text's new
    characters when prepared), with a new optimiser, schedule and step 0."""
    train, run = settings.train_config(), settings.run_config()
    micro_batch = micro_batch_size(train.batch_size, train.grad_accum, ranks)
    target = _target(settings, run, None) if save else None
    if target is not None and init_from.resolve() in (target.resolve(), RunPaths(target).best.resolve()):
        raise ConfigError(Named("init_from", init_from), " would be replaced by this run's checkpoint (",
                          Named("model", target), ", or its -best); give the fine-tuned model its own ",
                          Named("model"), key="model")
    notes = [check_replaceable(target, overwrite)] if target is not None else []
    model, tokenizer, info = load_checkpoint(init_from, backend, max_memory=run.max_memory)
    fix = ("drop it to fine-tune this checkpoint",)
    settings.check_shape_against(info["family"], model.config, init_from, fix=fix)
    check_tokenizer_against(settings, tokenizer, init_from, None, fix=fix)
    settings.check_all_used(train, save=asked_to_save)
    return _settled(settings, Start.FINE_TUNE, Source(init_from, model, tokenizer, {}), info["family"], model.config,
                    train, run, target, micro_batch, auto, notes, vocab_size=settings.value("vocab_size"))


def _settled(settings: Settings, start: Start, source: Source | None, family_name: str, shape, train: TrainConfig,
             run: RunConfig, target: Path | None, micro_batch: int, auto: bool, notes: list,
             vocab_size: int | None) -> RunSettings:
    """The resolved settings, with what every start keeps alike."""
    return RunSettings(start, source, family_name, shape,
                       source.tokenizer.kind if source else settings.value("tokenizer"), vocab_size, train, run,
                       target, settings.named.id if settings.named else None, micro_batch, auto,
                       settings.validation_settings_given(), settings.origin_of_value("val_tokens"),
                       tuple(note for note in notes if note))


def _target(settings: Settings, run: RunConfig, resume: Path | None) -> Path:
    """Where the run saves (--model, else the checkpoint resumed, else checkpoints/<run id or file name>),
    checked to be a place a checkpoint can go."""
    label = settings.named.id if settings.named else None
    target = settings.path("model") or resume or DEFAULT_ROOT / (label or corpus_name(run.file))
    check_target(target)
    return target


def check_training(kind, shape, train: TrainConfig) -> None:
    """The family's own check of the training settings (the ensemble's --prior-off-at past --steps), where it
    has one and the shape is known."""
    if hasattr(kind, "check_training") and shape is not None:
        kind.check_training(shape, train)



def check_overwrite(overwrite: bool, save: bool, resume) -> None:
    """--overwrite starts a new run that saves over the checkpoint in its place; refused where it means nothing."""
    if overwrite and resume is not None:
        raise ConfigError(Named("overwrite"), " starts a new run over the checkpoint in ", Named("model"), " and ",
                          Named("resume"), " continues one; give one of them")
    if overwrite and not save:
        raise ConfigError(Named("overwrite"), " does nothing with ", Named("save", False),
                          ": nothing is saved; drop one of them")


def auto_resume(settings: Settings, save: bool) -> Path | None:
    """--resume auto: the checkpoint in --model to continue, or None when there is none (a new run there)."""
    if not save:
        raise ConfigError(Named("resume", RESUME_AUTO), " continues or starts the checkpoint in ",
                          Named("model", Placeholder("DIR")), ", and ", Named("save", False), " saves nothing; drop ",
                          Named("save", False), ", or continue a checkpoint unsaved with ",
                          Named("resume", Placeholder("DIR")))
    place = settings.path("model")
    if place is None:
        also = f" (or model: in {settings.named.origin})" if settings.named else ""
        raise ConfigError(Named("resume", RESUME_AUTO), " needs ", Named("model", Placeholder("DIR")), also,
                          ": the checkpoint to continue, or the place to start a new run when there is none yet",
                          key="model")
    return place if is_checkpoint(place) else None


def check_tokenizer_against(settings: Settings, tokenizer: Tokenizer, checkpoint: Path, asked: int | None,
                            fix: tuple = ("drop it to resume, or train a new model with ", Named("model"))) -> None:
    """On resume (or fine-tuning) the tokenizer is the checkpoint's: a --tokenizer given that disagrees (another
    kind, or a tokenizer.json that is not the checkpoint's) is an error, and so is a --vocab-size that is neither
    what the checkpoint's run asked for (`asked`) nor what its tokenizer has (fewer, where the text ran out of
    pairs to merge)."""
    if settings.given("tokenizer") and not matches_setting(settings.value("tokenizer"), tokenizer):
        other = f" ({tokenizer.describe()}, another)" if tokenizer.kind == "hf" else ""
        raise ConfigError(settings.mention("tokenizer"), f" does not match the checkpoint {checkpoint}, whose "
                          f"tokenizer is {tokenizer.kind}{other}; ", *fix)
    if settings.given("vocab_size") and settings.value("vocab_size") not in (asked, tokenizer.size):
        raise ConfigError(settings.mention("vocab_size"), f" does not match the checkpoint {checkpoint}, whose "
                          f"tokenizer has {tokenizer.size} tokens; ", *fix)


def schedule_overrides(settings: Settings, saved: dict, config: TrainConfig) -> list[str]:
    """On a resume: each optimiser or schedule flag that changes what the checkpoint was trained with."""
    notes = [Note(Named(key, settings.value(key)), f" overrides the checkpoint's {saved.get(key)}")
             for key in REFERENCE_OPTIMIZER if key in settings.explicit and settings.explicit[key] != saved.get(key)]
    if settings.explicit.get("precision", config.precision) != saved.get("precision", "fp32"):  # older: fp32
        notes.append(Note(Named("precision", config.precision),
                          f" overrides the checkpoint's {saved.get('precision', 'fp32')}"))
    old_steps = saved.get("steps")
    if config.lr_schedule == "cosine" and config.decay_steps is None and old_steps not in (None, config.steps):
        notes.append(Note(f"the cosine decay now ends at step {config.steps} (", Named("steps"), f"), not {old_steps}"))
    return notes


def _train_state(checkpoint: Path, info: dict) -> dict:
    """The training state a resume needs, or one clear line about what is missing."""
    state = info.get("train_state")
    if state is None:
        raise ConfigError(f"{checkpoint} holds weights only (no optimizer state), so it cannot be resumed; "
                          "fine-tune it with ", Named("init_from", checkpoint), " ", Named("model", Placeholder("NEW")),
                          ", or train a new model in its place without ", Named("resume"), key="resume")
    data = state.get("data")
    if not isinstance(state.get("step"), int) or not isinstance(data, dict) or not isinstance(data.get("kind"), str):
        raise CheckpointError(f"{checkpoint}/train_state.json lacks its step or data position; the training state "
                              "is damaged, so the run cannot resume (sample and eval can still use the weights)")
    return state


