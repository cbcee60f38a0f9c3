"""The flags of `microgpt train`, in groups by purpose: the settings (made from their declarations) and the
flags that say how to invoke a run.

A setting of one family only says so in its help ("the lookahead family's"), so that a default such as
--lookahead's 2 does not read as if that family were on by default.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from microgpt.cli.common import add_setting_flags, flag_type, help_text, positive_int
from microgpt.core.registry import FAMILIES
from microgpt.model.family import family
from microgpt.settings.known import family_keys
from microgpt.settings.sources import known_settings
from microgpt.training.resolve import RESUME_AUTO

# The flags that say how to invoke a run rather than what to train: (flags, argparse keywords).
INVOCATION_FLAGS = [
    (("--no-save",), {"action": "store_true", "help": "do not write a checkpoint or logs"}),
    (("--resume",), {"type": lambda text: text if text == RESUME_AUTO else Path(text), "metavar": "DIR",
                     "help": "continue a checkpoint: weights, Adam moments, step, data position and random state. "
                     "--resume auto continues the one in --model if there is one (a finished one: says so and exits "
                     "0) and starts a new run there if not (./auto names a directory called auto)"}),
    (("--overwrite",), {"action": "store_true",
                        "help": "start a new run over the checkpoint in --model (or its -best), finished or not, "
                        "which is refused without it"}),
    (("--init-from",), {"type": Path, "metavar": "DIR",
                        "help": "fine-tune: start a new run from a checkpoint's weights, with a fresh optimiser, "
                        "schedule and step 0, written to its own --model; characters a char checkpoint lacks get new "
                        "embedding and output rows"}),
    (("--config",), {"type": Path, "metavar": "FILE", "help": "a YAML file of named runs (see examples/configs.yaml)"}),
    (("--run",), {"dest": "run_id", "metavar": "ID", "help": "the run of --config to train; flags override its settings"}),
    (("--compare",), {"metavar": "SPECS",
                      "help": "train each model spec in turn on the same data and print a table, e.g. "
                      "d64n2,d4x16n2,d1+2+4+8+16+32n2 (d<width> | d<count>x<width> | d<w1>+<w2>+..., then "
                      "n<layers>, optional ff<d_ff>; d_ff is --d-ff if given, else 4 x d_model); with --family "
                      "ensemble, ensembles separated by ';', each its experts' specs, e.g. "
                      "'d64n3,d64n3;d32n3,d32n3,d32n3,d32n3'"}),
    (("--quiet",), {"action": "store_true", "help": "no progress output, only the summary"}),
    (("--dry-run",), {"action": "store_true",
                      "help": "plan the run and say what it would train (corpus, tokenizer, model, steps, memory, "
                      "where it saves), every check made as for training; nothing is trained or written"}),
    (("--procs",), {"type": positive_int, "metavar": "N",
                    "help": "train data-parallel in N processes under mpiexec (needs the mpi extra), one BLAS "
                    "thread each; --batch-size is split over them. Use at most one per core: N processes of one "
                    "thread, in place of one process with a thread per core (the default), trade their start-up "
                    "and an all-reduce of the gradients every step for slices of the batch that share no interpreter lock; "
                    "see docs/distributed.md, and docs/benchmarks.md for what each costs"}),
]

# The groups of train's flags, in the order --help shows them: (title, the settings' keys and invocation flags
# it holds). The family groups come from the families' own declarations (family_groups).
STEPS_AND_DATA = ("steps", "seed", "batch_size", "grad_accum", "stride", "random_batches", "val_tokens", "val_interval",
                  "eval_every", "save_every")
OPTIMISER = ("lr", "warmup", "lr_schedule", "min_lr", "decay_steps", "weight_decay", "beta1", "beta2", "grad_clip")
RUN_AND_OUTPUT = ("backend", "threads", "precision", "max_memory", "gen", "max_corpus", "model", "log", "--no-save", "--resume",
                  "--overwrite", "--init-from", "--config", "--run", "--compare", "--quiet")
PARALLEL = ("--procs", "collective_timeout")
WHAT_TO_TRAIN = ("family", "tokenizer", "vocab_size", "preset", "--dry-run")


def owners() -> dict[str, tuple[str, ...]]:
    """Each family setting's key, and the families that declare it."""
    found: dict[str, list[str]] = {}
    for name in FAMILIES:
        for key in family_keys(family(name)):
            found.setdefault(key, []).append(name)
    return {key: tuple(names) for key, names in found.items()}


def family_groups() -> list[tuple[str, tuple[str, ...]]]:
    """A group per set of families that declare a setting alike: every family's shape, then each family's own."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for key, names in owners().items():
        groups.setdefault(names, []).append(key)
    ordered = sorted(groups.items(), key=lambda item: len(item[0]) != len(FAMILIES))  # every family's first
    return [(family_title(names), tuple(keys)) for names, keys in ordered]


def owner_note(names: tuple[str, ...]) -> str | None:
    """"the lookahead family's", for a setting some families have; None for one every family has."""
    if len(names) == len(FAMILIES):
        return None
    return f"the {' and '.join(names)} famil{'ies' if len(names) > 1 else 'y'}'{'' if len(names) > 1 else 's'}"


def family_title(names: tuple[str, ...]) -> str:
    if len(names) == len(FAMILIES):
        return "the model's shape, in every family"
    ways = []
    for name in names:
        chooser = getattr(family(name), "SELECTED_BY", None)
        ways.append(f"--family {name}" + (f" or {known_settings()[chooser].flag}" if chooser else ""))
    return f"the {' and '.join(names)} famil{'ies' if len(names) > 1 else 'y'} ({'; '.join(ways)})"


def groups() -> list[tuple[str, tuple[str, ...]]]:
    return [("what to train", WHAT_TO_TRAIN), *family_groups(), ("steps, batches and validation", STEPS_AND_DATA),
            ("optimiser and schedule", OPTIMISER), ("where it runs and what it writes", RUN_AND_OUTPUT),
            ("several processes", PARALLEL)]


def add_train_flags(parser: argparse.ArgumentParser) -> None:
    """FILE, then every group's flags under its title."""
    fields = known_settings()
    parser.add_argument("file", nargs="?", metavar="FILE", type=flag_type(fields["file"]),
                        help=f"{fields['file'].help} (default: {fields['file'].default_text})")
    invocation = {flags[0]: keywords for flags, keywords in INVOCATION_FLAGS}
    declared = owners()
    for title, keys in groups():
        group = parser.add_argument_group(title)
        for key in keys:
            if key in invocation:
                group.add_argument(key, **{**invocation[key], "help": help_text(invocation[key]["help"])})
            else:
                add_setting_flags(group, [fields[key]], owner=owner_note(declared[key]) if key in declared else None)
