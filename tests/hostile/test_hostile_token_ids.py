"""Token ids past the vocabulary (issue 52): a dataset whose shards hold them is refused when it is opened, in
one line naming the shard and the id, before any kernel sees one; and the embedding and loss ops never read or
write outside their arrays with such an id, whatever calls them: the CPU backends refuse it naming it, the cuda
kernels (run here on the CPU emulator) give NaN where it was.

Each dataset here is consistent with its manifest (sizes and checksums agree), so only the ids are wrong.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dataset_files import write_manifest, write_split
from microgpt.backends.cpu_backend import CpuBackend
from microgpt.backends.numpy_backend import NumpyBackend
from microgpt.cli import main
from microgpt.core.errors import DataError
from microgpt.data.dataset import open_dataset, sha256_of
from microgpt.data.shards import shard_header
from microgpt.data.tokenizer import CharTokenizer

TEXT = "".join(np.random.default_rng(0).choice(list("abcdefgh ij\n"), size=3000))
TOKENIZER = CharTokenizer.train(TEXT, None)  # 12 tokens
VOCAB = TOKENIZER.size
SHARD_TOKENS = 1000
TINY = ["--d-model", "16", "--n-layers", "1", "--heads", "2", "--d-ff", "32", "--seq-len", "16", "--batch-size",
        "4", "--gen", "0", "--quiet", "--backend", "cpu"]


def write_ids(directory: Path, ids: np.ndarray, dtype: str = "<u2") -> Path:
    """`ids` as a dataset's training split of `dtype` in shards of SHARD_TOKENS, with a manifest that agrees with
    every shard."""
    directory.mkdir(exist_ok=True)
    split = write_split(directory, "train", ids.astype(dtype), SHARD_TOKENS)
    return write_manifest(directory, TOKENIZER, np.dtype(dtype), {"train": split})


def good_ids() -> np.ndarray:
    return TOKENIZER.encode(TEXT).astype(np.int64)


def sparse_ids() -> np.ndarray:
    """Good ids but one, the vocabulary's size, in the third shard."""
    ids = good_ids()
    ids[2345] = VOCAB
    return ids


