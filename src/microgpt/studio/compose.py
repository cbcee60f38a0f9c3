"""A canvas graph to a run's settings and back, checked by the library exactly as `microgpt train` checks them.

A graph (the page's JSON) is {"family", "nodes": [{"id", "kind", "values": {key: text or bool}}], "edges":
[{"from", "to"}], "extra": {key: value}}: one chain of the family's components (canvas.py). `check_graph`
walks it, reads each value with its setting's own check (the flag's), builds the TrainConfig and the
family's config through `Settings`, asks the family about its training settings, applies the unused-setting
rules and the memory cap, and returns every problem on the node it concerns, with the parameter count, the
memory estimate and the expected tokens/s. `graph_of_run` draws a named run of the YAML file as a graph.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from itertools import pairwise

from microgpt.backends import backend_class
from microgpt.core.checks import NumberOrOff, Switch, format_bytes, shown
from microgpt.core.errors import ConfigError, DataError
from microgpt.data.corpus import default_corpus, read_corpus
from microgpt.data.dataset import is_dataset, open_dataset
from microgpt.data.tokenizer import tokenizer_kind
from microgpt.model.family import family, n_params
from microgpt.model.memory import estimate_training_bytes
from microgpt.settings.known import known_settings
from microgpt.settings.named_runs import NamedRun
from microgpt.settings.sources import Settings
from microgpt.studio.canvas import FAMILY_CANVAS, Component, components_of, offered_families
from microgpt.studio.speed import expected_tokens_per_second
from microgpt.training.corpus import check_dataset_settings, with_held_out
from microgpt.training.data_parallel import micro_batch_size

ERROR_OF_GRAPH = None  # the node of a problem that concerns the whole graph


@dataclass
class Checked:
    """What the canvas shows after an edit."""

    errors: list[dict] = field(default_factory=list)  # {"node": id or None, "message"}
    settings: dict = field(default_factory=dict)  # the run's settings as YAML values (when the chain is whole)
    parameters: int | None = None
    memory_bytes: int | None = None
    tokens_per_second: float | None = None
    speed_basis: str | None = None  # what the tokens/s estimate rests on
    description: str | None = None

    def add(self, node, message: str) -> None:
        self.errors.append({"node": node, "message": message})

    def as_json(self) -> dict:
        return {"ok": not self.errors, "errors": self.errors, "settings": self.settings,
                "parameters": self.parameters, "memory_bytes": self.memory_bytes,
                "memory": None if self.memory_bytes is None else format_bytes(self.memory_bytes),
                "tokens_per_second": self.tokens_per_second, "speed_basis": self.speed_basis,
                "description": self.description}


def chain_of(graph: dict, checked: Checked) -> list[tuple[dict, Component]] | None:
    """The graph's nodes in chain order with their components, or None (with the problems added) when the graph
    is not one chain of its family's components from the data to the training."""
    name = graph.get("family")
    if name not in offered_families():
        checked.add(ERROR_OF_GRAPH, f"family {shown(name)} is not one of: {', '.join(offered_families())}")
        return None
    components = {c.kind: c for c in components_of(name)}
    nodes = {node.get("id"): node for node in graph.get("nodes", []) if isinstance(node, dict)}
    for node_id, node in nodes.items():
        if node.get("kind") not in components:
            checked.add(node_id, f"a {shown(node.get('kind'))} component is not part of the {name} family's model; remove it")
    outgoing: dict = {}
    incoming: dict = {}
    for edge in graph.get("edges", []):
        source, target = nodes.get(edge.get("from")), nodes.get(edge.get("to"))
        if source is None or target is None or source.get("kind") not in components or target.get("kind") not in components:
            checked.add(ERROR_OF_GRAPH, "a connection joins a component that is not on the canvas; remove it")
            continue
        gives, accepts = components[source["kind"]].gives, components[target["kind"]].accepts
        if gives is None or gives != accepts:
            checked.add(target["id"], f"the {target['kind']} takes {accepts or 'no input'}, but the {source['kind']} "
                        f"gives {gives or 'nothing'}; connect it to a component that gives {accepts}")
            continue
        if source["id"] in outgoing or target["id"] in incoming:
            checked.add(target["id"], "a model is one chain: each component has one input and one output; remove "
                        "the extra connection")
            continue
        outgoing[source["id"]], incoming[target["id"]] = target["id"], source["id"]
    if checked.errors:
        return None
    starts = [node_id for node_id, node in nodes.items() if node["kind"] == "data"]
    if len(starts) != 1:
        checked.add(ERROR_OF_GRAPH, "a model starts from one data component; keep exactly one")
        return None
    order, seen = [], set()
    node_id = starts[0]
    while node_id is not None and node_id not in seen:
        seen.add(node_id)
        order.append(nodes[node_id])
        node_id = outgoing.get(node_id)
    for node_id in nodes.keys() - seen:
        checked.add(node_id, "not connected to the model: connect it into the chain or remove it")
    expected = components_of(name)
    position = 0
    for component in expected:
        count = 0
        while position < len(order) and order[position]["kind"] == component.kind:
            count, position = count + 1, position + 1
        if count == 0 or (count > 1 and not component.repeated):
            where = order[position]["id"] if position < len(order) else order[-1]["id"]
            what = "missing here" if count == 0 else "here more than once"
            checked.add(where, f"the {component.title} is {what}: the {name} family's model is "
                        + " -> ".join(c.title + ("s" if c.repeated else "") for c in expected))
            return None
    if position < len(order):
        checked.add(order[position]["id"], "comes after the training: connect the chain so that it ends there")
        return None
    return None if checked.errors else [(node, components[node["kind"]]) for node in order]


