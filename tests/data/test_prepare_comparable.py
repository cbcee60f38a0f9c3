"""Datasets of one corpus compare across tokenizers, and prepare's progress speaks the summary's unit (issue 53,
item 2): the default held-out split is the same documents for char, bpe and a tokenizer.json (it counted tokens,
so the cap picked other documents for each), the manifest records the split and each split's characters, the
progress lines count MB of text as the summary does (they counted compressed MB on disk), and training a bpe
tokenizer says what it is doing."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from microgpt.cli import main
from microgpt.data.dataset import open_dataset
from microgpt.data.prepare import split as split_module
from microgpt.data.tokenizer.bpe import BPETokenizer
from prepare_inputs import documents, tokens, write_jsonl


def held_out_text(directory: Path) -> str:
    dataset = open_dataset(directory)
    return dataset.tokenizer.decode(tokens(dataset.val))


def byte_level_tokenizer_json(path: Path, text: str) -> Path:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator([text], trainers.BpeTrainer(
        vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    tokenizer.save(str(path))
    return path


def test_char_bpe_and_a_tokenizer_json_hold_out_the_same_documents(tmp_path, capsys, monkeypatch):
    """The default cap binds here (as it does on a corpus of over ten million characters): counted in tokens,
    bpe's few tokens per character held out about three times the text char did, other documents."""
    docs = documents(600)
    source = write_jsonl(tmp_path / "d.jsonl", docs)
    text = "".join(docs)
    monkeypatch.setattr(split_module, "DEFAULT_HELD_OUT_CHARS", len(text) // 40)  # under a tenth: the cap binds
    kinds = {"char": "char", "bpe": "bpe", "hf": str(byte_level_tokenizer_json(tmp_path / "tokenizer.json", text))}
    for name, kind in kinds.items():
        assert main(["prepare", str(source), "--out", str(tmp_path / name), "--tokenizer", kind, "--workers", "1",
                     "--quiet"]) == 0, capsys.readouterr().err
    held = {name: held_out_text(tmp_path / name) for name in kinds}
    assert held["char"] and held["char"] == held["bpe"] == held["hf"]
    assert len(held["char"]) < len(text) / 20  # the cap, not the tenth, chose it
    manifests = {name: json.loads((tmp_path / name / "manifest.json").read_text()) for name in kinds}
    assert manifests["char"]["held_out"] == manifests["bpe"]["held_out"] == manifests["hf"]["held_out"]
    for manifest in manifests.values():
        splits = manifest["splits"]
        assert splits["val"]["characters"] == len(held["char"])
        assert splits["train"]["characters"] + splits["val"]["characters"] == sum(len(d) + (not d.endswith("\n"))
                                                                                  for d in docs)


def test_a_dataset_prepared_before_the_record_still_opens(tmp_path, capsys):
    source = write_jsonl(tmp_path / "d.jsonl", documents(50))
    assert main(["prepare", str(source), "--out", str(tmp_path / "ds"), "--quiet"]) == 0
    path = tmp_path / "ds" / "manifest.json"
    manifest = json.loads(path.read_text())
    del manifest["held_out"]
    for split in manifest["splits"].values():
        del split["characters"]
    path.write_text(json.dumps(manifest))
    assert len(open_dataset(tmp_path / "ds").train) > 0


def test_progress_counts_mb_of_text_as_the_summary_does(tmp_path, capsys):
    """A .jsonl.gz is a tenth of its text on disk: the lines counted the compressed MB, the summary the text."""
    docs = documents(4000)
    source = write_jsonl(tmp_path / "d.jsonl.gz", docs, opener=gzip.open)
    assert main(["prepare", str(source), "--out", str(tmp_path / "ds"), "--workers", "1"]) == 0
    captured = capsys.readouterr()
    summary = re.search(r"read ([\d.,]+) MB of text \(([\d.,]+) MB on disk\)", captured.out)
    assert summary, captured.out
    text_mb, disk_mb = summary.groups()
    assert float(text_mb) > 2 * float(disk_mb)
    tokenizing = re.findall(r"tokenizing: ([\d.,]+)/([\d.,]+) MB of text  [\d.,]+ MB/s  ETA \d+s", captured.err)
    assert tokenizing and tokenizing[-1] == (text_mb, text_mb), captured.err
    scanning = re.findall(r"scanning: ([\d.,]+)/~([\d.,]+) MB of text", captured.err)  # estimated: compressed
    assert scanning and scanning[-1] == (text_mb, text_mb), captured.err


def test_a_plain_input_s_scan_knows_its_total(tmp_path, capsys):
    source = write_jsonl(tmp_path / "d.jsonl", documents(100))
    assert main(["prepare", str(source), "--out", str(tmp_path / "ds")]) == 0
    assert re.search(r"scanning: [\d.]+/[\d.]+ MB of text", capsys.readouterr().err)


def test_training_a_bpe_tokenizer_says_what_it_does_with_counts(tmp_path, capsys):
    source = write_jsonl(tmp_path / "d.jsonl", documents(4000))  # several of the library's pieces
    assert main(["prepare", str(source), "--out", str(tmp_path / "ds"), "--tokenizer", "bpe"]) == 0
    err = capsys.readouterr().err
    assert re.search(r"training the bpe tokenizer: read [\d,]+ of [\d,]+ characters\n", err), err
    assert re.search(r"read all [\d,]+ characters; counting their words and learning up to 256 merges", err), err
    assert re.search(r"training the bpe tokenizer: done in [\d.]+ s, [\d,]+ tokens", err), err
    assert "\n\n" not in err  # the library's bars draw only on a terminal


@pytest.mark.parametrize("vocab_size", [300, 600])
def test_reporting_progress_trains_the_same_tokenizer(vocab_size):
    text = "".join(documents(300))
    heard: list[str] = []
    assert BPETokenizer.train(text, vocab_size, on_progress=heard.append).to_json() == \
        BPETokenizer.train(text, vocab_size).to_json()
    assert heard[-1].startswith("read all")
