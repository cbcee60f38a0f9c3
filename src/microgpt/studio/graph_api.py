"""The node editor's server side: the check of what it draws, a family's graph, and layouts.

- `check_request(body, workspace)` (POST /api/graph/check): a graph document and its run settings (or, in
  family mode, a family and its shape settings, whose from-family document is checked) read by the library's
  own rules, every problem on the node, port or setting it names, the type and shape on every wire the
  compiler bound (also those bound before it stopped), each node's parameters, memory and share of a step's
  operations (graph_costs.py), the step's memory and expected tokens/s, and the causality verdict of a graph
  with no other problem (graph_verdicts.py): {"ok": true or false, "pending": false, "message"}; {"ok": null,
  "pending": true} while it still runs past the check's budget (a big graph: the next check of the same
  document has it), or {"ok": null, "pending": false} where it is not run here (other problems first, or a
  graph too big for the studio to check). graph_run.py reads the settings.
- `from_family_request` (POST /api/graph/from-family): a family's graph and layout for its shape settings;
  `layout_request` (POST /api/graph/layout): a layout for any document (graph_layout.py). The palette (GET
  /api/graph/palette) is graph_palette.py's.

An error is {"path": the node path as the compiler flattens it (["blocks", "0", "attn"], [] for the graph or
a setting), "at": the "BODY/NODE" keys of the nodes on that path, "port": a port or null, "message"}, with
"setting": KEY for a run setting's problem and "edge": {"body", "from", "to"} where an edge is the problem.
"""

from __future__ import annotations

import contextlib
import time
from concurrent import futures
from concurrent.futures import Future
from dataclasses import dataclass, field

from microgpt.backends import backend_class
from microgpt.core.checks import format_bytes, shown
from microgpt.core.errors import ConfigError
from microgpt.core.registry import FAMILIES
from microgpt.model.family import family
from microgpt.model.graph.compile import GraphError, Trace, compile_graph
from microgpt.model.graph.document import check_read
from microgpt.model.graph.from_family import WRITERS, document_for
from microgpt.model.graph.library import with_library
from microgpt.model.graph.ops.base import ValueType
from microgpt.model.graph.program import Program
from microgpt.model.memory import estimate_training_bytes
from microgpt.settings.known import family_keys
from microgpt.studio.graph_costs import node_costs
from microgpt.studio.graph_layout import layout_of
from microgpt.studio.graph_run import DraftSettings, run_settings
from microgpt.studio.graph_verdicts import CAUSALITY_MAX_PARAMETERS, causality_of, expected_verdict_s
from microgpt.studio.speed import expected_tokens_per_second

CHECK_BACKEND = "numpy"  # memory as `microgpt train --backend numpy` estimates it (float32)
# An edit's check answers within 150 ms (issue 29): the causality verdict is waited for until CHECK_BUDGET_S into
# the check, leaving the rest for the answer's JSON and its way back; a verdict that takes longer (hundreds of
# nodes: it runs the graph's forward) comes with the next check of the same document.
CHECK_BUDGET_S = 0.1
LARGEST_SHOWN = 1024**5  # bytes: a size past this is shown as "more than 1024.0 TiB" (format_bytes divides floats)


def type_text(kind: ValueType) -> tuple[str, str]:
    """(a value's type as a document writes it, its shape): ("stream[64]", "[T, 64]"), ("logits", "[T, 65]")."""
    if kind.kind == "token_ids":
        return "token_ids", "[T]"
    return (kind.kind if kind.kind == "logits" else f"{kind.kind}[{kind.width}]"), f"[T, {kind.width}]"


