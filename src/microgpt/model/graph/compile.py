"""The compiler: a graph document to a `Program` (program.py), the flat list of primitives a model runs.

1. bind the dimensions: vocab and T from the run, then the document's dims in order;
2. flatten the groups: each body's nodes in an order where every edge runs forward (a cycle is refused,
   naming its nodes), each group instance expanded in place (a repeat chains its instances), every node's
   params evaluated in its scope (the dims and each enclosing group's params);
3. infer and check shapes at every edge, so that an error names the node path and port;
4. give every op its parameters, in the document's order (so a graph written like a family draws the
   family's initial weights from the same seed);
5. rewrite known subgraphs to the backend's fused ops (rewrite.py);
6. find what each pass needs: the nodes up to the logits, up to the main loss, and all of them.

The flattened order is the forward's; the backward runs it in reverse (model.py). Every problem is a
`GraphError`, a ConfigError that also says where it is (the node path, the port), and a `Trace` given to
`compile_graph` keeps what was bound before the compiler finished or stopped (an editor's shapes on wires).
"""

from __future__ import annotations

import difflib
import heapq
from dataclasses import dataclass, field

from microgpt.core.errors import ConfigError
from microgpt.model.graph.document import GRAPH_OUTPUTS, check_document
from microgpt.model.graph.expressions import evaluate, group_value, word
from microgpt.model.graph.ops import ALL, OPS
from microgpt.model.graph.ops.base import REQUIRED, Node, ShapeError, ValueType
from microgpt.model.graph.program import Instance, Program
from microgpt.model.graph.rewrite import fuse
from microgpt.model.params import ParamSpec

MAX_NODES = 20_000  # primitives after flattening: a 96-layer GPT is 1,060 (what the limit costs: docs/benchmarks.md)
MAX_NESTING = 32  # groups inside groups
MAX_REPEAT = 1000  # copies of one group


class GraphError(ConfigError):
    """A problem of a document, with where it is: the node path (() for the graph itself), the input or output
    port where it has one, and the edge ({"body", "from", "to"}) where an edge is the problem."""

    def __init__(self, message: str, path: tuple = (), port: str | None = None, edge: dict | None = None):
        super().__init__(message)
        self.path, self.port, self.edge = tuple(path), port, edge


@dataclass
class Trace:
    """What the compiler bound, kept as it binds (so also what it bound before a problem stopped it):
    `wires`: (body, edge's from, edge's to) -> the type of the value on that edge in each instance of the body
    (body "" is the top level, else the group's name); `nodes`: each node path flattened -> "BODY/NODE".
    With `keep_going` (the studio's check), a node's or an edge's problem goes into `problems` and the compiler
    goes on with the nodes that do not read from it, so that every problem is said at once; compile_graph
    still raises the first."""

    wires: dict[tuple[str, str, str], list[ValueType]] = field(default_factory=dict)
    nodes: dict[tuple, str] = field(default_factory=dict)
    keep_going: bool = False
    problems: list[GraphError] = field(default_factory=list)

    def said(self, problem: ConfigError, path: tuple) -> None:
        """`problem` as a GraphError on `path`, kept where the compiler goes on (else raised)."""
        error = problem if isinstance(problem, GraphError) else GraphError(str(problem), path)
        if not self.keep_going:
            raise error from None
        if not isinstance(error, _Said):
            self.problems.append(error)

    def bind(self, body: str, source: str, target: str, kind: ValueType) -> None:
        self.wires.setdefault((body, source, target), []).append(kind)


class _Said(GraphError):
    """A body stopped by problems already in Trace.problems (keep_going): what reads its outputs is skipped."""


