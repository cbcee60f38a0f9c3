"""Saving and loading the node editor's runs: a graph run's document in `graphs/NAME.json`, any run's layout in
`studio/layout/NAME.json`, and the named run in studio.yaml, so that `microgpt train --config studio.yaml --run
NAME` trains exactly what the editor drew (a named run's `graph`, like its `file`, is relative to the YAML
file, settings/named_runs.py).

- `save_run` (POST /api/save): a draft the page says is a family's (`family` and its settings beside the
  document) is checked as /api/graph/check checks that family, and where the document is still exactly the
  graph `graph from-family` writes for them (regenerated here: the page's word is not taken for it), the named
  run is the family's settings, so that its YAML and command stay short; any other document is a graph run;
- `save_graph_run`: the document and its run settings checked as /api/graph/check checks them (waiting for
  the causality verdict), the name guarded by names.guard_name (409 where a run or checkpoint has it), then
  the document, the layout and the named run `{family: graph, graph: graphs/NAME.json, <settings>}` written,
  each beside its place first and renamed into it, each inside the workspace and never through a symlink;
- `layout_target` and `save_layout`: a run's layout checked (and where it goes), then written; a family run
  saves its layout so beside its run;
- `write_named_run`: a run into studio.yaml, the file checked as the CLI reads it before it replaces the old;
- `run_for_editor` (GET /api/config): a graph run as its document, layout and settings; a family run as its
  family and settings (each as its field shows it), with its layout where one was saved.

A layout is checked before it is written (`check_layout`): known keys, "BODY/NODE" keys, finite numbers.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import yaml

from microgpt.core.checks import NumberOrOff, Switch
from microgpt.core.errors import ConfigError
from microgpt.core.user_files import read_json
from microgpt.model.checkpoint import is_checkpoint
from microgpt.model.family import family
from microgpt.model.graph.compile import MAX_NODES
from microgpt.model.graph.document import check_read, read_document
from microgpt.settings.known import family_keys, known_settings
from microgpt.settings.named_runs import NamedRun, load_all_runs
from microgpt.settings.sources import Settings, check_named_runs
from microgpt.studio.graph_api import GraphCheck, check_request
from microgpt.studio.graph_layout import VERSION, layout_of
from microgpt.studio.graph_run import offered_families, yaml_value
from microgpt.studio.names import NameTaken, guard_name, raw_entry, suggest, what_is_there, yaml_runs
from microgpt.studio.workspace import CONFIG_FILE, WorkspaceError
from microgpt.training.run_files import open_own

GRAPHS_DIR = "graphs"  # the documents of graph runs, in the workspace
LAYOUT_DIR = "studio/layout"  # every run's layout, in the workspace (never in the document)
YAML_HEADER = ("# Named runs saved by microgpt studio; train one with `microgpt train --config studio.yaml --run "
               "NAME`.\n")
LAYOUT_KEY = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)?/[A-Za-z_][A-Za-z0-9_]*")  # "BODY/NODE", BODY "" at the top
# positions or collapsed groups: each names a node, which flattens to a primitive at least, so a graph the
# compiler takes (at most MAX_NODES primitives) has no more to place
MAX_LAYOUT_ENTRIES = MAX_NODES
MAX_LAYOUT_BYTES = 64 * MAX_LAYOUT_ENTRIES  # a layout file: 64 bytes an entry is plenty
MAX_COORDINATE = 1e9  # px: far past any canvas, and below where a float loses whole pixels
MAX_VIEWPORT_KEYS = 8  # the view's offset and zoom


def check_layout(layout) -> dict:
    """A clean copy of a layout the page sent, or a ConfigError saying what is wrong with it."""
    if not isinstance(layout, dict):
        raise ConfigError(f"the layout must be an object {{version, positions, collapsed, viewport}}, not "
                          f"{type(layout).__name__}")
    unknown = sorted(set(layout) - {"version", "positions", "collapsed", "viewport"})
    if unknown:
        raise ConfigError(f"the layout has an unknown key {unknown[0][:40]!r}; its keys are version, positions, "
                          "collapsed and viewport")
    if layout.get("version", VERSION) != VERSION:
        raise ConfigError(f"the layout is version {layout['version']!r}; this studio reads version {VERSION}")
    positions, collapsed = layout.get("positions", {}), layout.get("collapsed", [])
    viewport = layout.get("viewport") or {}
    if not isinstance(positions, dict) or not isinstance(collapsed, list) or not isinstance(viewport, dict):
        raise ConfigError("the layout's positions must be an object, collapsed a list and viewport an object")
    if len(positions) > MAX_LAYOUT_ENTRIES or len(collapsed) > MAX_LAYOUT_ENTRIES:
        raise ConfigError(f"the layout has more than {MAX_LAYOUT_ENTRIES:,} entries; a graph has at most "
                          f"{MAX_NODES:,} primitives, so fewer nodes to place")
    for key in [*positions, *collapsed]:
        if not isinstance(key, str) or not LAYOUT_KEY.fullmatch(key):
            raise ConfigError(f"the layout names {str(key)[:60]!r}, which is not BODY/NODE (BODY empty for the "
                              "top level, else a group's name)")
    for key, place in positions.items():
        if not (isinstance(place, list) and len(place) == 2 and all(_coordinate(v) for v in place)):
            raise ConfigError(f"the layout's position of {key} must be [x, y] in px, not {str(place)[:60]}")
    if len(viewport) > MAX_VIEWPORT_KEYS or not all(isinstance(k, str) and len(k) <= 20 and _coordinate(v)
                                                    for k, v in viewport.items()):
        raise ConfigError("the layout's viewport must be a few numbers (its offset and zoom)")
    clean = {"version": VERSION, "positions": positions, "collapsed": collapsed}
    return {**clean, "viewport": viewport} if viewport else clean


def _coordinate(value) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            and abs(value) <= MAX_COORDINATE)


def _own_file(workspace, relative: str) -> Path:
    """Where the studio writes one of its files: inside the workspace (its folders resolved through any link),
    not a symlink itself, not inside a checkpoint."""
    path = workspace.root / relative
    folder = workspace.inside(str(Path(relative).parent), what=f"the folder of {relative}")
    if path.is_symlink():
        raise WorkspaceError(f"{relative} is a symlink; the studio writes its own file there: remove the link")
    if path.is_dir():
        raise ConfigError(f"{relative} is a directory; the studio writes its own file there: move it, or save "
                          "under another name")
    for inner in [folder, *folder.parents]:
        if is_checkpoint(inner):
            raise WorkspaceError(f"{relative} would be inside the checkpoint {workspace.relative(inner)}; move it")
        if inner == workspace.root:
            break
    return folder / path.name


def write_atomically(path: Path, text: str) -> None:
    """`text` into `path`, written beside it first and renamed into place, so a reader never sees half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staged = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open_own(staged, "w") as out:
            out.write(text)
        os.replace(staged, path)
    finally:
        staged.unlink(missing_ok=True)


