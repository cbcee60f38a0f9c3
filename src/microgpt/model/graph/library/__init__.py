"""The library groups (the .yaml files here, read in LIBRARY_FILES order) and how a document that uses them
is made self-contained.

`with_library(document)` copies every library group the document uses, and those they use, into its own
groups, before them (a group may use only the groups listed before it), unless it defines one of that name
itself. A checkpoint stores that document, so it keeps the graph it trained whatever this file becomes.
"""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path

from microgpt.model.graph.document import parse_document

LIBRARY = Path(__file__).parent
LIBRARY_FILES = ("transformer.yaml", "ensemble.yaml", "lookahead.yaml")  # in order: a file's groups may use those of the files before it


@cache
def _library() -> dict:
    groups: dict = {}
    for name in LIBRARY_FILES:
        document = parse_document((LIBRARY / name).read_text(encoding="utf-8"), f"the graph library's {name}")
        groups.update(document["groups"])
    return groups


def library_groups() -> dict:
    """Every library group by name (a copy, safe to change)."""
    return copy.deepcopy(_library())


def _used(body: dict) -> list[str]:
    return [node["group"] for node in body.get("nodes", []) if "group" in node]


def with_library(document: dict) -> dict:
    """The document with the library groups it uses copied into its groups (the document itself unchanged).

    Its own groups keep their order; each library group goes in as soon as every group it uses is in, so that
    a library group can use a group the document redefines (its own attention, say)."""
    library, own = _library(), document.get("groups", {})
    needed: list[str] = []

    def visit(name: str) -> None:
        if name in own or name in needed or name not in library:
            return
        needed.append(name)
        for inner in _used(library[name]):
            visit(inner)

    for body in [document, *own.values()]:
        for name in _used(body):
            visit(name)
    if not needed:
        return document
    needed.sort(key=list(library).index)
    groups: dict = {}

    def place_ready() -> None:
        for name in needed:
            if name not in groups and all(inner in groups or inner not in library and inner not in own
                                          for inner in _used(library[name])):
                groups[name] = copy.deepcopy(library[name])
                place_ready()
                return

    for name, group in own.items():
        place_ready()
        groups[name] = group
    place_ready()
    groups.update({name: copy.deepcopy(library[name]) for name in needed if name not in groups})
    return {**document, "groups": groups}