@dataclass
class GraphCheck:
    """What the editor shows after an edit (see the module doc)."""

    errors: list[dict] = field(default_factory=list)
    wires: list[dict] = field(default_factory=list)
    nodes: dict = field(default_factory=dict)
    parameters: int | None = None
    memory_bytes: int | None = None
    tokens_per_second: float | None = None
    speed_basis: str | None = None
    causality: dict | None = None
    description: str | None = None
    settings: dict = field(default_factory=dict)  # the run's settings as YAML values, for a save
    document: dict | None = None  # the document checked (the from-family one in family mode)

    def add(self, message: str, path=(), port=None, trace: Trace | None = None, **where) -> None:
        path = tuple(path)
        at = [trace.nodes[path[:cut]] for cut in range(1, len(path) + 1)
              if trace is not None and path[:cut] in trace.nodes]
        self.errors.append({"path": list(path), "at": at, "port": port, "message": message, **where})

    def as_json(self) -> dict:
        return {"ok": not self.errors, "errors": self.errors, "wires": self.wires, "nodes": self.nodes,
                "parameters": self.parameters, "memory_bytes": self.memory_bytes,
                "memory": None if self.memory_bytes is None else readable_bytes(self.memory_bytes),
                "tokens_per_second": self.tokens_per_second, "speed_basis": self.speed_basis,
                "causality": self.causality, "description": self.description}


@dataclass
class _Compiled:
    """What the graph family reads of its config (its program and context), for a program compiled here."""

    program: Program
    seq_len: int


def add_verdict(checked: GraphCheck, verdict: Future, trace: Trace, wait_s: float | None) -> None:
    """The verdict, waited for up to `wait_s` (None: until it is in), as `causality` (and an error where the
    graph leaks)."""
    with contextlib.suppress(futures.TimeoutError, futures.CancelledError):  # a later edit's check cancels it
        verdict.result(timeout=wait_s)
    if not verdict.done() or verdict.cancelled():
        checked.causality = {"ok": None, "pending": True,
                             "message": "the causality check is running; check again for its verdict"}
        return
    checked.causality, leak = verdict.result()
    if leak is not None:
        checked.add(str(leak), leak.path, None, trace)


def readable_bytes(size: int) -> str:
    """format_bytes, for any size a document can bind (past a pebibyte it says so rather than overflow a float)."""
    return format_bytes(size) if size < LARGEST_SHOWN else f"more than {format_bytes(LARGEST_SHOWN)}"


def add_costs(checked: GraphCheck, program: Program, trace: Trace, run: DraftSettings, model, workspace) -> None:
    """Each node's costs, and the step's parameters, memory (against --max-memory) and expected tokens/s;
    `model` is (family, config) of what trains: the graph, or in family mode the family."""
    backend = backend_class(CHECK_BACKEND)()
    graph, config = family("graph"), _Compiled(program, run.seq_len)
    checked.nodes = node_costs(program, trace, run.micro_batch, backend)
    checked.parameters = sum(spec.size for spec in program.specs)
    checked.description = graph.describe(config)
    if run.settings is None:
        return
    kind, model_config = model or (graph, config)
    checked.memory_bytes = estimate_training_bytes(kind, model_config, run.micro_batch, backend)
    cap = run.settings.value("max_memory")
    if checked.memory_bytes > cap:
        needs = readable_bytes(checked.memory_bytes)
        checked.add(f"a training step needs {needs if needs.startswith('more') else 'about ' + needs} but --max-memory is "
                    f"{format_bytes(cap)}; use a smaller --batch-size, --seq-len or model", setting="batch_size")
        return
    checked.tokens_per_second, checked.speed_basis = expected_tokens_per_second(max(checked.parameters, 1),
                                                                                workspace)
    checked.settings = run.values


def document_of(body: dict, run: DraftSettings, checked: GraphCheck) -> dict | None:
    """The document to check: the body's, or in family mode the family's from-family document."""
    name = body.get("family")
    if name is None:
        document = body.get("document")
        if not isinstance(document, dict):
            checked.add(f"the document must be a graph document (an object with microgpt_graph, nodes and edges), "
                        f"not {type(document).__name__}")
            return None
        try:  # its limits and structure, as a file's
            return check_read(document, "the document")
        except ConfigError as exc:
            checked.add(str(exc))
            return None
    if run.config is None:  # the settings' problems are said already
        return None
    return document_for(name, run.config)


