"""Issue 53, items 3 to 7: what a new user met that another tool had taught them to expect (two of its tests live
with what they hold: a resume keeping --log tensorboard in tests/training/test_tensorboard.py, a folder holding
tokenizer.json as --tokenizer in tests/data/test_hf_tokenizer.py)."""

from __future__ import annotations

import os
import pty
from types import SimpleNamespace

import pytest

from export_cases import SEQ_LEN, checkpoint, probe
from microgpt.cli import main
from microgpt.core.progress import Progress


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


def test_the_start_of_a_flag_suggests_that_flag(capsys):
    with pytest.raises(SystemExit):
        main(["sample", "m", "--temp", "0.5"])
    assert "unrecognized arguments: --temp 0.5; did you mean --temperature?" in capsys.readouterr().err


def test_a_terminal_that_reports_no_width_gets_plain_lines():
    """A pty whose size was never set reports 0 columns, where a bar draws nothing."""
    main_end, terminal_end = pty.openpty()
    with os.fdopen(terminal_end, "w") as stream:
        assert os.get_terminal_size(stream.fileno()).columns == 0
        progress = Progress(stream=stream)
        progress.start(total=3)
        progress.update(1, loss=2.5, val_loss=None, tokens_per_sec=1234.0)
        progress.close()
    assert os.read(main_end, 4096).decode().startswith("step 1/3  loss 2.5000  1,234 tok/s  ETA")
    os.close(main_end)


def test_export_counts_operations_not_steps(tmp_path, capsys):
    pytest.importorskip("onnx", reason='the export extra: pip install -e ".[export]"')
    assert main(["export", str(checkpoint("gpt")), "--out", str(tmp_path / "m.onnx")]) == 0
    line = capsys.readouterr().out
    assert "; its forward is 25 operations (embedding, layer_norm, linear, attention, add)" in line
    assert " steps" not in line


def test_runs_shows_a_graph_s_shape_without_of():
    from microgpt.cli.runs import cells

    row = {"path": "g", "family": "graph", "status": "finished",
           "model": "graph of 34 primitives (8 kinds), 1 loss: d 16, seq_len 16"}
    assert cells(row)[2] == "34 primitives (8 kinds), 1 loss"
    ensemble = {**row, "family": "ensemble", "model": "ensemble of 2 experts d8n1,d8n1: stream 8, ..."}
    assert cells(ensemble)[2] == "2 experts d8n1,d8n1"


def test_dir_of_microgpt_lists_what_it_offers():
    import microgpt

    assert {"train", "load", "__version__"} <= set(dir(microgpt))


def test_a_run_summary_s_repr_leaves_the_losses_out():
    from microgpt.training.trainer import RunSummary

    summary = RunSummary(300, 300, 1.5, 1.6, 1.55, 12.0, 9000.0, None, losses=[2.0 + i / 1000 for i in range(300)])
    assert "2.299" not in repr(summary) and len(repr(summary)) < 300 and len(summary.losses) == 300


def test_a_missing_checkpoint_raises_an_error_named_for_what_it_is():
    import microgpt
    from microgpt.model.checkpoint import CheckpointError

    with pytest.raises(FileNotFoundError) as caught:
        microgpt.load("nope")
    assert type(caught.value).__name__ == "CheckpointNotFound" and isinstance(caught.value, CheckpointError)


def test_eval_s_first_progress_line_has_the_first_batch_s_eta(tmp_path, monkeypatch, capsys):
    """The clock runs 10 s a batch: the first line's ETA is the other 9 batches' 90 s (it said 0 s, the counter
    starting its clock after the first batch)."""
    import microgpt.core.progress as progress_module
    import microgpt.use.evaluate as evaluate_module
    from export_cases import TEXT as CASES_TEXT

    (tmp_path / "held.txt").write_text(CASES_TEXT, encoding="utf-8")
    clock = [0.0]
    monkeypatch.setattr(progress_module, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    nll_rows = evaluate_module.nll_rows

    def a_batch_takes_ten_seconds(*args):
        clock[0] += 10
        return nll_rows(*args)

    monkeypatch.setattr(evaluate_module, "nll_rows", a_batch_takes_ten_seconds)
    assert main(["eval", str(checkpoint("gpt")), str(tmp_path / "held.txt"), "--max-positions", "40",
                 "--batch-size", "4", "--stride", "1", "--backend", "numpy"]) == 0  # 4 positions a batch
    assert capsys.readouterr().err.splitlines()[0].endswith(": 4/40 tokens  ETA 90s")
