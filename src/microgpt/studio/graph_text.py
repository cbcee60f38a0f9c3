"""The node editor's text view and templates: a graph document as YAML or JSON text and back, and the example
documents of the source tree's examples/graphs/.

- `text_request` (POST /api/graph/text): {"text", "format"} read as a document (parse_document's limits and
  checks) -> {"document"}, or {"error": one line, "line": its line where the reader says}; {"document",
  "format"} -> {"text"} (YAML in the document's own key order, or JSON indented by 1).
- `examples` (GET /api/graph/examples): the names of the .json and .yaml files of examples/graphs/ (only that
  folder, only regular files, never through a link); `example(name)` (GET /api/graph/example?name=NAME) one of
  them read as a document, a name not in that list refused. A studio installed without the source tree has
  none.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from microgpt.core.checks import shown
from microgpt.core.errors import ConfigError
from microgpt.model.graph.document import check_read, parse_document, read_document

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "graphs"
FORMATS = ("yaml", "json")
LINE = re.compile(r"line (\d+)")


def text_request(body: dict) -> dict:
    """The text view's round trip (see the module doc)."""
    form = body.get("format", "yaml")
    if form not in FORMATS:
        raise ConfigError(f"format must be yaml or json, not {shown(form)}")
    if "document" in body:
        document = check_read(body["document"], "the document")
        if form == "json":
            return {"text": json.dumps(document, indent=1) + "\n"}
        return {"text": yaml.safe_dump(document, sort_keys=False, default_flow_style=None, width=100)}
    text = body.get("text")
    if not isinstance(text, str):
        raise ConfigError("give the text to read: {\"text\": the document as YAML or JSON, \"format\"}")
    try:
        return {"document": parse_document(text, "the text")}
    except ConfigError as exc:
        return {"error": str(exc), "line": _line_of(text, str(exc))}


def _line_of(text: str, message: str) -> int | None:
    """The line (from 1) a reader's error points at: JSON's says it; YAML's mark is read again here."""
    found = LINE.search(message)
    if found:
        return int(found.group(1))
    try:
        yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        return exc.problem_mark.line + 1 if exc.problem_mark else None
    except yaml.YAMLError:
        return None
    return None


def examples() -> dict:
    """{"examples": the example documents' names}, empty where the source tree is not here."""
    if not EXAMPLES.is_dir():
        return {"examples": []}
    return {"examples": sorted(entry.name for entry in EXAMPLES.iterdir() if _served(entry))}


def example(name) -> dict:
    """{"name", "document"} of one example by its name in examples()."""
    if name not in examples()["examples"]:
        raise ConfigError(f"there is no example {shown(name)}; the examples are: "
                          f"{', '.join(examples()['examples']) or 'none (the source tree is not here)'}")
    return {"name": name, "document": read_document(EXAMPLES / name)}


def _served(entry: Path) -> bool:
    return entry.suffix in (".json", ".yaml", ".yml") and not entry.is_symlink() and entry.is_file()
