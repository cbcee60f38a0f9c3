"""Drafts: a graph the check finds problems in is saved, rather than refused, as `studio/drafts/NAME.json`
({"draft": true, "problems", "document", "layout", "settings"}) in the workspace. A draft is never a run: it
is not in studio.yaml, so nothing trains it until a save without problems writes the run (and removes the
draft). `drafts` lists them (GET /api/configs's "drafts"), `load_draft` reads one back (GET /api/config?name=
NAME&draft=1).
"""

from __future__ import annotations

import json

from microgpt.core.errors import ConfigError
from microgpt.core.files import read_json
from microgpt.model.graph.document import MAX_DOCUMENT_BYTES, _check_size
from microgpt.studio.graph_save import _own_file, check_layout, write_atomically

DRAFTS_DIR = "studio/drafts"
MAX_DRAFT_BYTES = 2 * MAX_DOCUMENT_BYTES  # the document and its layout, settings and problems


def save_draft(workspace, name: str, body: dict, errors: list[dict]) -> dict:
    """The page's draft written as draft `name` with its problems; what /api/save answers for it."""
    document = body.get("document")
    if not isinstance(document, dict):
        raise ConfigError("the draft's document must be an object (a graph document, even a broken one)")
    if len(json.dumps(document)) > MAX_DOCUMENT_BYTES:
        raise ConfigError(f"the draft's document is over {MAX_DOCUMENT_BYTES:,} bytes; a graph document is smaller")
    _check_size(document, "the draft's document")  # a broken graph is kept; a bomb is not
    settings = body.get("settings", {})
    layout = None if body.get("layout") is None else check_layout(body["layout"])
    target = _own_file(workspace, f"{DRAFTS_DIR}/{name}.json")
    draft = {"draft": True, "problems": [error["message"] for error in errors], "family": body.get("family"),
             "document": document, "layout": layout, "settings": settings if isinstance(settings, dict) else {}}
    write_atomically(target, json.dumps(draft, indent=1) + "\n")
    file = workspace.relative(target)
    return {"draft": True, "saved": name, "file": file, "errors": errors,
            "message": f"saved as a draft in {file}, not as a run: fix its {len(errors)} problem(s) before it can "
                       "train"}


def drop_draft(workspace, name: str) -> None:
    """The draft `name` removed (its run is saved now)."""
    path = workspace.root / DRAFTS_DIR / f"{name}.json"
    if path.is_file() and not path.is_symlink():
        path.unlink()


def drafts(workspace) -> list[str]:
    folder = workspace.root / DRAFTS_DIR
    if not folder.is_dir():
        return []
    return sorted(entry.stem for entry in folder.glob("*.json") if entry.is_file() and not entry.is_symlink())


def load_draft(workspace, name: str) -> dict:
    """{"name", "draft": true, "problems", "family", "document", "layout", "settings"} of draft `name`."""
    if name not in drafts(workspace):
        raise ConfigError(f"there is no draft {name!r}; the drafts are: {', '.join(drafts(workspace)) or 'none'}")
    try:
        kept = read_json(_own_file(workspace, f"{DRAFTS_DIR}/{name}.json"), MAX_DRAFT_BYTES)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"draft {name} cannot be read ({exc}); remove {DRAFTS_DIR}/{name}.json") from None
    if not isinstance(kept, dict):
        raise ConfigError(f"draft {name} is not a draft the studio wrote; remove {DRAFTS_DIR}/{name}.json")
    return {"name": name, **{key: kept.get(key) for key in ("draft", "problems", "family", "document", "layout",
                                                             "settings")}}