class _Compiler:
    def __init__(self, document: dict, vocab: int, seq_len: int, trace: Trace | None = None):
        self.document = document
        self.trace = trace or Trace()
        self.groups = document.get("groups", {})
        self.nodes: list[Node] = []
        self.order_keys: list[tuple] = []  # each node's place in the document, for the parameters' order
        self.values: dict[int, ValueType] = {}
        self.instances: list[Instance] = []
        self.sizes: dict[tuple, tuple[int, int]] = {}  # (group, its scope) -> what one instance flattens to
        self.run_dims = {"vocab": vocab, "T": seq_len}

    def new_value(self, kind: ValueType) -> int:
        vid = len(self.values)
        self.values[vid] = kind
        return vid

    def dims(self) -> dict:
        scope = dict(self.run_dims)
        for key, value in self.document.get("dims", {}).items():
            scope[key] = evaluate(value, scope, f"dims.{key}")
            if isinstance(scope[key], bool) or not isinstance(scope[key], (int, list)):
                raise ConfigError(f"dims.{key} must be a whole number (or a list of them), got {scope[key]!r}")
        return scope

    # ---- flattening -----------------------------------------------------------------------------

    def expand(self, body: dict, scope: dict, path: tuple, inputs: dict[str, int], outputs: dict[str, str],
               key: tuple, depth: int, body_name: str, group: str = "") -> dict[str, int]:
        """Expand one body (the top level, or the group `group`) whose input ports carry the given values; returns
        its output ports' values."""
        if depth > MAX_NESTING:
            raise GraphError(f"{'/'.join(path)}: groups nest deeper than {MAX_NESTING}; flatten some of them", path)
        nodes = {node["id"]: node for node in body.get("nodes", [])}
        where = "/".join(path) if path else "graph"
        # target node id ("" for the body's outputs) -> (port, source, the source's node id or None)
        incoming: dict[str, list[tuple[str, str, str | None]]] = {}
        failed: set[str | None] = set()  # nodes whose problem is said (keep_going): what reads them is skipped
        for edge in body.get("edges", []):
            target_node, target_port = _end(edge["to"])
            source_node, source_port = _end(edge["from"])
            if (target_node not in nodes if target_node is not None else target_port not in outputs) or (
                    source_node not in nodes if source_node is not None else source_port not in inputs):
                try:
                    self.refuse_edge(edge, nodes, inputs, outputs, where, path, body_name, group)
                except GraphError as exc:
                    self.trace.said(exc, path)
                    failed.add(target_node)
                    continue
            incoming.setdefault(target_node or "", []).append((target_port, edge["from"], source_node))
        produced: dict[str, int] = dict(inputs)
        for position, node_id in self.order(nodes, incoming, where, path):
            spec = nodes[node_id]
            node_path = (*path, node_id)
            self.trace.nodes[node_path] = f"{group}/{node_id}"
            if node_id in failed or any(source in failed for _, _, source in incoming.get(node_id, [])):
                failed.add(node_id)
                continue
            try:
                made = self.node(spec, scope, node_path, incoming.get(node_id, []), produced, (*key, position),
                                 depth, group)
            except ConfigError as exc:  # a size or a param that does not evaluate: the node it belongs to
                self.trace.said(exc, node_path)
                failed.add(node_id)
                continue
            produced.update({f"{node_id}.{port}": vid for port, vid in made.items()})
        if failed:
            raise _Said("", path)
        result = {}
        for port, source, _ in incoming.get("", []):
            if port in result:
                raise GraphError(f"{where}: two edges go to the output {port!r}; an output has one source", path,
                                 port)
            if source not in produced:
                raise GraphError(f"{where}: the output {port!r} comes from {source!r}, which that node does not "
                                 "have as an output", path, port, {"body": group, "from": source, "to": port})
            self.trace.bind(group, source, port, self.values[produced[source]])
            result[port] = produced[source]
        missing = [port for port in outputs if port not in result]
        if missing:
            raise GraphError(f"{where}: nothing is wired to the output {missing[0]!r} of {body_name}; add an edge "
                             f"to {missing[0]!r}", path, missing[0])
        return result

    def node(self, spec: dict, scope: dict, node_path: tuple, incoming: list, produced: dict, key: tuple,
             depth: int, group: str) -> dict[str, int]:
        """One node of a body expanded, its edges' values bound; returns its output ports' values."""
        node_id = node_path[-1]
        given: dict[str, list[int]] = {}
        for port, source, _ in incoming:
            if source not in produced:
                raise GraphError(f"{'/'.join(node_path)}.{port}: its edge comes from {source!r}, which that node "
                                 "does not have as an output", node_path, port,
                                 {"body": group, "from": source, "to": f"{node_id}.{port}"})
            self.trace.bind(group, source, f"{node_id}.{port}", self.values[produced[source]])
            given.setdefault(port, []).append(produced[source])
        if "op" in spec:
            return self.primitive(spec, scope, node_path, given, key)
        return self.instance(spec, scope, node_path, given, key, depth)

    def refuse_edge(self, edge: dict, nodes: dict, inputs: dict, outputs: dict, where: str, path: tuple,
                    body_name: str, group: str) -> None:
        """The GraphError of an edge whose end is neither a node's port nor one of the body's own ports."""
        at = {"body": group, "from": edge["from"], "to": edge["to"]}
        target_node, target_port = _end(edge["to"])
        if target_node is None:
            if target_port not in outputs:
                raise GraphError(f"{where}: an edge goes to {edge['to']!r}, which is neither a node's port nor one "
                                 f"of the outputs ({', '.join(outputs) or 'none'}) of {body_name}", path, edge=at)
        elif target_node not in nodes:
            raise GraphError(f"{where}: an edge goes to {edge['to']!r}, and there is no node {target_node!r}",
                             path, edge=at)
        source_node, source_port = _end(edge["from"])
        if source_node is None and source_port not in inputs:
            raise GraphError(f"{where}: an edge comes from {edge['from']!r}, which is neither a node's port nor "
                             f"one of the inputs ({', '.join(inputs) or 'none'}) of {body_name}", path, edge=at)
        raise GraphError(f"{where}: an edge comes from {edge['from']!r}, and there is no node {source_node!r}",
                         path, edge=at)

    def order(self, nodes: dict, incoming: dict, where: str, path: tuple) -> list[tuple[int, str]]:
        """(document position, id) of each node, sources first, else in document order; a cycle is refused."""
        ids = list(nodes)
        needs = {node_id: {source for _, _, source in incoming.get(node_id, [])} - {None} for node_id in nodes}
        readers: dict[str, list[int]] = {}
        waiting = {}  # node -> how many of the nodes it needs are not placed yet
        for i, node_id in enumerate(ids):
            waiting[node_id] = len(needs[node_id])
            for source in needs[node_id]:
                readers.setdefault(source, []).append(i)
        ready = [i for i, node_id in enumerate(ids) if not waiting[node_id]]  # a heap: the first in the document
        done: list[tuple[int, str]] = []
        while ready:
            i = heapq.heappop(ready)
            done.append((i, ids[i]))
            for reader in readers.get(ids[i], []):
                waiting[ids[reader]] -= 1
                if not waiting[ids[reader]]:
                    heapq.heappush(ready, reader)
        if len(done) < len(ids):
            placed = {node_id for _, node_id in done}
            loop = _cycle(needs, placed, next(n for n in ids if n not in placed))
            raise GraphError(f"{where}: the nodes {' -> '.join(loop)} form a cycle (each waits for the output "
                             "of the one before it); a graph runs forward, so break the loop", (*path, loop[0]))
        return done

    def primitive(self, spec: dict, scope: dict, path: tuple, given: dict[str, list[int]], key: tuple) -> dict[str, int]:
        where = "/".join(path)
        op = OPS.get(spec["op"])
        if op is None:
            close = difflib.get_close_matches(str(spec["op"]), OPS, n=1)
            hint = (" (the compiler makes it itself)" if spec["op"] in ALL
                    else f" (did you mean {close[0]!r}?)" if close else "")
            raise ConfigError(f"{where}: unknown op {spec['op']!r}{hint}; the ops are: {', '.join(sorted(OPS))}")
        params = {}
        for name, value in spec.get("params", {}).items():
            if name not in op.params:
                known = ", ".join(op.params) or "none"
                raise ConfigError(f"{where}: op {op.name} has no param {name!r} (its params: {known})")
            params[name] = word(value, scope) if name in op.words else evaluate(value, scope, f"{where}.{name}")
        for name, default in op.params.items():
            if name not in params:
                if default is REQUIRED:
                    raise ConfigError(f"{where}: op {op.name} needs the param {name!r}")
                if name in op.words:
                    params[name] = word(default, scope)
                elif isinstance(default, str):  # a size in the scope ("vocab", "d")
                    params[name] = evaluate(default, scope, f"{where}.{name} (its default {default!r})")
                else:  # a number or a switch, as given: evaluate's own value, the same in every scope
                    params[name] = evaluate(default, {}, "")
        node = Node(path, op, params, dims=self.run_dims)
        for port in given:
            if port not in op.inputs:
                raise GraphError(f"{where}: op {op.name} has no input {port!r} (its inputs: {', '.join(op.inputs)})",
                                 path, port)
        for port, declared in op.inputs.items():
            vids = given.get(port, [])
            if not vids:
                raise GraphError(f"{where}.{port}: nothing is wired to this input; add an edge to {where}.{port}",
                                 path, port)
            if len(vids) > 1 and not declared.many:
                raise GraphError(f"{where}.{port}: {len(vids)} edges go to this input, which takes one; sum them "
                                 "with an add node first", path, port)
            node.inputs[port] = vids
            node.in_types[port] = [self.values[v] for v in vids]
        try:
            node.types = op.infer(node)
        except ShapeError as exc:
            raise GraphError(f"{where}.{exc.port}: {exc}", path, exc.port) from None
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        node.outputs = {port: self.new_value(node.types[port]) for port in op.output_ports(node)}
        self.nodes.append(node)
        self.order_keys.append(key)
        if len(self.nodes) > MAX_NODES:
            raise ConfigError(f"the graph flattens to more than {MAX_NODES:,} primitives; make it smaller")
        return node.outputs

    def instance(self, spec: dict, scope: dict, path: tuple, given: dict[str, list[int]], key: tuple,
                 depth: int) -> dict[str, int]:
        where = "/".join(path)
        name = spec["group"]
        group = self.groups.get(name)
        if group is None:
            raise ConfigError(f"{where}: unknown group {name!r}; the groups are: {', '.join(self.groups) or 'none'}")
        if self.defining is not None and list(self.groups).index(name) >= list(self.groups).index(self.defining[-1]):
            raise ConfigError(f"{where}: group {self.defining[-1]!r} uses group {name!r}, which is not defined before "
                              "it; list a group after the groups it uses (a group cannot contain itself)")
        inner = self.group_scope(group, name, spec.get("params", {}), scope, where)
        inputs, outputs = group.get("inputs", {}), group.get("outputs", {})
        for port in given:
            if port not in inputs:
                raise GraphError(f"{where}: group {name} has no input {port!r} (its inputs: "
                                 f"{', '.join(inputs) or 'none'})", path, port)
        repeat = evaluate(spec.get("repeat", 1), scope, f"{where}.repeat")
        if isinstance(repeat, bool) or not isinstance(repeat, int) or not 0 <= repeat <= MAX_REPEAT:
            raise ConfigError(f"{where}: repeat must be a whole number from 0 to {MAX_REPEAT}, got {repeat!r}")
        if repeat != 1 and set(inputs) != set(outputs):
            raise ConfigError(f"{where}: repeat {repeat} chains each copy's outputs into the next one's inputs, so "
                              f"group {name}'s outputs ({', '.join(outputs)}) must be its inputs ({', '.join(inputs)})")
        values = {}
        for port in inputs:
            vids = given.get(port, [])
            if len(vids) != 1:
                raise GraphError(f"{where}.{port}: {'nothing is' if not vids else f'{len(vids)} edges are'} wired to "
                                 "this input of the group, which takes one edge", path, port)
            values[port] = vids[0]
        self.defining = (*(self.defining or ()), name)
        try:
            for copy in range(repeat):
                copy_path = (*path, str(copy)) if "repeat" in spec else path
                self.check_ports(inputs, values, inner, copy_path)
                self.instances.append(Instance(copy_path, name, {p: str(self.values[v]) for p, v in values.items()},
                                               depth))
                values = self.expand(group, inner, copy_path, values, outputs, (*key, copy), depth + 1,
                                     f"group {name}", name)
                self.check_ports(outputs, values, inner, copy_path)
        finally:
            self.defining = self.defining[:-1] or None
        return values

    defining: tuple | None = None  # the groups being expanded, innermost last

    def size(self, name: str, scope: dict, depth: int) -> tuple[int, int]:
        """(primitives, group copies) one instance of group `name` flattens to in `scope` (body_size's), kept by
        group and scope; a GraphError where the groups inside it nest deeper than MAX_NESTING."""
        if depth > MAX_NESTING:
            raise GraphError(f"group {name}: groups nest deeper than {MAX_NESTING}; flatten some of them")
        key = (name, repr(sorted(scope.items())))
        if key not in self.sizes:
            self.sizes[key] = self.body_size(self.groups[name], scope, list(self.groups).index(name), depth)
        return self.sizes[key]

    def body_size(self, body: dict, scope: dict, before: int, depth: int = 0) -> tuple[int, int]:
        """(primitives, group copies) a body flattens to in `scope`, counted without expanding it (each group a
        product of its repeat; only the groups listed before position `before`, as the expansion allows), capped
        past MAX_NODES, so that a document that multiplies to billions is refused at once. A node that does not
        evaluate counts as nothing here: the expansion says what is wrong with it."""
        order = list(self.groups)
        primitives = copies = 0
        for spec in body.get("nodes", []):
            if primitives > MAX_NODES or copies > MAX_NODES:
                break
            if "op" in spec:
                primitives += 1
                continue
            inner_name = spec.get("group")
            if inner_name not in self.groups or order.index(inner_name) >= before:
                continue  # unknown, or not defined before (the expansion refuses both)
            try:
                inner = self.group_scope(self.groups[inner_name], inner_name, spec.get("params", {}), scope, "")
                repeat = evaluate(spec.get("repeat", 1), scope, "")
            except ConfigError:
                continue
            if isinstance(repeat, bool) or not isinstance(repeat, int) or not 0 < repeat <= MAX_REPEAT:
                continue
            inner_primitives, inner_copies = self.size(inner_name, inner, depth + 1)
            primitives += repeat * inner_primitives
            copies += repeat * (1 + inner_copies)
        return min(primitives, MAX_NODES + 1), min(copies, MAX_NODES + 1)

    def group_scope(self, group: dict, name: str, given: dict, scope: dict, where: str) -> dict:
        """The scope inside a group instance: the enclosing one, then the group's params, each the instance's
        value (evaluated outside) or its default (evaluated inside, so it can read the params before it)."""
        declared = group.get("params", {})
        for key in given:
            if key not in declared:
                raise ConfigError(f"{where}: group {name} has no param {key!r} (its params: "
                                  f"{', '.join(declared) or 'none'})")
        inner = dict(scope)
        for key, default in declared.items():
            if key in given:
                inner[key] = group_value(given[key], scope, f"{where}.{key}")
            elif default is not None:
                inner[key] = group_value(default, inner, f"{where}.{key} (group {name}'s default)")
            elif key not in scope:
                raise ConfigError(f"{where}: group {name} reads the param {key!r} from where it is used, and it is "
                                  f"not bound there; give {key!r} in this node's params or the document's dims")
        return inner

    def check_ports(self, declared: dict[str, str], values: dict[str, int], scope: dict, path: tuple) -> None:
        """ShapeError-worded GraphError where a group port's declared type disagrees with its value."""
        where = "/".join(path)
        for port, text in declared.items():
            kind, named = _port_type(text, f"{where}.{port}")
            width = None if named is None else evaluate(named, scope, f"{where}.{port}")
            got = self.values[values[port]]
            if got.kind != kind or (width is not None and got.width != width):
                wanted = kind if width is None else (
                    f"[T, {named}]=[T, {width}]" if named != str(width) else f"[T, {width}]")
                shown = got.kind if width is None or got.kind != kind else f"[T, {got.width}]"
                raise GraphError(f"{where}.{port}: expects {wanted}, got {shown if got.kind == kind else got}", path,
                                 port)

    # ---- the rest -----------------------------------------------------------------------------

    def specs(self) -> list[ParamSpec]:
        ordered = sorted(range(len(self.nodes)), key=lambda i: self.order_keys[i])
        specs, names = [], set()
        for i in ordered:
            for spec in self.nodes[i].op.param_specs(self.nodes[i]):
                if spec.name in names:
                    raise GraphError(f"{self.nodes[i].where}: its parameter {spec.name!r} has the name of another "
                                     "node's; rename one of them", self.nodes[i].path)
                names.add(spec.name)
                specs.append(spec)
        return specs


