"""The docs show what the tool does: every `microgpt` command line in the README and docs/ parses with the real
parser, and docs/training.md's copy of examples/configs.yaml is the file, whose every run trains."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from microgpt.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks" / "README.md"]
FENCE = re.compile(r"```(?:bash|sh)\n(.*?)```", re.DOTALL)


def command_lines() -> list[tuple[str, str]]:
    """(where, the arguments after `microgpt`) for each microgpt command in a bash block of the docs."""
    found = []
    for doc in DOCS:
        for block in FENCE.findall(doc.read_text(encoding="utf-8")):
            for line in block.replace("\\\n", " ").splitlines():
                words = shlex.split(line, comments=True)
                for i, word in enumerate(words):
                    if word == "microgpt" and (i == 0 or words[i - 1] not in ("-m", "install")) or (
                            word == "-m" and words[i + 1 : i + 2] == ["microgpt"]):
                        start = i + 1 if word == "microgpt" else i + 2
                        rest = list(words[start:])
                        for end in ("|", "&&"):
                            if end in rest:
                                rest = rest[: rest.index(end)]
                        if rest and rest[0] in ("prepare", "train", "sample", "eval", "plot"):
                            found.append((f"{doc.name}: {line.strip()}", rest))
                        break
    return found


COMMANDS = command_lines()


def test_the_docs_show_every_command():
    assert {args[0] for _, args in COMMANDS} == {"prepare", "train", "sample", "eval", "plot"}
    assert len(COMMANDS) > 30


@pytest.mark.parametrize("args", [args for _, args in COMMANDS], ids=[where for where, _ in COMMANDS])
def test_every_command_in_the_docs_parses(args):
    parsed = build_parser()[0].parse_args(args)  # an unknown flag or a bad value exits 2 here
    assert parsed.command == args[0]


def test_the_docs_copy_of_the_example_configs_is_the_file():
    example = (ROOT / "examples" / "configs.yaml").read_text(encoding="utf-8")
    assert f"```yaml\n{example}```" in (ROOT / "docs" / "training.md").read_text(encoding="utf-8")


@pytest.mark.slow
def test_every_run_of_the_example_configs_trains(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    words = ["lorem", "ipsum", "dolor", "sit", "amet", "consectetur", "adipiscing", "elit"]
    (tmp_path / "text.txt").write_text(" ".join(words[(i * 7) % 8] for i in range(5000)))  # 30k+ characters
    config = ROOT / "examples" / "configs.yaml"
    import yaml

    for run_id in yaml.safe_load(config.read_text())["runs"]:
        assert main(["train", "text.txt", "--config", str(config), "--run", run_id, "--steps", "1", "--gen", "0",
                     "--quiet", "--eval-every", "1"]) == 0, capsys.readouterr().err
        assert (tmp_path / "checkpoints" / run_id / "config.json").is_file()
