"""Training from a prepared dataset (data/dataset.py, data/corpus.py): `microgpt train DIR` trains on the
memory-mapped shards exactly as on the same tokens read from a text, resumes bit for bit, validates on the
held-out split, and refuses what does not fit (a tokenizer flag, a damaged shard, another tokenizer's
checkpoint). The datasets here are written by `write_dataset` (tests/dataset_files.py), byte for byte as
docs/data.md describes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import microgpt
from dataset_files import write_dataset
from microgpt.cli import main
from microgpt.data.dataset import open_dataset
from microgpt.data.shards import ShardedTokens
from microgpt.data.tokenizer import CharTokenizer
from microgpt.model.priors import ngram_table

TEXT = "".join(np.random.default_rng(0).choice(list("abcdefgh ij\n"), size=8000))
HELD_OUT = 800
TINY = {"d_model": 16, "n_layers": 1, "heads": "2", "d_ff": 32, "seq_len": 16, "batch_size": 4, "gen": 0,
        "backend": "numpy", "eval_every": 10}


def losses(checkpoint: Path) -> list[float]:
    return [json.loads(line)["loss"] for line in Path(f"{checkpoint}.metrics.jsonl").read_text().splitlines()]


@pytest.fixture
def dataset(tmp_path) -> Path:
    (tmp_path / "text.txt").write_text(TEXT)
    return write_dataset(tmp_path / "data", TEXT, HELD_OUT, shard_tokens=1500)  # windows cross shard edges


@pytest.mark.parametrize("random_batches", [True, False])
def test_a_dataset_trains_exactly_as_its_text(tmp_path, dataset, random_batches):
    """The same tokens, the same held-out ones: the same losses, bit for bit, from shards as from the text."""
    common = {**TINY, "steps": 30, "random_batches": random_batches, "val_tokens": HELD_OUT}
    microgpt.train(str(tmp_path / "text.txt"), model=str(tmp_path / "from-text"), **common)
    microgpt.train(str(dataset), model=str(tmp_path / "from-shards"), **common)
    assert losses(tmp_path / "from-shards") == losses(tmp_path / "from-text")


@pytest.mark.parametrize("random_batches", [True, False])
def test_a_resumed_dataset_run_continues_bit_for_bit(tmp_path, dataset, random_batches):
    """The data position (a random generator's state, or a place in the shards) is restored exactly (on the
    cpu backend under the reference preset, as tests/training/test_training_learns_and_repeats.py holds a
    text's resume)."""
    common = {**{k: v for k, v in TINY.items() if k != "eval_every"}, "random_batches": random_batches,
              "preset": "reference", "lr": 3e-3, "val_tokens": 200, "backend": "cpu"}
    microgpt.train(str(dataset), model=str(tmp_path / "whole"), steps=30, **common)
    microgpt.train(str(dataset), model=str(tmp_path / "halves"), steps=15, **common)
    microgpt.train(resume=str(tmp_path / "halves"), steps=30)
    assert losses(tmp_path / "halves") == losses(tmp_path / "whole")


def test_validation_reads_the_held_out_split_and_eval_scores_it(tmp_path, dataset, capsys):
    run, summary = microgpt.train(str(dataset), model=str(tmp_path / "ck"), steps=10, **TINY)
    assert run.train_config.val_tokens == HELD_OUT and summary.val_loss is not None
    assert main(["eval", str(tmp_path / "ck"), str(dataset)]) == 0
    assert f"scored:          {HELD_OUT - 16:,} tokens" in capsys.readouterr().out


def test_sharded_tokens_read_across_shard_edges_as_one_sequence():
    whole = np.arange(100) % 7
    tokens = ShardedTokens([whole[:30], whole[30:31], np.zeros(0, dtype=np.int64), whole[31:]])
    assert len(tokens) == 100
    for start, stop in [(0, 100), (25, 35), (30, 31), (29, 32), (99, 100), (40, 40)]:
        assert np.array_equal(tokens[start:stop], whole[start:stop])
    assert np.array_equal(np.concatenate(list(tokens.chunks(13))), whole)


@pytest.mark.parametrize("kind", ["bigram", "trigram"])
def test_ngram_tables_count_a_dataset_a_chunk_at_a_time_as_the_whole(kind, monkeypatch):
    from microgpt.model import priors

    whole = np.random.default_rng(1).integers(0, 6, 500)
    monkeypatch.setattr(priors, "COUNT_CHUNK", 37)  # chunk edges inside the runs
    assert np.array_equal(ngram_table(kind, ShardedTokens([whole[:200], whole[200:]]), 6), ngram_table(kind, whole, 6))


def test_a_tokenizer_flag_for_a_dataset_is_one_line_and_nothing_trains(tmp_path, dataset, capsys):
    assert main(["train", str(dataset), "--tokenizer", "bpe", "--model", str(tmp_path / "ck")]) == 2
    assert "is a prepared dataset, tokenized by microgpt prepare" in capsys.readouterr().err
    assert not (tmp_path / "ck").exists()


def test_a_damaged_shard_is_refused_before_training_naming_it(tmp_path, dataset, capsys):
    shard = dataset / "train-00001.bin"
    data = bytearray(shard.read_bytes())
    data[100] ^= 1
    shard.write_bytes(bytes(data))
    assert main(["train", str(dataset), "--model", str(tmp_path / "ck"), "--steps", "5"]) == 2
    assert "shard" in (err := capsys.readouterr().err) and "train-00001.bin" in err and "checksum" in err
    assert not (tmp_path / "ck").exists()
    shard.write_bytes(bytes(data[:-2]))  # cut short: the header's count no longer fits
    with pytest.raises(microgpt.core.errors.DataError, match="cut short"):
        open_dataset(dataset)


def test_a_checkpoint_of_another_tokenizer_cannot_resume_on_a_dataset(tmp_path, dataset, capsys):
    (tmp_path / "other.txt").write_text("xyz " * 500)
    microgpt.train(str(tmp_path / "other.txt"), model=str(tmp_path / "ck"), steps=5, **TINY)
    assert main(["train", str(dataset), "--init-from", str(tmp_path / "ck"), "--model", str(tmp_path / "ft"),
                 "--steps", "5"]) == 2
    assert "the same ids mean other text" in capsys.readouterr().err
    assert not (tmp_path / "ft").exists()


def test_shards_are_read_by_position_never_loaded(dataset):
    """Each slice is one pread: nothing of a shard stays in the process but what a batch holds."""
    from microgpt.data.shards import ShardReader

    loaded = open_dataset(dataset)
    assert all(isinstance(shard, ShardReader) for shard in loaded.train.shards)
    assert np.array_equal(loaded.train[1499:1501], CharTokenizer.train(TEXT, None).encode(TEXT)[1499:1501])
