"""A graph document whose sizes are too large for its causality check (issue 52 item 3's hostile documents):
`microgpt graph check` of gpt's graph with d = 10^9 went on to make the check's float64 copy of its parameters,
and ended in "out of memory" (or a traceback, where the count passed what NumPy can shape). The copy is bounded
from the document's numbers before anything is allocated: one line naming the parameters, the largest of them
and this machine's memory, in a process that cannot take 1 GiB."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from memory_limits import GIB, held_to
from microgpt.cli import main
from microgpt.core.errors import ConfigError
from microgpt.model.graph import causality
from microgpt.model.graph.compile import compile_graph
from microgpt.model.graph.library import with_library


@pytest.fixture
def gpt_document(tmp_path) -> dict:
    """`microgpt graph from-family`'s document of the default gpt."""
    assert main(["graph", "from-family", "--out", str(tmp_path / "gpt.json")]) == 0
    return json.loads((tmp_path / "gpt.json").read_text(encoding="utf-8"))


def test_a_graph_of_d_a_billion_is_refused_in_one_line_before_its_check_allocates(tmp_path, gpt_document):
    gpt_document["dims"].update(d=10**9, heads=4)
    (tmp_path / "huge.json").write_text(json.dumps(gpt_document), encoding="utf-8")
    count = sum(spec.size for spec in compile_graph(with_library(gpt_document), vocab=65, seq_len=64).specs)  # counted only
    done = subprocess.run([sys.executable, "-m", "microgpt", "graph", "check", "huge.json"], cwd=tmp_path,
                          capture_output=True, check=False, text=True, preexec_fn=held_to(GIB), timeout=120,
                          env={**os.environ, "OPENBLAS_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"})
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr  # "out of memory", or a traceback
    assert f"the graph's {count:,} parameters" in lines[0], lines[0]
    assert "is 1,000,000,000 x 1,000,000,000" in lines[0] and "more than this machine's" in lines[0], lines[0]
    assert "use smaller dims" in lines[0]


def test_the_bound_is_the_check_s_own_copy_against_the_machine_s_memory(monkeypatch, gpt_document):
    """The default gpt's 460,097 parameters take 40 bytes each in the check (17.6 MiB): refused on a machine of
    16 MiB, checked on one of 32 MiB."""
    program = compile_graph(with_library(gpt_document), vocab=65, seq_len=16)
    copy = sum(spec.size for spec in program.specs) * causality.COPY_BYTES_PER_PARAMETER
    monkeypatch.setattr(causality, "machine_memory", lambda: copy - 1)
    with pytest.raises(ConfigError, match=r"more than this machine's .* of memory; use smaller dims"):
        causality.check_causality(program, 16, None)
    assert program.verdict is None  # nothing checked, nothing kept
    monkeypatch.setattr(causality, "machine_memory", lambda: copy)
    assert causality.check_causality(program, 16, None).startswith("sound")
