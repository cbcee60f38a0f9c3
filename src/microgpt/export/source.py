"""What an export starts from: a checkpoint read whole (its save settled), its graph, its plan and its weights.

`microgpt.load` reads the checkpoint as every reader does: each file carries its save's `save_id`, and a
read that meets a save under way (files of two saves, a directory being swapped) is read again until the ids
agree (model/checkpoint.py's `load_checkpoint`), so an export never mixes two saves. A gpt, ensemble or
lookahead model is exported through the graph equal to it (model/graph/from_family), whose parameters come
in the family's order; they are matched by their place in the flat store and shape, and each keeps the
checkpoint's name (a hydra head's token weights, stacked in the graph, match none, and no logits read them).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from microgpt.export.export_plan import ExportError, make_plan
from microgpt.model.family import family


@dataclass
class Source:
    """A checkpoint ready to export: its plan, its weights by checkpoint name, and what describes it."""

    path: Path
    family_name: str
    plan: dict
    weights: dict[str, np.ndarray]  # name -> float32 array in its checkpoint shape, only those the plan reads
    program: object  # the compiled graph (model/graph/compile.py's Program)
    tokenizer_json: dict
    describe: str
    model: object  # the family's model the weights came from

    def expected(self, ids: np.ndarray) -> np.ndarray:
        """microgpt's own logits (B, T, vocab) of host ids (B, T)."""
        ids = np.asarray(ids, dtype=np.int32)
        return self.model.be.to_host(self.model.logits(ids)).reshape(*ids.shape, -1)

    @property
    def seq_len(self) -> int:
        return self.plan["seq_len"]


def graph_program(family_name: str, config):
    """(the compiled graph of a model of this family and config, graph parameter name -> the family's name,
    the family's name -> its ParamSpec)."""
    own = family(family_name).param_specs(config)
    if family_name == "graph":
        program = config.program
        return program, {spec.name: spec.name for spec in program.specs}, {spec.name: spec for spec in own}
    from microgpt.model.graph.from_family import document_for

    document = document_for(family_name, config)
    program = family("graph").Config(vocab_size=config.vocab_size, graph=document, seq_len=config.seq_len).program
    return program, _matched(family_name, program.specs, own), {s.name: s for s in own}


def _places(specs) -> tuple[dict, int]:
    """({(offset in the flat store, shape): name}, the store's size) of parameters in this order."""
    offset, found = 0, {}
    for spec in specs:
        found[(offset, tuple(spec.shape))] = spec.name
        offset += spec.size
    return found, offset


def _matched(family_name: str, graph_specs, own) -> dict[str, str]:
    """Graph parameter name -> the family's, for each at the same place in the two flat stores with the same
    shape; the others are the family's grouped otherwise (a hydra layer's token<j>.w, one token.w in the graph),
    which the logits do not read. ExportError where the stores differ in size."""
    ours, our_size = _places(graph_specs)
    theirs, their_size = _places(own)
    if our_size != their_size:
        raise ExportError(f"the graph of this {family_name} model does not have the family's parameters in its "
                          "order; it cannot be exported (a microgpt bug: please report it)")
    return {name: theirs[place] for place, name in ours.items() if place in theirs}


def source_of(model, family_name: str, tokenizer, path: str | Path = "") -> Source:
    """A Source of a built model of `family_name` (its weights as they are now, its optimiser step)."""
    program, names, specs = graph_program(family_name, model.config)
    plan = make_plan(program, names, specs, model.params.step)
    tensors = model.params.to_host()
    weights = {name: np.ascontiguousarray(tensors[name], dtype=np.float32) for name in plan["weights"]}
    return Source(Path(path), family_name, plan, weights, program, tokenizer.to_json(),
                  family(family_name).describe(model.config), model)


def read_source(directory: str | Path, max_memory=None) -> Source:
    """The checkpoint at `directory`, loaded on the numpy backend (float32), as a Source; CheckpointError or
    FileNotFoundError for one that cannot be read, ExportError for one that has no export."""
    from microgpt.use.loaded import load

    loaded = load(directory, backend="numpy", max_memory=max_memory)
    return source_of(loaded.model, loaded.family_name, loaded.tokenizer, directory)
