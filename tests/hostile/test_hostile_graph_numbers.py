"""A graph document holding a number of more digits than Python converts (issue 52 item 3: "5,000-digit integers
in a graph document (JSON or YAML)"): one line naming the document, from `microgpt graph check` and from the
studio's check of a document file, never "ValueError: Exceeds the limit (4300 digits)" as a traceback."""

from __future__ import annotations

import sys

import pytest

from microgpt.cli import main
from microgpt.core.errors import ConfigError
from microgpt.model.graph.document import read_document

DIGITS = "9" * 5000
DOCUMENTS = {
    "g.json": '{"microgpt_graph": 1, "dims": {"d": ' + DIGITS + '}, "nodes": [], "edges": []}',
    "g.yaml": "microgpt_graph: 1\ndims: {d: " + DIGITS + "}\nnodes: []\nedges: []\n",
}


@pytest.mark.parametrize("name", sorted(DOCUMENTS))
def test_a_5000_digit_number_in_a_graph_document_is_one_line(tmp_path, capsys, name):
    path = tmp_path / name
    path.write_text(DOCUMENTS[name], encoding="utf-8")
    said = f"{name} holds a number of more than {sys.get_int_max_str_digits():,} digits"
    with pytest.raises(ConfigError, match=said):
        read_document(path)
    assert main(["graph", "check", str(path)]) == 2  # it raised ValueError: Exceeds the limit (4300 digits)
    err = capsys.readouterr().err
    assert said in err and len(err.strip().splitlines()) == 1, err
