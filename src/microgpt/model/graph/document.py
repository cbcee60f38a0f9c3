"""A graph document: reading it (JSON, or YAML), its limits, and the checks of its structure.

    {"microgpt_graph": 1,                       the format version (FORMAT_VERSION)
     "dims": {"d": 96, "d_ff": "4*d"},          sizes bound once, in order; vocab and T come from the run
     "groups": {"block": {"params": {"d": null, "heads": 4},       null: read from the enclosing scope
                          "inputs": {"x": "stream[d]"}, "outputs": {"y": "stream[d]"},
                          "nodes": [...], "edges": [...]}},
     "nodes": [{"id": "tok_emb", "op": "embedding"},
               {"id": "blocks", "group": "block", "repeat": 4, "params": {"heads": [32, 64]}}, ...],
     "edges": [{"from": "tokens", "to": "tok_emb.ids"}, {"from": "tok_emb.out", "to": "blocks.x"}, ...]}

A group may use only the groups listed before it (so none can contain itself). Inside a body, an edge end
without a dot is one of the body's own ports: the graph's are `tokens` (in) and `logits` (out). docs/graphs.md
is the full description; the document never holds layout (the editor keeps positions beside it).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import yaml

from microgpt.core.errors import ConfigError

FORMAT_VERSION = 1
VERSION_KEY = "microgpt_graph"
MAX_DOCUMENT_BYTES = 4 * 1024**2  # a graph of thousands of nodes is a few hundred KiB; past this it is not one
MAX_DEPTH = 64  # nested JSON containers; a graph's deepest is about 6
MAX_VALUES = MAX_DOCUMENT_BYTES // 2  # values once read: more than the text could hold comes of YAML aliases
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
TOP_KEYS = {VERSION_KEY, "description", "dims", "groups", "nodes", "edges"}
GROUP_KEYS = {"description", "params", "inputs", "outputs", "nodes", "edges"}
NODE_KEYS = {"id", "op", "group", "params", "repeat", "description"}
EDGE_KEYS = {"from", "to"}
GRAPH_INPUTS = {"tokens": "token_ids"}  # the top-level body's ports
GRAPH_OUTPUTS = {"logits": "logits"}
RUN_DIMS = ("vocab", "T")  # bound by the run: the tokenizer's vocabulary and --seq-len


def read_document(path: str | Path) -> dict:
    """The document in a .json, .yaml or .yml file, its structure checked; ConfigError for anything else."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise ConfigError(f"graph {path}: {exc.strerror or exc}; give the path of a graph document (.json or .yaml)")
    if not path.is_file():
        raise ConfigError(f"graph {path} is not a file; give the path of a graph document (.json or .yaml)")
    if size > MAX_DOCUMENT_BYTES:
        raise ConfigError(f"graph {path} is {size:,} bytes; a graph document is at most {MAX_DOCUMENT_BYTES:,}")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"graph {path} cannot be read as UTF-8 text ({exc}); give a JSON or YAML document") from None
    return parse_document(text, path.name)


class _KeyTwice(ConfigError):
    """A key given twice in one mapping; parse_document names the document."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a mapping that gives a key twice (as JSON reading here does)."""


