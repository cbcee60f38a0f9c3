"""The workspace's own library of blocks: a group of a graph document saved by name as `blocks/NAME.yaml`, from
where the node editor's palette ("My blocks") drops it into any graph, its definition (and the groups it uses)
carried into that document, which then holds what it trains.

- `save_block(workspace, body)` (POST /api/blocks): {"name", "group": the group's name in "document",
  "document", "overwrite"} -> {"saved": NAME, "file": "blocks/NAME.yaml"}. The group, renamed NAME, and the
  document's own groups it uses (in the document's order: each before those that use it) are written as a
  graph document with no nodes, as the graph library's files are, beside its place first and renamed into it,
  inside the workspace and never through a symlink. A file of that name holding another block is not replaced
  unless the request says "overwrite": true (names.NameTaken: 409 with a free name suggested).
- `blocks(workspace)` (GET /api/blocks): {"blocks": [{"name", "description", "groups": the block's groups,
  NAME last}], "damaged": [{"file", "error": one line}]}: each `blocks/*.yaml` read only as a regular file of at
  most MAX_BLOCK_BYTES, never through a symlink; a file that is no block (malformed, too large, a link, a
  name that is no group name, no group NAME in it) is listed as damaged with its reason, never read into a
  graph. A blocks folder that resolves outside the workspace is refused (403), as any path out is.

A block's name is a group's name (letters, digits and _, not first a digit), at most MAX_NAME characters, and
not a library group's, which every graph has already.
"""

from __future__ import annotations

import os

import yaml

from microgpt.core.errors import ConfigError
from microgpt.core.user_files import read_regular
from microgpt.model.graph.document import FORMAT_VERSION, IDENTIFIER, VERSION_KEY, check_read, parse_document
from microgpt.model.graph.library import library_groups
from microgpt.studio.graph_save import _own_file, write_atomically
from microgpt.studio.names import MAX_NAME, NameTaken
from microgpt.studio.workspace import WorkspaceError

BLOCKS_DIR = "blocks"
SUFFIX = ".yaml"
MAX_BLOCK_BYTES = 1024**2  # a block file: a group of hundreds of nodes is tens of KiB
MAX_BLOCKS = 500  # files of blocks/ read for one listing; past that they are named as not read
HEADER = "# A block of microgpt studio's library: drop it into a graph from the palette's My blocks.\n"


def check_block_name(name) -> str:
    """A block's name (see the module doc), or a ConfigError saying what a name must be."""
    if not isinstance(name, str) or not IDENTIFIER.match(name) or len(name) > MAX_NAME:
        raise ConfigError(f"block name {str(name)[:80]!r} must be 1-{MAX_NAME} letters, digits or _, not first a "
                          "digit (it names a group and its file blocks/NAME.yaml)")
    if name in library_groups():
        raise ConfigError(f"{name} is a library group's name, which every graph has already; give the block "
                          "another name")
    return name


def used_groups(groups: dict, name: str) -> list[str]:
    """The groups of `groups` that group `name` uses, itself and through those it uses, in `groups`' order
    (each before those that use it), `name` last."""
    needed: set[str] = set()

    def visit(group: str) -> None:
        if group in needed or group not in groups:
            return
        needed.add(group)
        for node in groups[group].get("nodes", []):
            if "group" in node:
                visit(node["group"])

    visit(name)
    return [group for group in groups if group in needed and group != name] + [name]


def block_of(document: dict, group: str, name: str) -> dict:
    """The block file's document: group `group` of `document` as `name`, after the document's groups it uses."""
    groups = document.get("groups", {})
    if group not in groups:
        where = "a library group, which every graph has already" if group in library_groups() else "not in it"
        raise ConfigError(f"group {str(group)[:80]!r} is {where}; save a group of this document (edit a library "
                          "group inside it first to make it the document's own)")
    ordered = used_groups(groups, group)
    if name != group and name in ordered:
        raise ConfigError(f"the block uses a group named {name} already; give the block another name")
    block = {VERSION_KEY: FORMAT_VERSION, "groups": {(name if key == group else key): groups[key] for key in ordered}}
    return check_read(block, f"block {name}")


def as_text(block: dict) -> str:
    return HEADER + yaml.safe_dump(block, sort_keys=False, default_flow_style=None, width=100)