def _cycle(needs: dict[str, set[str]], placed: set[str], start: str) -> list[str]:
    """The nodes of one cycle among those not placed, each feeding the next, the first again at the end."""
    trail = [start]
    while True:
        source = min(needs[trail[-1]] - placed)  # every node not placed waits for another not placed
        if source in trail:
            loop = trail[trail.index(source):]  # each waits for the next; the last for the first
            return [loop[0], *reversed(loop[1:]), loop[0]]
        trail.append(source)


def _end(text: str) -> tuple[str | None, str]:
    """(node id, port) of an edge end "node.port"; (None, port) for a body's own port."""
    node, dot, port = text.partition(".")
    return (node, port) if dot else (None, node)


def _port_type(text, where: str) -> tuple[str, str | None]:
    """(kind, width expression or None) of a declared port type: "stream[d]", "logits", "token_ids"."""
    if not isinstance(text, str):
        raise ConfigError(f"{where}: a port type is a string such as stream[d], logits or token_ids, got {text!r}")
    if text in ("token_ids", "logits"):
        return text, None if text == "token_ids" else "vocab"
    kind, bracket, rest = text.partition("[")
    if kind in ("stream", "weights") and bracket and rest.endswith("]"):
        return kind, rest[:-1].strip()
    raise ConfigError(f"{where}: {text!r} is not a port type; write stream[WIDTH], weights[N], logits or token_ids")