def _unique_mapping(loader, node, deep=False):
    keys = [loader.construct_object(key, deep=deep) for key, _ in node.value]
    for key in keys:
        if keys.count(key) > 1:
            raise _KeyTwice(f"the key {key!r} appears twice in one mapping; give it once")
    return yaml.SafeLoader.construct_mapping(loader, node, deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def _unique_pairs(pairs):
    seen = {}
    for key, value in pairs:
        if key in seen:
            raise _KeyTwice(f"the key {key!r} appears twice in one object; give it once")
        seen[key] = value
    return seen


def parse_document(text: str, name: str = "graph") -> dict:
    """The document in `text` (JSON, or YAML where it is not JSON), its structure checked."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_DOCUMENT_BYTES:
        raise ConfigError(f"{name} is over {MAX_DOCUMENT_BYTES:,} bytes; a graph document is smaller")
    try:
        try:
            document = json.loads(text, object_pairs_hook=_unique_pairs)
        except json.JSONDecodeError as json_error:
            if text.lstrip().startswith(("{", "[")):
                raise ConfigError(f"{name} is not valid JSON: {json_error}") from None
            try:
                document = yaml.load(text, Loader=_UniqueKeyLoader)
            except yaml.YAMLError as exc:
                raise ConfigError(f"{name} is neither JSON nor YAML: {str(exc).splitlines()[0]}") from None
    except RecursionError:
        raise ConfigError(f"{name} nests deeper than {MAX_DEPTH} levels; a graph document is shallow") from None
    except _KeyTwice as exc:
        raise ConfigError(f"{name}: {exc}") from None
    except ConfigError:
        raise
    except ValueError:  # int() of more digits than Python converts, in JSON or YAML
        raise ConfigError(f"{name} holds a number of more than {sys.get_int_max_str_digits():,} digits; a graph's "
                          "sizes are small whole numbers") from None
    _check_size(document, name)
    check_document(document, name)
    return document


def check_read(document, name: str = "graph") -> dict:
    """A document already read from JSON (a request's body), held to parse_document's limits and checks: its
    size as JSON text, its depth and count of values, its structure; the same document, not a copy."""
    if len(json.dumps(document)) > MAX_DOCUMENT_BYTES:  # ASCII: a character a byte
        raise ConfigError(f"{name} is over {MAX_DOCUMENT_BYTES:,} bytes; a graph document is smaller")
    _check_size(document, name)
    check_document(document, name)
    return document


def _check_size(document, name: str) -> None:
    """ConfigError for a document nested deeper than MAX_DEPTH, or holding more than MAX_VALUES values (a YAML
    alias repeats what its anchor holds, so a few lines can stand for billions: a YAML bomb)."""
    stack, count = [(document, 0)], 0
    while stack:
        value, level = stack.pop()
        count += 1
        if level > MAX_DEPTH:
            raise ConfigError(f"{name} nests deeper than {MAX_DEPTH} levels; a graph document is shallow")
        if count > MAX_VALUES:
            raise ConfigError(f"{name} holds more than {MAX_VALUES:,} values once its YAML aliases (*name) are "
                              "expanded; a graph document is smaller (write it without aliases)")
        if isinstance(value, dict):
            stack.extend((v, level + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, level + 1) for v in value)


def check_document(document, name: str = "graph") -> None:
    """ConfigError for a document whose structure is wrong: the version, the keys, the nodes and edges."""
    if not isinstance(document, dict):
        raise ConfigError(f"{name} is not a graph document: it holds {type(document).__name__}, not an object with "
                          f"{VERSION_KEY!r}, 'nodes' and 'edges'")
    version = document.get(VERSION_KEY)
    if version is None:
        raise ConfigError(f"{name} has no {VERSION_KEY!r} key; a graph document starts with "
                          f'"{VERSION_KEY}": {FORMAT_VERSION}')
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ConfigError(f"{name}: {VERSION_KEY} must be a format version (a whole number), got {version!r}")
    if version > FORMAT_VERSION:
        raise ConfigError(f"{name} is graph format {version}, written by a newer microgpt; this one reads up to "
                          f"format {FORMAT_VERSION}; upgrade microgpt")
    _known_keys(document, TOP_KEYS, name)
    dims = document.get("dims", {})
    if not isinstance(dims, dict):
        raise ConfigError(f"{name}: dims must be an object of name: size")
    for key in dims:
        if key in RUN_DIMS:
            raise ConfigError(f"{name}: dims binds {key!r}, which the run binds (vocab: the tokenizer's, T: "
                              "--seq-len); drop it from dims")
        _identifier(key, f"{name}: dims")
    groups = document.get("groups", {})
    if not isinstance(groups, dict):
        raise ConfigError(f"{name}: groups must be an object of name: group")
    for group_name, group in groups.items():
        _identifier(group_name, f"{name}: groups")
        where = f"group {group_name}"
        if not isinstance(group, dict):
            raise ConfigError(f"{where} must be an object with inputs, outputs, nodes and edges")
        _known_keys(group, GROUP_KEYS, where)
        for key in ("params", "inputs", "outputs"):
            if not isinstance(group.get(key, {}), dict):
                raise ConfigError(f"{where}: {key} must be an object")
        for key in group.get("params", {}):
            _identifier(key, f"{where}: params")
            if key in RUN_DIMS:
                raise ConfigError(f"{where}: params binds {key!r}, which the run binds; drop it")
        for key in [*group.get("inputs", {}), *group.get("outputs", {})]:
            _identifier(key, f"{where}: ports")
        _check_body(group, where)
    _check_body(document, name)


def _known_keys(mapping: dict, allowed: set[str], where: str) -> None:
    unknown = sorted(set(mapping) - allowed)
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r}; the keys are {', '.join(sorted(allowed))}")


def _identifier(text, where: str) -> None:
    if not isinstance(text, str) or not IDENTIFIER.match(text):
        raise ConfigError(f"{where}: {text!r} is not a name; use letters, digits and _, starting with a letter")


def _check_body(body: dict, where: str) -> None:
    nodes, edges = body.get("nodes", []), body.get("edges", [])
    if not isinstance(nodes, list) or not isinstance(edges, list):
        raise ConfigError(f"{where}: nodes and edges must be lists")
    seen = set()
    for node in nodes:
        if not isinstance(node, dict) or "id" not in node:
            raise ConfigError(f"{where}: every node is an object with an id and an op or a group, got {node!r:.60}")
        if not (isinstance(node["id"], str) and IDENTIFIER.match(node["id"])):  # the message made for a bad one
            _identifier(node["id"], f"{where}: node id")
        if node["id"] in seen:
            raise ConfigError(f"{where}: two nodes are called {node['id']!r}; give each node its own id")
        seen.add(node["id"])
        if not node.keys() <= NODE_KEYS:
            _known_keys(node, NODE_KEYS, f"{where}/{node['id']}")
        if ("op" in node) == ("group" in node):
            raise ConfigError(f"{where}/{node['id']}: give either an op or a group")
        kind = "op" if "op" in node else "group"
        if not isinstance(node[kind], str):
            raise ConfigError(f"{where}/{node['id']}: {kind} must be a name, got {node[kind]!r:.60}")
        if not isinstance(node.get("params", {}), dict):
            raise ConfigError(f"{where}/{node['id']}: params must be an object")
        if "repeat" in node and "group" not in node:
            raise ConfigError(f"{where}/{node['id']}: repeat is for a group; an op is used once per node")
    for edge in edges:
        if (not isinstance(edge, dict) or edge.keys() != EDGE_KEYS
                or not isinstance(edge["from"], str) or not isinstance(edge["to"], str)):
            raise ConfigError(f"{where}: every edge is {{\"from\": \"node.port\", \"to\": \"node.port\"}}, got "
                              f"{edge!r:.60}")