def check_request(body: dict, workspace, budget_s: float | None = CHECK_BUDGET_S) -> GraphCheck:
    """Every problem of a document and its run settings, and what it costs (see the module doc); the causality
    verdict is waited for until `budget_s` into the check (None: until it is in, as a save needs it)."""
    started = time.perf_counter()
    checked = GraphCheck()
    settings = body.get("settings", {})
    if not isinstance(settings, dict):
        checked.add(f"settings must be an object of setting: value, not {type(settings).__name__}")
        return checked
    if body.get("family") is not None and body["family"] not in _names(WRITERS):
        checked.add(f"family {shown(body['family'])} has no from-family graph; the families are "
                    f"{', '.join(WRITERS)} (a graph is checked from its document)", setting="family")
        return checked
    run = run_settings(settings, body.get("family"), workspace, checked)
    document = document_of(body, run, checked)
    if document is None:
        return checked
    checked.document = document
    trace = Trace(keep_going=True)  # every node's problem, not the first only
    program = None
    try:
        program = compile_graph(with_library(document), run.vocab, run.seq_len, trace)
    except GraphError as exc:
        for problem in trace.problems or [exc]:
            checked.add(str(problem), problem.path, problem.port, trace,
                        **({"edge": problem.edge} if problem.edge else {}))
    except ConfigError as exc:
        checked.add(str(exc))
    for (body_name, source, target), kinds in trace.wires.items():
        types = list(dict.fromkeys(type_text(kind) for kind in kinds))
        checked.wires.append({"body": body_name, "from": source, "to": target, "type": types[0][0],
                              "shape": " or ".join(shape for _, shape in types)})
    if program is None:
        return checked
    add_costs(checked, program, trace, run, None if run.config is None else (family(body["family"]), run.config),
              workspace)
    if checked.errors or checked.parameters > CAUSALITY_MAX_PARAMETERS:
        checked.causality = {"ok": None, "pending": False, "message": (
            "checked once the other problems are fixed" if checked.errors else
            f"not checked here: {checked.parameters:,} parameters is over the studio's "
            f"{CAUSALITY_MAX_PARAMETERS:,}; microgpt train checks it before its first step")}
        return checked
    verdict = causality_of(program, document, run)
    while budget_s is None:  # a save waits for its own verdict, which an edit's check may cancel before it starts
        try:
            verdict.result()
            break
        except futures.CancelledError:
            verdict = causality_of(program, document, run)
    left = None if budget_s is None else max(0.0, budget_s - (time.perf_counter() - started))
    if left is not None and not verdict.done() and expected_verdict_s(program) > left:
        left = 0.0  # it will not come in time: the errors and costs go back now, the verdict with a later check
    add_verdict(checked, verdict, trace, left)
    return checked


def _names(known) -> list[str]:
    """The names of `known` as a list, which any JSON value can be looked up in (a list or an object in a
    dict's `in` raises TypeError)."""
    return list(known)


def from_family_request(body: dict, workspace) -> dict:
    """{"document": the family's graph for its shape settings, "layout": drawn as the family is, "errors": []},
    or no document and the shape settings' problems, each on its setting. Only the family's shape settings
    are read (the rest of the run's settings do not change its graph)."""
    name = body.get("family")
    if name not in _names(WRITERS):
        raise ConfigError(f"family {shown(name)} has no from-family graph; the families are {', '.join(WRITERS)}")
    given = body.get("settings", {})
    if not isinstance(given, dict):
        raise ConfigError(f"settings must be an object of setting: value, not {type(given).__name__}")
    shape = set(family_keys(family(name))) - {"vocab_size"}
    checked = GraphCheck()
    run = run_settings({key: value for key, value in given.items() if key in shape}, name, workspace, checked)
    if run.config is None:
        return {"document": None, "layout": None, "errors": checked.errors}
    document = document_for(name, run.config)
    return {"document": document, "layout": layout_of(document, name), "errors": []}


def layout_request(body: dict) -> dict:
    """{"layout"} of the body's document (read with its limits), drawn as `family` is where the body names one."""
    document = body.get("document")
    if not isinstance(document, dict):
        raise ConfigError("give the document to lay out: {\"document\": a graph document}")
    family_name = body.get("family")
    if family_name is not None and family_name not in _names(FAMILIES):
        raise ConfigError(f"family {shown(family_name)} is not one of: {', '.join(FAMILIES)}")
    return {"layout": layout_of(check_read(document, "the document"), family_name)}
