"""Issue 53, items 3 to 7: what a new user met that another tool had taught them to expect."""

from __future__ import annotations

import pytest

from export_cases import SEQ_LEN, checkpoint, probe
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


def test_the_exports_refuse_more_than_seq_len_tokens(tmp_path):
    torch = pytest.importorskip("torch", reason="pip install torch (a CPU build will do)")
    onnx = pytest.importorskip("onnx", reason='the export extra: pip install -e ".[export]"')
    ort = pytest.importorskip("onnxruntime", reason='the export extra: pip install -e ".[export]"')
    from microgpt.export import to_torch

    assert main(["export", str(checkpoint("gpt")), "--out", str(tmp_path / "m.onnx")]) == 0
    run = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    assert f"T from 1 to seq_len {SEQ_LEN}" in onnx.load(str(tmp_path / "m.onnx")).graph.input[0].doc_string
    module = to_torch(checkpoint("gpt"))
    vocab = module.vocab_size
    assert run.run(["logits"], {"ids": probe(vocab, 2, SEQ_LEN)})[0].shape == (2, SEQ_LEN, vocab)
    with pytest.raises(Exception, match=f"ids longer than seq_len {SEQ_LEN} are refused"):
        run.run(["logits"], {"ids": probe(vocab, 2, SEQ_LEN + 1)})
    with pytest.raises(ValueError, match=rf"1 <= T <= seq_len {SEQ_LEN}, got \(2, {SEQ_LEN + 1}\)"):
        module(torch.from_numpy(probe(vocab, 2, SEQ_LEN + 1)))