def train_fails(capsys, *args) -> str:
    """The one line `microgpt train` printed as it exited 2."""
    assert main(["train", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    return err


def test_ids_past_the_vocabulary_in_a_sparse_few_are_refused_naming_the_shard(tmp_path, capsys):
    data = write_ids(tmp_path / "data", sparse_ids())
    err = train_fails(capsys, str(data), *TINY, "--steps", "3", "--model", str(tmp_path / "ck"))
    assert "train-00002.bin" in err and f"token id {VOCAB}," in err and f"vocabulary of {VOCAB}" in err
    assert not (tmp_path / "ck").exists()


def test_ids_past_the_vocabulary_everywhere_are_refused(tmp_path, capsys):
    data = write_ids(tmp_path / "data", np.full(3000, 65535))
    err = train_fails(capsys, str(data), *TINY, "--steps", "3", "--model", str(tmp_path / "ck"))
    assert "train-00000.bin" in err and "token id 65535" in err


def test_a_manifest_whose_vocabulary_was_cut_short_is_refused(tmp_path, capsys):
    data = write_ids(tmp_path / "data", good_ids())
    manifest = json.loads((data / "manifest.json").read_text())
    manifest["tokenizer"]["vocab"] = manifest["tokenizer"]["vocab"][:6]
    (data / "manifest.json").write_text(json.dumps(manifest))
    err = train_fails(capsys, str(data), *TINY, "--steps", "3", "--model", str(tmp_path / "ck"))
    assert "vocabulary of 6" in err and "prepare" in err


def test_a_header_of_4_byte_tokens_over_2_byte_data_is_refused(tmp_path, capsys):
    """The header says half as many uint32 tokens in the same bytes: each pair of ids reads as one huge id."""
    data = write_ids(tmp_path / "data", good_ids())
    shard = data / "train-00001.bin"
    body = shard.read_bytes()[64:]
    shard.write_bytes(shard_header(np.dtype("<u4"), len(body) // 4) + body)
    manifest = json.loads((data / "manifest.json").read_text())
    manifest["splits"]["train"]["shards"][1].update(tokens=len(body) // 4, sha256=sha256_of(shard))
    (data / "manifest.json").write_text(json.dumps(manifest))
    err = train_fails(capsys, str(data), *TINY, "--steps", "3", "--model", str(tmp_path / "ck"))
    assert "train-00001.bin" in err and "4 bytes per token" in err and "uint16" in err


def test_a_uint32_dataset_is_still_checked_id_by_id(tmp_path):
    write_ids(tmp_path / "good", good_ids(), "<u4")
    assert len(open_dataset(tmp_path / "good").train) == len(TEXT)
    ids = good_ids()
    ids[-1] = 70000
    write_ids(tmp_path / "bad", ids, "<u4")
    with pytest.raises(DataError, match=f"train-00002.bin holds token id 70000, past the tokenizer's vocabulary of "
                                        f"{VOCAB}"):
        open_dataset(tmp_path / "bad")


def test_a_resume_onto_a_dataset_with_ids_past_the_vocabulary_is_refused(tmp_path, capsys):
    data = write_ids(tmp_path / "data", good_ids())
    assert main(["train", str(data), *TINY, "--steps", "3", "--model", str(tmp_path / "ck")]) == 0
    write_ids(tmp_path / "data", sparse_ids())
    capsys.readouterr()
    err = train_fails(capsys, "--resume", str(tmp_path / "ck"), "--steps", "6")
    assert "train-00002.bin" in err and f"token id {VOCAB}," in err


@pytest.mark.parametrize("backend", [NumpyBackend, CpuBackend])
@pytest.mark.parametrize("bad", [VOCAB, 70000, -1])
def test_the_embedding_and_loss_ops_refuse_an_id_outside_the_table(backend, bad):
    """Called directly with a bad id, each op raises a DataError naming it, and touches no memory outside."""
    be = backend(np.float32)
    table = np.ones((VOCAB, 8), dtype=np.float32)
    ids = be.ids(np.array([0, 3, bad, 1]))
    with pytest.raises(DataError, match=f"token id {bad} is outside the model's vocabulary of {VOCAB}"):
        be.embedding_gather(table, ids, 4, 8)
    grads = np.zeros_like(table)
    with pytest.raises(DataError, match=f"token id {bad} is outside"):
        be.embedding_scatter_add(np.ones((4, 8), dtype=np.float32), ids, grads, 4, 8)
    with pytest.raises(DataError, match=f"token id {bad} is outside"):
        be.fused_softmax_ce_grad(np.zeros((4, VOCAB), dtype=np.float32), ids)


def test_the_cuda_kernels_never_index_with_an_id_outside_the_table(emulated):
    """On the emulated device a bad id's row gathers as NaN, the scatter-add skips it, and its loss is NaN."""
    be, _ = emulated
    table = np.arange(VOCAB * 4, dtype=np.float32).reshape(VOCAB, 4)
    ids = np.array([3, VOCAB, -1, 70000], dtype=np.int32)
    got = be.to_host(be.embedding_gather(be.from_host(table), ids, 4, 4))
    assert np.array_equal(got[0], table[3]) and np.isnan(got[1:]).all()
    grads = be.from_host(np.zeros_like(table))
    be.embedding_scatter_add(be.from_host(np.ones((4, 4), dtype=np.float32)), ids, grads, 4, 4)
    want = np.zeros_like(table)
    want[3] = 1
    assert np.array_equal(be.to_host(grads), want)
    loss, _ = be.fused_softmax_ce_grad(be.from_host(np.zeros((4, VOCAB), dtype=np.float32)), ids)
    assert np.isnan(loss)
