"""The settings are declared once: the CLI reference's flag table (docs/cli.md), the train flags, their help and the YAML keys
all follow the config dataclasses."""

from __future__ import annotations

from pathlib import Path

from microgpt.cli import build_parser
from microgpt.cli.flag_table import BEGIN, END, docs_block
from microgpt.settings.known import known_settings

CLI_PAGE = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def train_parser():
    commands = next(a for a in build_parser()[0]._actions if a.dest == "command")
    return commands.choices["train"]


def test_the_cli_reference_flag_table_is_the_generated_one():
    text = CLI_PAGE.read_text(encoding="utf-8")
    assert BEGIN in text and END in text, "docs/cli.md lost its train-flag table markers"
    on_page = text[text.index(BEGIN) : text.index(END) + len(END)]
    assert on_page == docs_block(), (
        "docs/cli.md's flag table differs from the settings; run "
        "`python -m microgpt.cli.flag_table --write docs/cli.md`"
    )


def test_every_setting_is_a_flag_and_a_yaml_key_with_its_default_in_the_help():
    parser = train_parser()
    flags = {option: action for action in parser._actions for option in action.option_strings}
    fields = list(known_settings().values())  # the YAML keys of named runs too (named_runs.py reads them)
    assert {"d_model", "heads", "family", "tokenizer", "vocab_size", "steps", "backend"} <= {f.key for f in fields}
    for f in fields:
        if f.key == "file":
            continue  # the positional FILE
        assert f.flag in flags, f"{f.flag} is not a train flag"
        assert flags[f.flag].default is None, f"{f.flag}: a flag's default must be None (the settings supply it)"
        assert f"default: {f.default_text})" in flags[f.flag].help