def write_named_run(workspace, name: str, settings: dict) -> dict:
    """Run `name` of studio.yaml set to `settings` (the other runs kept), the new file checked as the CLI reads
    it before it replaces the old; the answer /api/save gives."""
    path = workspace.config
    document = {"runs": {}}
    if path.exists():
        load_all_runs(path)  # a file the CLI cannot read is refused here rather than overwritten
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    document["runs"][name] = settings
    staged = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        staged.write_text(YAML_HEADER + yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
        check_named_runs(staged)
        os.replace(staged, path)
    finally:
        staged.unlink(missing_ok=True)
    return {"saved": name, "file": CONFIG_FILE, "yaml": yaml.safe_dump({"runs": {name: settings}}, sort_keys=False),
            "command": f"microgpt train --config {CONFIG_FILE} --run {name}"}


def layout_target(workspace, name: str, layout) -> tuple[Path, dict]:
    """(where run `name`'s layout goes, the layout checked), both refused before anything is written."""
    return _own_file(workspace, f"{LAYOUT_DIR}/{name}.json"), check_layout(layout)


def save_layout(workspace, target: tuple[Path, dict]) -> str:
    """The layout written where layout_target said; its path in the workspace."""
    path, layout = target
    write_atomically(path, json.dumps(layout) + "\n")
    return workspace.relative(path)


def save_run(workspace, name: str, body: dict) -> dict:
    """Save the editor's draft as run `name` (see the module doc); the check's answer (its errors) where the
    draft has problems, else what was written."""
    family_name = body.get("family")
    if family_name is None:
        return save_graph_run(workspace, name, body)
    settings = body.get("settings", {})
    checked = check_request({"family": family_name, "settings": settings}, workspace, budget_s=None)
    if checked.errors:
        return checked.as_json()
    if not is_family_document(body.get("document"), checked):
        shape = set(family_keys(family(family_name))) - set(family_keys(family("graph")))
        return save_graph_run(workspace, name, {**body, "settings": {key: value for key, value in settings.items()
                                                                     if key not in shape}})
    layout = None if body.get("layout") is None else layout_target(workspace, name, body["layout"])
    guard_name(workspace, name, checked.settings, body.get("overwrite") is True)
    saved = write_named_run(workspace, name, checked.settings)
    if layout is not None:
        saved["layout"] = save_layout(workspace, layout)
    return saved


def is_family_document(document, checked: GraphCheck) -> bool:
    """Whether `document` (the page's) is exactly the family's graph that `checked` regenerated from its
    settings; a document that does not read as one is not."""
    if not isinstance(document, dict):
        return False
    try:
        given = check_read(document, "the document")
    except ConfigError:
        return False
    return json.loads(json.dumps(given)) == json.loads(json.dumps(checked.document))


def save_graph_run(workspace, name: str, body: dict) -> dict | None:
    """Save a graph run (see the module doc); the check's answer (its errors) where the draft has problems,
    else None once everything is written."""
    checked = check_request({"document": body.get("document"), "settings": body.get("settings", {})}, workspace,
                            budget_s=None)
    if checked.errors:
        return checked.as_json()
    layout = layout_target(workspace, name, layout_of(checked.document) if body.get("layout") is None
                           else body["layout"])
    document_path = f"{GRAPHS_DIR}/{name}.json"
    settings = {"family": "graph", "graph": document_path,
                **{key: value for key, value in checked.settings.items() if key != "family"}}
    overwrite = body.get("overwrite") is True
    guard_name(workspace, name, settings, overwrite)
    target = _own_file(workspace, document_path)
    if target.exists() and not overwrite:
        if (raw_entry(workspace, name) or {}).get("graph") != document_path:
            suggested = suggest(workspace, name)
            raise NameTaken(f"{document_path} exists and is no run's document; replace it, or save as {suggested}",
                            suggested)
        if _saved_document(target) != checked.document:  # the run's settings alike, its graph not: a new run
            suggested = suggest(workspace, name)
            there = what_is_there(workspace, name, yaml_runs(workspace))
            raise NameTaken(f"run {name} exists ({there}) with another graph; replace it, or save as {suggested}",
                            suggested)
    write_atomically(target, json.dumps(checked.document, indent=1) + "\n")
    layout_path = save_layout(workspace, layout)
    return {**write_named_run(workspace, name, settings), "graph": document_path, "layout": layout_path}


def _saved_document(path: Path) -> dict | None:
    """The document a graph run saved, or None where it does not read as one."""
    try:
        return read_document(path)
    except ConfigError:
        return None


def _layout_file(workspace, name: str) -> dict | None:
    """The layout saved for run `name`, or None where there is none or it does not read as one."""
    path = workspace.root / LAYOUT_DIR / f"{name}.json"
    try:
        path = workspace.file_inside(path, what="the layout")
        return check_layout(read_json(path, MAX_LAYOUT_BYTES))
    except (OSError, ValueError, RecursionError):  # ConfigError, WorkspaceError and JSON's are ValueErrors
        return None


def shown_value(key: str, value) -> str | bool:
    """A setting's value as the inspector's field shows it (the flag's text; a switch's true or false)."""
    check = known_settings()[key].check
    if isinstance(check, Switch):
        return bool(value)
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    if value is None:
        return "off" if isinstance(check, NumberOrOff) else ""
    return check.show(value) if isinstance(value, float) else str(value)


def run_for_editor(named: NamedRun, workspace) -> dict:
    """A run of studio.yaml as the editor loads it (see the module doc)."""
    settings = Settings({}, named)
    name = settings.value("family")
    if name != "graph":
        if name not in offered_families():
            raise ConfigError(f"{named.origin} is a {name} model, which the studio cannot draw yet")
        values = {key: value for key, value in named.values.items() if key != "family"}
        for key in ("file", "model"):
            if key in values:
                values[key] = workspace.relative(values[key])
        drawn = {"family": name, "name": named.id, "settings": {key: shown_value(key, value)
                                                                for key, value in values.items()}}
        layout = _layout_file(workspace, named.id)
        return drawn if layout is None else {**drawn, "layout": layout}
    source = named.values.get("graph")
    if source is None:
        raise ConfigError(f"run {named.id} of {CONFIG_FILE} is a graph run without a graph; give it graph: PATH (a "
                          "graph document in the workspace), or save it again from the editor")
    if isinstance(source, dict):
        document = source
    else:
        document = read_document(workspace.inside(str(source), what=f"the graph of run {named.id}"))
    values = {key: yaml_value(value) for key, value in named.values.items() if key not in ("family", "graph")}
    for key in ("file", "model"):
        if key in values:
            values[key] = workspace.relative(values[key])
    return {"family": "graph", "name": named.id, "graph": workspace.relative(source) if isinstance(source, str)
            else None, "document": document, "layout": _layout_file(workspace, named.id) or layout_of(document),
            "settings": values}
