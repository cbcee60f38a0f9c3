"""The graph family's settings: the document (--graph G.json) and the context length.

`GraphConfig.graph` is the document itself once the config is made: from a path (the flag, a named run) it
is read, the library groups it uses are copied in (library.py), and it is compiled, so that a document that
does not compile is refused before anything is built. config.json stores it, so a checkpoint holds the graph
it trained.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from microgpt.core.checks import Path, whole
from microgpt.core.errors import ConfigError, Named, Placeholder
from microgpt.core.fields import check_model_fields, setting
from microgpt.model.graph.compile import compile_graph
from microgpt.model.graph.document import read_document
from microgpt.model.graph.library import with_library
from microgpt.model.graph.program import Program


class GraphDocument(Path):
    """A graph document's path (a flag, YAML), or the document itself (a checkpoint, Python). A path check, so
    that whatever holds paths to a place (the studio's workspace) holds this one too."""

    kind = "the path of a graph document (.json or .yaml)"

    def validate(self, value):
        if isinstance(value, dict) or (isinstance(value, str) and value):
            return value
        raise ValueError(self.kind)

    def show(self, value) -> str:
        return "none" if value is None else "a graph document"


@dataclass
class GraphConfig:
    vocab_size: int
    graph: Mapping | str | None = setting(
        None, "train the model a graph document describes (JSON or YAML: its nodes, groups and edges, "
        "docs/graphs.md); chooses --family graph", GraphDocument(), shown_default="none", metavar="G.json")
    seq_len: int = setting(64, "context length in tokens (characters with the char tokenizer)", whole(1),
                           metavar="T")

    def __post_init__(self) -> None:
        check_model_fields(self)
        if self.graph is None:
            raise ConfigError("the graph family needs a document: ", Named("graph", Placeholder("G.json")),
                              " (microgpt graph from-family writes one from any family's flags)", key="graph")
        source = self.graph if isinstance(self.graph, str) else None
        if source is not None:
            self.graph = read_document(source)
        self.graph = with_library(self.graph)
        try:
            self.program: Program = compile_graph(self.graph, self.vocab_size, self.seq_len)
        except ConfigError as exc:
            raise ConfigError(*((f"{source}: ",) if source else ()), *exc.parts, key=exc.key or "graph") from None
