"""Drafts: a graph the check finds problems in is saved, rather than refused, as `studio/drafts/NAME.json`
({"draft": true, "problems", "document", "layout", "settings"}) in the workspace. A draft is never a run: it
is not in studio.yaml, so nothing trains it until a save without problems writes the run (and removes the
draft). `drafts` lists them (GET /api/configs's "drafts"), `load_draft` reads one back (GET /api/config?name=
NAME&draft=1).
"""

from __future__ import annotations

import json

from microgpt.core.errors import ConfigError
from microgpt.core.user_files import read_json
from microgpt.model.graph.document import MAX_DOCUMENT_BYTES, check_read
from microgpt.settings.known import known_settings
from microgpt.studio.graph_run import offered_families
from microgpt.studio.graph_save import _own_file, check_layout, write_atomically

DRAFTS_DIR = "studio/drafts"
MAX_DRAFT_BYTES = 2 * MAX_DOCUMENT_BYTES  # the document and its layout, settings and problems


def save_draft(workspace, name: str, body: dict, errors: list[dict]) -> tuple[dict, int]:
    """(the answer, its status) of a save whose check found `errors`: the draft written as draft `name`, with the
    same errors (each on its setting or node, for the page to place), or a refusal that writes nothing where
    what was sent is no graph to keep (see `unkept`)."""
    refused = unkept(workspace, body)
    if refused is not None:
        return {"error": f"not saved, not even as a draft: {refused}", "errors": errors}, 400
    layout = None if body.get("layout") is None else check_layout(body["layout"])
    target = _own_file(workspace, f"{DRAFTS_DIR}/{name}.json")
    draft = {"draft": True, "problems": [error["message"] for error in errors], "family": body.get("family"),
             "document": body.get("document"), "layout": layout, "settings": body.get("settings", {})}
    write_atomically(target, json.dumps(draft, indent=1) + "\n")
    file = workspace.relative(target)
    return {"draft": True, "saved": name, "file": file, "errors": errors,
            "message": f"saved as a draft in {file}, not as a run: fix its {len(errors)} problem(s) before it can "
                       "train"}, 200


def unkept(workspace, body: dict) -> str | None:
    """Why a save with problems is refused rather than kept as a draft (issue 52), or None. Kept: a broken
    graph, or a family's settings with wrong values (where they draw no document). Refused: a document that is
    not a graph document (a wrong shape, an empty graph, a bomb), settings the form never sends (an unknown
    key, a value that is no text or number), an unknown family, or a path outside the workspace."""
    document, settings, family_name = body.get("document"), body.get("settings", {}), body.get("family")
    if not isinstance(settings, dict):
        return "the settings must be an object of setting: value"
    unknown = [key for key, value in settings.items() if key not in known_settings()
               or not (value is None or isinstance(value, (str, int, float, bool)))]
    if unknown:
        return f"setting {str(unknown[0])[:40]!r} is unknown or not a text or number; give the form's settings"
    if family_name is not None and family_name not in offered_families():
        return f"the family must be one of {', '.join(offered_families())}"
    if document is None and family_name is None:
        return "a graph run's draft needs its document"
    try:
        if document is not None:
            check_read(document, "the draft's document")
        workspace.check_run_paths(settings)
    except ConfigError as exc:
        return str(exc)
    if document is not None and not document.get("nodes"):
        return "the draft's document has no nodes; an empty graph has nothing to keep"
    return None


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
