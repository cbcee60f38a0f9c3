"""model/graph/memory.py keeps the last program's walk (what each node saves) for the second question of the
studio's check about the same program: a program, a backend or a batch asked after another gets its own
figures, the same as a walk made anew."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from microgpt.backends import get_backend
from microgpt.model.graph import memory
from microgpt.model.graph.compile import compile_graph
from microgpt.model.graph.library import with_library
from microgpt.model.graph.memory import node_activations, program_parts

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "graphs"


def programs():
    return [compile_graph(with_library(json.loads((EXAMPLES / name).read_text())), 65, 16)
            for name in ("gpt_bigram.json", "two_experts.json")]


def fresh(program, batch, backend):
    memory._last_kept.clear()
    return program_parts(program, batch, backend), node_activations(program, batch, backend)


def test_each_program_backend_and_batch_has_its_own_figures():
    first, second = programs()
    float32, float64 = get_backend("numpy", dtype=np.float32), get_backend("numpy", dtype=np.float64)
    cases = [(first, 4, float32), (second, 4, float32), (first, 2, float32), (first, 4, float64), (second, 4, float64)]
    expected = [fresh(*case) for case in cases]
    for case, figures in zip(cases * 2, expected * 2):  # each asked after another, twice round
        assert (program_parts(*case), node_activations(*case)) == figures
    assert expected[0] != expected[1] and expected[0] != expected[2]
