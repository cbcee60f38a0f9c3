"""The CLI reference's table of `microgpt train` flags (docs/cli.md), made from the same declarations as the
flags themselves.

`python -m microgpt.cli.flag_table` prints it, and with `--write docs/cli.md`
puts it in place; tests/cli/test_flag_table.py fails when the page's copy
(between the two marker lines) drifts from it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from microgpt.cli.train_flags import INVOCATION_FLAGS
from microgpt.core.checks import Switch
from microgpt.settings.sources import known_settings

BEGIN = "<!-- train flags: made by `python -m microgpt.cli.flag_table`; a test checks this table -->"
END = "<!-- end of train flags -->"


def flag_table() -> str:
    """The markdown table: FILE, one row per setting (flag, meaning, default), then the invocation flags."""
    rows = ["| flag | meaning | default |", "| --- | --- | --- |"]
    for field in known_settings().values():
        if field.key == "file":
            name = "`FILE`"
        elif isinstance(field.check, Switch):
            name = f"`{field.flag}`, `--no-{field.flag[2:]}`"
        else:
            name = f"`{field.flag} {field.flag_metavar or 'VALUE'}`"
        rows.append(f"| {name} | {_cell(field.help)} | {_cell(field.default_text)} |")
    for flags, keywords in INVOCATION_FLAGS:
        metavar = f" {keywords['metavar']}" if "metavar" in keywords else ""
        rows.append(f"| `{flags[0]}{metavar}` | {_cell(keywords['help'])} | |")
    return "\n".join(rows)


def _cell(text: str) -> str:
    """Text safe in a markdown table cell: pipes escaped, and anything with <angle brackets> as code."""
    text = text.replace("|", "\\|")
    return f"`{text}`" if "<" in text and len(text) < 40 else text.replace("<", "&lt;")


def docs_block() -> str:
    """The table between its two marker lines, as docs/cli.md holds it."""
    return f"{BEGIN}\n{flag_table()}\n{END}"


def write_into(page: Path) -> None:
    """Replace the table between the markers of `page` with the current one."""
    text = page.read_text(encoding="utf-8")
    start, end = text.index(BEGIN), text.index(END) + len(END)
    page.write_text(text[:start] + docs_block() + text[end:], encoding="utf-8")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--write":
        write_into(Path(sys.argv[2]))
    else:
        print(docs_block())