def read_value(key: str, raw):
    """A canvas value read by its setting's check, as the flag's text is; None for one left empty."""
    check = known_settings()[key].check
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return None
    if isinstance(check, Switch):
        return check.from_yaml(raw)
    return check.from_text(str(raw).strip())


def settings_of(chain: list[tuple[dict, Component]], family_name: str, extra: dict, checked: Checked) -> dict:
    """The explicit settings the chain gives (clean values), each bad value added on its node."""
    values: dict = {"family": family_name}
    for key, value in (extra or {}).items():
        if key in known_settings() and value is None:
            values[key] = None
        elif key in known_settings():  # kept from the YAML file: read as the YAML loader reads it
            try:
                values[key] = known_settings()[key].check.from_yaml(value)
            except ValueError as exc:
                checked.add(ERROR_OF_GRAPH, f"{key} must be {exc}, not {shown(value)}")
    joined: dict[str, list[str]] = {}
    for node, component in chain:
        for key in component.keys:
            raw = (node.get("values") or {}).get(key)
            if component.repeated:
                if raw is None or not str(raw).strip():
                    checked.add(node["id"], f"the {component.title} needs a value for {key}")
                joined.setdefault(key, []).append(str(raw or "").strip())
                continue
            try:
                value = read_value(key, raw)
            except ValueError as exc:
                checked.add(node["id"], f"{known_settings()[key].flag} must be {exc}, not {shown(raw)}")
                continue
            if value is not None:
                values[key] = value
            else:
                values.pop(key, None)
    for key, parts in joined.items():
        try:
            values[key] = read_value(key, ",".join(parts))
        except ValueError as exc:
            checked.add(ERROR_OF_GRAPH, f"{known_settings()[key].flag} must be {exc}")
    return values


def node_of(message: str, chain: list[tuple[dict, Component]]):
    """The node a library message concerns: the one owning the setting it names first (by flag, or by YAML
    key), and of several copies of a repeated component, the one whose value the message quotes."""
    best, first = None, len(message) + 1
    for node, component in chain:
        value = str((node.get("values") or {}).get(component.keys[0]) or "") if component.keys else ""
        if component.repeated and value and repr(value) in message:
            return node["id"]
        for key in component.keys:
            flag = known_settings()[key].flag
            found = re.search(rf"(?<![\w-])({re.escape(flag)}|{re.escape(key)})(?![\w-])", message)
            if found and found.start() < first:
                best, first = node["id"], found.start()
    return best


def shape_problem(graph) -> str | None:
    """What makes `graph` not a graph the canvas sends (before any of its values is read), or None."""
    if not isinstance(graph, dict):
        return f"the graph must be an object with family, nodes and edges, not {shown(graph)}"
    for key, kind in (("nodes", list), ("edges", list), ("extra", dict)):
        if key in graph and not isinstance(graph[key], kind):
            return f"the graph's {key} must be a {'list' if kind is list else 'mapping'}, not {shown(graph[key])}"
    for node in graph.get("nodes", []):
        if not isinstance(node, dict) or not isinstance(node.get("id"), str) or not isinstance(node.get("kind"), str):
            return f"each node must be an object with a text id and kind, not {shown(node)}"
        if not isinstance(node.get("values", {}), dict):
            return f"node {node['id']}'s values must be a mapping, not {shown(node['values'])}"
    for edge in graph.get("edges", []):
        if not isinstance(edge, dict) or not all(isinstance(edge.get(end), str) for end in ("from", "to")):
            return f"each edge must be an object with a text from and to, not {shown(edge)}"
    return None