def compile_graph(document: dict, vocab: int, seq_len: int, trace: Trace | None = None) -> Program:
    """The program of a document for a run's vocabulary and context length; a GraphError naming the first
    problem (its node path and port, where it has one). `trace` keeps what was bound, and with keep_going every
    problem (see Trace)."""
    check_document(document)
    compiler = _Compiler(document, vocab, seq_len, trace)
    scope = compiler.dims()
    # counted before anything is expanded (a size each; an op is one primitive)
    parts = {node["id"]: (1, 0) if "op" in node else compiler.body_size({"nodes": [node]}, scope, len(compiler.groups))
             for node in document.get("nodes", [])}
    if sum(p for p, _ in parts.values()) > MAX_NODES or sum(c for _, c in parts.values()) > MAX_NODES:
        biggest = max(parts, key=lambda node_id: sum(parts[node_id]))
        raise GraphError(f"{biggest}: the graph flattens to more than {MAX_NODES:,} primitives or group copies, the "
                         f"most of them in {biggest}; make it smaller", (biggest,))
    tokens = compiler.new_value(ValueType("token_ids"))
    try:
        outputs = compiler.expand(document, scope, (), {"tokens": tokens}, GRAPH_OUTPUTS, (), 0, "the graph")
    except _Said:
        raise compiler.trace.problems[0] from None
    logits = outputs["logits"]
    if compiler.values[logits].kind != "logits":
        raise GraphError(f"the graph's output logits must come from a logits node, got {compiler.values[logits]}")
    specs = compiler.specs()
    nodes = fuse(compiler.nodes)
    mains = [i for i, n in enumerate(nodes) if n.op.name == "cross_entropy" and n.inputs["logits"] == [logits]
             and n.params["offset"] == 1]
    if not mains:
        raise GraphError("the graph has no loss on its logits: add a cross_entropy node whose logits input is "
                          "what goes to the graph's logits output")
    if len(mains) > 1:
        raise GraphError(f"the graph has {len(mains)} next-token losses on its logits ("
                         f"{', '.join(nodes[i].where for i in mains)}); keep one", nodes[mains[1]].path)
    return Program(nodes, compiler.values, tokens, logits, mains[0], specs, scope, compiler.instances)

