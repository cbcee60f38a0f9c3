"""Issue 53, items 3 to 7: what a new user met that another tool had taught them to expect."""

from __future__ import annotations

import pytest

from microgpt.cli import main
from test_tensorboard import GPT, TINY, metrics, scalars

TEXT = "the cat sat on the mat; the dog sat on the log.\n" * 80


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "text.txt").write_text(TEXT, encoding="utf-8")
    return tmp_path


def test_a_resume_keeps_log_tensorboard(workdir):
    pytest.importorskip("tensorboardX", reason='the tensorboard extra: pip install -e ".[tensorboard]"')
    assert main(["train", "text.txt", "--steps", "4", "--model", "m", "--log", "tensorboard", *GPT, *TINY]) == 0
    assert main(["train", "--resume", "m", "--steps", "8", "--quiet", "--gen", "0"]) == 0
    assert set(scalars(workdir / "m.tensorboard")["loss/train"]) == set(range(1, 9))
    assert main(["train", "--resume", "m", "--steps", "10", "--log", "jsonl", "--quiet", "--gen", "0"]) == 0
    assert len(metrics(workdir / "m.metrics.jsonl")) == 10
    assert max(scalars(workdir / "m.tensorboard")["loss/train"]) == 8  # --log jsonl on a resume stops the events