def suggest(workspace, name: str) -> str:
    """The first of NAME_2, NAME_3, ... that no file of the library has."""
    for n in range(2, MAX_BLOCKS + 3):
        candidate = f"{name[: MAX_NAME - len(str(n)) - 1]}_{n}"
        if not (workspace.root / BLOCKS_DIR / f"{candidate}{SUFFIX}").exists():
            return candidate
    raise ConfigError(f"the library has no free name like {name}; give the block another name")


def save_block(workspace, body: dict) -> dict:
    """The body's group saved as block NAME (see the module doc)."""
    name = check_block_name(body.get("name"))
    document = check_read(body.get("document"), "the document")
    block = block_of(document, body.get("group"), name)
    text = as_text(block)
    if len(text.encode("utf-8")) > MAX_BLOCK_BYTES:
        raise ConfigError(f"block {name} is over {MAX_BLOCK_BYTES:,} bytes as YAML; a block is smaller: save a "
                          "part of it")
    target = _own_file(workspace, f"{BLOCKS_DIR}/{name}{SUFFIX}")
    if (target.exists() or target.is_symlink()) and body.get("overwrite") is not True:
        try:
            same = read_block(target, name)["groups"] == block["groups"]
        except (ConfigError, OSError, ValueError, RecursionError):
            same = False
        if not same:
            suggested = suggest(workspace, name)
            raise NameTaken(f"block {name} exists in {BLOCKS_DIR}/ with another definition; replace it, or save "
                            f"as {suggested}", suggested)
    write_atomically(target, text)
    return {"saved": name, "file": workspace.relative(target)}


def read_block(path, name: str) -> dict:
    """{"name", "description", "groups"} of the block file `path` (see the module doc); ConfigError, OSError or
    ValueError where it is none."""
    if path.is_symlink():
        raise WorkspaceError(f"{BLOCKS_DIR}/{path.name} is a symlink; the library holds its own files: put the file "
                             "there in place of the link")
    if not IDENTIFIER.match(name) or len(name) > MAX_NAME:
        raise ConfigError(f"{name!r} is no block name (1-{MAX_NAME} letters, digits or _, not first a digit); "
                          "rename the file")
    text = read_regular(path, MAX_BLOCK_BYTES).decode("utf-8")
    document = parse_document(text, f"{BLOCKS_DIR}/{path.name}")
    groups = document.get("groups", {})
    if name not in groups:
        raise ConfigError(f"{BLOCKS_DIR}/{path.name} has no group {name}; a block file holds the group of its "
                          "name (after the groups it uses)")
    return {"name": name, "description": groups[name].get("description", ""),
            "groups": {key: groups[key] for key in used_groups(groups, name)}}


def damage(exc: Exception) -> str:
    """Why a file of the library is no block, in one line."""
    if isinstance(exc, UnicodeDecodeError):
        return "it is not UTF-8 text; a block file is YAML"
    if isinstance(exc, OSError):
        return (f"{exc.strerror or exc}; a block file is a regular file of at most {MAX_BLOCK_BYTES:,} bytes, "
                "as the studio writes it")
    return str(exc)


def blocks(workspace) -> dict:
    """Every block of the library, and the files of it that are none (see the module doc)."""
    found: dict = {"blocks": [], "damaged": []}
    place = workspace.root / BLOCKS_DIR
    if not place.exists() and not place.is_symlink():
        return found
    folder = workspace.inside(BLOCKS_DIR, what="the blocks folder")
    if not folder.is_dir():
        raise ConfigError(f"{BLOCKS_DIR} is not a folder; the studio keeps its library of blocks there: move it")
    files = sorted(entry.name for entry in os.scandir(folder)
                   if entry.name.endswith(SUFFIX) and not entry.name.startswith("."))
    for file in files[:MAX_BLOCKS]:
        try:
            found["blocks"].append(read_block(folder / file, file[: -len(SUFFIX)]))
        except (ConfigError, OSError, ValueError, RecursionError) as exc:
            found["damaged"].append({"file": f"{BLOCKS_DIR}/{file}", "error": " ".join(damage(exc).split())})
    if len(files) > MAX_BLOCKS:
        found["damaged"].append({"file": f"{BLOCKS_DIR}/", "error": f"{len(files) - MAX_BLOCKS:,} more files not "
                                 f"read: the library lists at most {MAX_BLOCKS:,} blocks"})
    return found
