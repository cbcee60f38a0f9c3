"""`microgpt export`'s refusals: each is one line on stderr, exit status 2, and nothing written (no file, no
temporary beside it); and a checkpoint saved again and again while it is exported is read whole, one save's
weights, never a mix of two."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import microgpt
from export_cases import SEQ_LEN, checkpoint, probe
from extras import need
from folder_files import listing
from microgpt.backends import get_backend
from microgpt.cli import main
from microgpt.model.checkpoint import load_checkpoint, save_checkpoint


def refused(capsys, args: list[str], folder: Path, *words: str) -> str:
    """Run `microgpt export ARGS`; assert exit 2, one line naming `words`, and `folder` as it was."""
    before = listing(folder)
    try:
        status = main(["export", *args])
    except SystemExit as stop:  # a flag the parser refuses (argparse exits itself, after its one line)
        status = stop.code
    assert status == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1, captured.err
    assert captured.err.startswith("microgpt export: error: ")
    for word in words:
        assert word in captured.err, captured.err
    assert listing(folder) == before
    return captured.err


@pytest.fixture
def run_folder(tmp_path):
    """A folder with a trained checkpoint `ck` and the files its run wrote beside it."""
    microgpt.train(str(checkpoint("gpt").parent / "text.txt"), model=str(tmp_path / "ck"), steps=2, batch_size=2,
                   seq_len=SEQ_LEN, d_model=8, heads="2", n_layers=1, d_ff=16, val_tokens=100, gen=0, backend="numpy")
    assert (tmp_path / "ck.metrics.jsonl").is_file() and (tmp_path / "results.jsonl").is_file()
    return tmp_path


def test_bad_outputs_and_formats_are_one_line_and_write_nothing(run_folder, capsys):
    ck = str(run_folder / "ck")
    refused(capsys, [ck, "--format", "tflite", "--out", str(run_folder / "m.onnx")], run_folder, "invalid choice")
    refused(capsys, [ck, "--out", str(run_folder)], run_folder, "is a directory")
    refused(capsys, [ck, "--out", ck], run_folder, "is a directory")
    refused(capsys, [ck, "--format", "onnx", "--out", f"{ck}/model.onnx"], run_folder, "inside the checkpoint")
    for name in ("ck.metrics.jsonl", "results.jsonl", "ck.loss.png", ".ck.lock"):
        refused(capsys, [ck, "--format", "onnx", "--out", str(run_folder / name), "--overwrite"], run_folder,
                "a file a training run writes")
    refused(capsys, [ck, "--out", str(run_folder / "model.bin")], run_folder, "--format onnx or --format torch")
    refused(capsys, [ck, "--out", str(run_folder / "missing" / "m.onnx")], run_folder, "cannot write in")
    refused(capsys, [ck, "--format", "torch", "--kv-cache", "--out", str(run_folder / "m.pt")], run_folder,
            "--kv-cache is for --format onnx")


def test_a_missing_checkpoint_and_a_file_in_the_way_are_one_line_and_write_nothing(run_folder, capsys):
    """Past the flags' checks: these refusals, and the export that follows, need the packages that build the
    graph (without them, that is the one line)."""
    need("onnx")
    need("onnxruntime")
    ck = str(run_folder / "ck")
    refused(capsys, [str(run_folder / "nothing"), "--out", str(run_folder / "m.onnx")], run_folder,
            "no such checkpoint")
    (run_folder / "old.onnx").write_bytes(b"mine")
    refused(capsys, [ck, "--out", str(run_folder / "old.onnx")], run_folder, "exists; add --overwrite")
    assert main(["export", ck, "--out", str(run_folder / "old.onnx"), "--overwrite"]) == 0
    assert (run_folder / "old.onnx").read_bytes() != b"mine"
    assert not [p for p in run_folder.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize(("fmt", "package", "hint"), [("onnx", "onnx", '.[export]'),
                                                      ("onnx", "onnxruntime", '.[export]'),
                                                      ("torch", "torch", "pip install torch")])
def test_a_missing_package_names_what_to_install(fmt, package, hint, run_folder, capsys, monkeypatch):
    if package == "onnxruntime":
        need("onnx")  # checked first: where it is missing too, the line names it
    monkeypatch.setitem(sys.modules, package, None)  # its import fails, as where it is not installed
    err = refused(capsys, [str(run_folder / "ck"), "--format", fmt, "--out", str(run_folder / "m.out")], run_folder,
                  f"{package} is not installed", hint)
    assert "Traceback" not in err


def test_a_model_that_fails_its_own_check_is_not_written(run_folder, capsys, monkeypatch):
    need("onnxruntime")
    from microgpt.export import onnx_export

    monkeypatch.setattr(onnx_export, "PROBE_TOLERANCE", 0.0)  # no float32 model meets it: the check fails
    refused(capsys, [str(run_folder / "ck"), "--out", str(run_folder / "m.onnx")], run_folder,
            "differ from microgpt's", "nothing was written")


def test_a_checkpoint_whose_first_save_is_under_way_is_refused(tmp_path, capsys):
    staging = tmp_path / ".ck.tmp-99999-0123abcd"  # what a save writes before it renames the directory into place
    staging.mkdir()
    (staging / "config.json").write_text("{}")
    refused(capsys, [str(tmp_path / "ck"), "--out", str(tmp_path / "m.onnx")], tmp_path, "ck")


def test_a_checkpoint_saved_during_the_export_is_read_as_one_save(tmp_path, capsys):
    ort = need("onnxruntime")
    source = checkpoint("gpt")
    first, tokenizer, _ = load_checkpoint(source, get_backend("numpy"))
    second, _, _ = load_checkpoint(source, get_backend("numpy"))
    second.params.from_host({k: 1.5 * v for k, v in second.params.to_host().items()})  # other weights, same shape
    live = tmp_path / "live"
    save_checkpoint(live, first, tokenizer, family_name="gpt")
    stop, saves = threading.Event(), [0]

    def keep_saving() -> None:
        while not stop.is_set():
            save_checkpoint(live, (first, second)[saves[0] % 2], tokenizer, family_name="gpt")
            saves[0] += 1
            time.sleep(0.002)

    saver = threading.Thread(target=keep_saving)
    saver.start()
    try:
        outcomes = [main(["export", str(live), "--out", str(tmp_path / f"m{i}.onnx")]) for i in range(3)]
    finally:
        stop.set()
        saver.join()
    assert outcomes == [0, 0, 0] and saves[0] > 3, (outcomes, saves, capsys.readouterr().err)
    ids = probe(tokenizer.size, 2, SEQ_LEN)
    choices = [model.be.to_host(model.logits(ids.astype(np.int32))).reshape(2, SEQ_LEN, -1)
               for model in (first, second)]
    assert np.abs(choices[0] - choices[1]).max() > 0.1  # a mix of the two would match neither
    for i in range(3):
        got = ort.InferenceSession(str(tmp_path / f"m{i}.onnx")).run(["logits"], {"ids": ids})[0]
        assert min(np.abs(got - choice).max() for choice in choices) < 1e-4  # one save's weights, whole


def test_the_python_export_refuses_in_keywords_and_the_command_line_in_flags(run_folder, capsys):
    """`microgpt.export.export` and `microgpt export` share one implementation and its refusals, each front end
    naming the settings in its own words (`format='onnx'` in Python, `--format onnx` on the command line)."""
    from microgpt.export import export
    from microgpt.export.export_plan import ExportError

    ck = str(run_folder / "ck")
    (run_folder / "old.onnx").write_bytes(b"mine")
    cases = [  # (Python's arguments, the command line's, what each says)
        ((None, run_folder / "m.bin"), ["--out", str(run_folder / "m.bin")],
         (f"out='{run_folder / 'm.bin'}' does not say", "add format='onnx' or format='torch'"),
         (f"--out {run_folder / 'm.bin'} does not say", "add --format onnx or --format torch")),
        (("onnx", run_folder / "old.onnx"), ["--format", "onnx", "--out", str(run_folder / "old.onnx")],
         ("exists; add overwrite=True to replace it",), ("exists; add --overwrite to replace it",)),
        (("onnx", run_folder), ["--out", str(run_folder)], (f"out='{run_folder}' is a directory",),
         (f"--out {run_folder} is a directory",)),
    ]
    for (fmt, out), flags, in_python, on_the_command_line in cases:
        with pytest.raises(ExportError) as caught:
            export(ck, fmt, out)
        assert all(words in str(caught.value) for words in in_python), str(caught.value)
        assert "--" not in str(caught.value)
        refused(capsys, [ck, *flags], run_folder, *on_the_command_line)
    with pytest.raises(ExportError, match=r"^kv_cache=True is for format='onnx' \(the torch module"):
        export(ck, "torch", run_folder / "m.pt", kv_cache=True)
    with pytest.raises(ExportError, match=r"^format='tflite' is not one of onnx, torch$"):
        export(ck, "tflite", run_folder / "m.onnx")
    assert (run_folder / "old.onnx").read_bytes() == b"mine" and not (run_folder / "m.pt").exists()
