"""document.check_read, the checks of a document a request already read from JSON: the same refusal, word for
word, as parse_document gives the same document as text, and the document itself back when it is sound."""

from __future__ import annotations

import json

import pytest

from microgpt.core.errors import ConfigError
from microgpt.model.graph.document import MAX_DOCUMENT_BYTES, check_read, parse_document

SOUND = {"microgpt_graph": 1, "dims": {"d": 8},
         "nodes": [{"id": "embed", "op": "embedding"}, {"id": "head", "op": "logits"}],
         "edges": [{"from": "tokens", "to": "embed.ids"}, {"from": "embed.out", "to": "head.x"},
                   {"from": "head.out", "to": "logits"}]}


def nested(levels: int) -> dict:
    value: object = 1
    for _ in range(levels):
        value = {"a": value}
    return {**SOUND, "description": value}


REFUSED = {
    "not an object": [1, 2],
    "no version": {"nodes": [], "edges": []},
    "a newer format": {**SOUND, "microgpt_graph": 2},
    "an unknown key": {**SOUND, "layout": {}},
    "a node without an op": {**SOUND, "nodes": [{"id": "a"}]},
    "two nodes of one id": {**SOUND, "nodes": [{"id": "a", "op": "relu"}, {"id": "a", "op": "relu"}]},
    "an edge of three keys": {**SOUND, "edges": [{"from": "a.out", "to": "b.x", "via": "c"}]},
    "nested 70 deep": nested(70),
    "over the size": {**SOUND, "description": "x" * MAX_DOCUMENT_BYTES},
}


@pytest.mark.parametrize("case", REFUSED)
def test_refused_as_its_text_is(case):
    document = REFUSED[case]
    with pytest.raises(ConfigError) as from_text:
        parse_document(json.dumps(document), "the document")
    with pytest.raises(ConfigError) as read:
        check_read(document, "the document")
    assert str(read.value) == str(from_text.value)


def test_a_sound_document_is_itself():
    assert check_read(SOUND, "the document") is SOUND
    assert parse_document(json.dumps(SOUND)) == SOUND