def check_graph(graph: dict, workspace) -> Checked:
    """Every problem of a graph, each on its node, and what the model it draws costs (see the module doc)."""
    checked = Checked()
    problem = shape_problem(graph)
    if problem is not None:
        checked.add(ERROR_OF_GRAPH, problem)
        return checked
    chain = chain_of(graph, checked)
    if chain is None:
        return checked
    name = graph["family"]
    values = settings_of(chain, name, graph.get("extra") or {}, checked)
    if checked.errors:
        return checked
    try:
        workspace.check_run_paths(values)
    except ConfigError as exc:
        checked.add(node_of(str(exc), chain), str(exc))
        return checked
    data_node = chain[0][0]["id"]
    try:
        text, dataset = corpus_of(values.get("file"), workspace, values.get("max_corpus"))
    except (ConfigError, DataError) as exc:
        checked.add(data_node, str(exc))
        return checked
    try:
        settings = Settings(values)
        train_config = settings.train_config()
        tokenizer_name = settings.value("tokenizer")
        if dataset is not None:
            check_dataset_settings(settings, dataset.path)
            vocab = dataset.tokenizer.size
        else:
            vocab = (len(set(text)) if tokenizer_kind(tokenizer_name).default_vocab_size is None
                     else settings.value("vocab_size") or tokenizer_kind(tokenizer_name).default_vocab_size)
        kind = family(name)
        config = settings.model_config(vocab)
        if hasattr(kind, "check_training"):
            kind.check_training(config, train_config)
        resolved = (train_config if dataset is not None
                    else with_held_out(train_config, len(text), config.seq_len))
        settings.check_all_used(resolved)
        micro = micro_batch_size(train_config.batch_size, train_config.grad_accum, 1)
    except ConfigError as exc:
        checked.add(node_of(str(exc), chain), str(exc))
        return checked
    checked.parameters = n_params(kind, config)
    checked.memory_bytes = estimate_training_bytes(kind, config, micro, backend_class("numpy")())
    cap = settings.value("max_memory")
    if checked.memory_bytes > cap:
        checked.add(node_of("--batch-size", chain), f"a training step needs about {format_bytes(checked.memory_bytes)}"
                    f" but --max-memory is {format_bytes(cap)}; use a smaller --batch-size, --seq-len or model")
    checked.tokens_per_second, checked.speed_basis = expected_tokens_per_second(checked.parameters, workspace)
    checked.description = kind.describe(config)
    checked.settings = {key: yaml_value(value) for key, value in values.items()}
    return checked


def corpus_of(file: str | None, workspace, max_corpus: int | None):
    """(text, None) for a text a run would train on, or ("", the dataset) for a prepared dataset in the
    workspace (its manifest and shard sizes read, the checksums left to the run)."""
    if file is not None and is_dataset(workspace.inside(file, what="the data file")):
        return "", open_dataset(workspace.inside(file, what="the data file"), verify=False)
    return corpus_text(file, workspace, max_corpus), None


def corpus_text(file: str | None, workspace, max_corpus: int | None) -> str:
    """The text a run would train on: a file inside the workspace (read as train reads it), or the bundled docs.
    The last file's text is kept by its path, modification time, size and limit (graph checks run on worker
    threads, two at a time: the key and its text are stored and read as one item)."""
    if file is None:
        return default_corpus()[0]
    path = workspace.inside(file, what="the data file")
    limit = max_corpus or known_settings()["max_corpus"].default
    try:
        stat = path.stat()
    except OSError:
        return read_corpus(path, limit)  # its one line: no such file, a name too long, unreadable
    key = (str(path), stat.st_mtime_ns, stat.st_size, limit)
    kept_key, kept_text = workspace.corpus_cache.get("last", (None, None))
    if kept_key == key:
        return kept_text
    text = read_corpus(path, limit)
    workspace.corpus_cache["last"] = (key, text)  # one item: a check of another file on another thread never mixes
    return text


def yaml_value(value):
    """A clean setting value as YAML writes it (tuples as lists)."""
    return list(value) if isinstance(value, tuple) else value


def shown_value(key: str, value) -> str | bool:
    """A setting's value as the canvas's input shows it (the flag's text)."""
    check = known_settings()[key].check
    if isinstance(check, Switch):
        return bool(value)
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    if value is None:
        return "off" if isinstance(check, NumberOrOff) else ""
    return check.show(value) if isinstance(value, float) else str(value)


def graph_of_run(named: NamedRun, workspace) -> dict:
    """A named run drawn as a chain of its family's components, left to right; the settings no component owns
    are kept in `extra`, so that saving the graph again keeps them."""
    values = dict(named.values)
    if "file" in values:
        values["file"] = workspace.relative(values["file"])
    settings = Settings({}, named)
    name = settings.value("family")
    if name not in FAMILY_CANVAS or name not in offered_families():
        raise ConfigError(f"{named.origin} is a {name} model, which the studio cannot draw yet")
    nodes, owned = [], {"family"}
    for component in components_of(name):
        owned.update(component.keys)
        if component.repeated:
            key = component.keys[0]
            copies = [{key: part} for part in str(values.get(key, "")).split(",") if part]
        else:
            copies = [{key: shown_value(key, values[key]) for key in component.keys if key in values}]
        for copy in copies:
            nodes.append({"id": f"n{len(nodes) + 1}", "kind": component.kind, "values": copy})
    edges = [{"from": a["id"], "to": b["id"]} for a, b in pairwise(nodes)]
    extra = {key: yaml_value(value) for key, value in values.items() if key not in owned}
    return {"family": name, "name": named.id, "nodes": nodes, "edges": edges, "extra": extra}

