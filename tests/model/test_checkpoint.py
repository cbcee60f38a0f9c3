"""Checkpoints: bit-exact round trips, atomic replacement, and clear errors for damaged or foreign files."""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest

from microgpt.backends import get_backend
from microgpt.data.tokenizer import CharTokenizer
from microgpt.model.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from microgpt.model.gpt import GPT, GPTConfig
from tiny_gpt import VOCAB, tiny_model


def trained(model, steps=3):
    windows = np.random.default_rng(0).integers(0, len(VOCAB), (2, model.config.seq_len + 1))
    for _ in range(steps):
        model.train_step(windows, 1e-2)
    return model


def test_round_trip_is_bit_exact_for_weights_and_optimizer_state(tmp_path):
    model = trained(tiny_model())
    save_checkpoint(tmp_path / "ck", model, CharTokenizer(VOCAB), {"note": "x"}, family_name="gpt")
    loaded, tokenizer, info = load_checkpoint(tmp_path / "ck", get_backend("numpy"), with_optimizer=True)
    assert tokenizer.vocab == VOCAB and info["train_state"]["note"] == "x"
    assert loaded.config == model.config
    assert np.array_equal(loaded.params.storage[[0, 2, 3]], model.params.storage[[0, 2, 3]])  # data, m, v
    assert loaded.params.step == model.params.step == 3


def test_weights_only_load_leaves_optimizer_fresh_and_keeps_the_step(tmp_path):
    model = trained(tiny_model())
    save_checkpoint(tmp_path / "ck", model, CharTokenizer(VOCAB), {}, family_name="gpt")
    loaded, _, info = load_checkpoint(tmp_path / "ck", get_backend("numpy"))
    assert "train_state" not in info and not np.any(loaded.params.m)
    assert loaded.params.step == model.params.step > 0  # the weights as they were after that many steps


def test_tensor_names_and_shapes_follow_the_documented_format(tmp_path):
    from safetensors.numpy import load_file

    save_checkpoint(tmp_path / "ck", tiny_model(), CharTokenizer(VOCAB), family_name="gpt")
    tensors = load_file(tmp_path / "ck" / "model.safetensors")
    assert tensors["tok_emb"].shape == (len(VOCAB), 8)
    assert tensors["blocks.1.attn.wq.w"].shape == (8, 8) and tensors["blocks.1.attn.wo.b"].shape == (8,)
    assert tensors["blocks.0.ff.l1.w"].shape == (8, 12) and tensors["blocks.0.ff.l2.w"].shape == (12, 8)
    assert tensors["final_norm.gamma"].shape == (8,) and tensors["head.w"].shape == (8, len(VOCAB))
    assert all(t.dtype == np.float32 for t in tensors.values())
    config = json.loads((tmp_path / "ck" / "config.json").read_text())
    assert config["format_version"] == 2 and config["family"] == "gpt" and config["model"]["head_dims"] == [3, 5]
    assert config["tokenizer"] == {"kind": "char", "vocab": VOCAB}


def test_saving_over_a_checkpoint_replaces_it_whole(tmp_path):
    save_checkpoint(tmp_path / "ck", tiny_model(seed=1), CharTokenizer(VOCAB), family_name="gpt")
    second = tiny_model(seed=2)
    save_checkpoint(tmp_path / "ck", second, CharTokenizer(VOCAB), family_name="gpt")
    loaded, _, _ = load_checkpoint(tmp_path / "ck", get_backend("numpy"))
    assert np.array_equal(loaded.params.data, second.params.data)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"]  # no .tmp or .prev left behind


def test_interrupted_swap_falls_back_to_the_previous_checkpoint(tmp_path):
    model = tiny_model()
    save_checkpoint(tmp_path / "ck", model, CharTokenizer(VOCAB), family_name="gpt")
    os.rename(tmp_path / "ck", tmp_path / "ck.prev")  # what a kill between the two renames leaves
    loaded, _, _ = load_checkpoint(tmp_path / "ck", get_backend("numpy"))
    assert np.array_equal(loaded.params.data, model.params.data)


def test_truncated_weights_are_a_clear_error(tmp_path):
    save_checkpoint(tmp_path / "ck", tiny_model(), CharTokenizer(VOCAB), family_name="gpt")
    weights = tmp_path / "ck" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    with pytest.raises(CheckpointError, match="truncated or not a checkpoint"):
        load_checkpoint(tmp_path / "ck", get_backend("numpy"))


@pytest.mark.parametrize("case", ["missing", "file", "no_config", "foreign_json", "future_version", "no_weights"])
def test_missing_or_foreign_checkpoints_are_clear_errors(tmp_path, case):
    target = tmp_path / "ck"
    if case == "file":
        target.write_text("not a checkpoint")
    elif case != "missing":
        save_checkpoint(target, tiny_model(), CharTokenizer(VOCAB), family_name="gpt")
        config = target / "config.json"
        if case == "no_config":
            config.unlink()
        elif case == "foreign_json":
            config.write_text(json.dumps({"model_type": "bert"}))
        elif case == "future_version":
            config.write_text(json.dumps({**json.loads(config.read_text()), "format_version": 99}))
        elif case == "no_weights":
            (target / "model.safetensors").unlink()
    expected = {"missing": "no such checkpoint", "file": "is a file", "no_config": "config.json is missing",
                "foreign_json": "no format_version", "future_version": "format 99",
                "no_weights": "model.safetensors is missing"}[case]
    with pytest.raises(CheckpointError, match=expected):
        load_checkpoint(target, get_backend("numpy"))


def test_weights_that_do_not_match_the_config_are_a_clear_error(tmp_path):
    save_checkpoint(tmp_path / "ck", tiny_model(), CharTokenizer(VOCAB), family_name="gpt")
    config = tmp_path / "ck" / "config.json"
    saved = json.loads(config.read_text())
    config.write_text(json.dumps({**saved, "model": {**saved["model"], "d_ff": 20}}))
    with pytest.raises(CheckpointError, match=r"model.safetensors: blocks.0.ff.l1.w has shape \(8, 12\), the config "
                       r"needs \(8, 20\); the checkpoint is damaged"):
        load_checkpoint(tmp_path / "ck", get_backend("numpy"))
    config.write_text(json.dumps({**saved, "model": {**saved["model"], "n_layers": 1}}))
    with pytest.raises(CheckpointError, match="has tensors this model does not have, e.g. 'blocks.1.attn.wk.b'"):
        load_checkpoint(tmp_path / "ck", get_backend("numpy"))


def test_a_save_between_the_files_a_reader_reads_makes_it_read_them_again(tmp_path, monkeypatch):
    """A reader must get one checkpoint, not the weights of one save and the training state of the next."""
    from microgpt.model import checkpoint

    backend = get_backend("numpy")
    old, new = (GPT(GPTConfig(vocab_size=4, d_model=8, n_layers=1, head_dims=(4, 4), d_ff=8, seq_len=4), backend,
                    seed=seed) for seed in (1, 2))
    new.params.step = 9
    save_checkpoint(tmp_path / "ck", old, CharTokenizer("abcd"), {"step": 3, "data": {"kind": "random"}}, family_name="gpt")
    real_read_json = checkpoint._read_json
    swapped = []

    def read_json_after_a_save(path):
        if path.name == "train_state.json" and not swapped:  # the weights are read: now saves swap DIR
            swapped.append(True)
            # two saves, so the directory at the path may well be on the inode it had (ext4 reuses a freed one)
            save_checkpoint(tmp_path / "ck", old, CharTokenizer("abcd"), {"step": 5, "data": {"kind": "random"}}, family_name="gpt")
            save_checkpoint(tmp_path / "ck", new, CharTokenizer("abcd"), {"step": 9, "data": {"kind": "random"}}, family_name="gpt")
        return real_read_json(path)

    monkeypatch.setattr(checkpoint, "_read_json", read_json_after_a_save)
    model, _, info = load_checkpoint(tmp_path / "ck", backend, with_optimizer=True)
    assert swapped and info["train_state"]["step"] == 9
    assert np.array_equal(model.params.to_host()["tok_emb"], new.params.to_host()["tok_emb"])


def test_a_save_never_touches_another_checkpoints_set_aside_copy(tmp_path):
    """`.X.prev-1.prev-999-0` is what a killed save of checkpoint `X.prev-1` leaves: not X's to clean up."""
    backend = get_backend("numpy")
    model = GPT(GPTConfig(vocab_size=4, d_model=8, n_layers=1, head_dims=(4, 4), d_ff=8, seq_len=4), backend)
    model.params.step = 1  # a checkpoint's step is its model's Adam step count
    save_checkpoint(tmp_path / "X.prev-1", model, CharTokenizer("abcd"), {"step": 1, "data": {"kind": "random"}}, family_name="gpt")
    os.rename(tmp_path / "X.prev-1", tmp_path / ".X.prev-1.prev-999-0")  # killed between its two renames
    for _ in range(2):
        save_checkpoint(tmp_path / "X", model, CharTokenizer("abcd"), {"step": 2, "data": {"kind": "random"}}, family_name="gpt")
    assert (tmp_path / ".X.prev-1.prev-999-0" / "model.safetensors").is_file()
    info = load_checkpoint(tmp_path / "X.prev-1", backend, with_optimizer=True)[2]  # its own fallback finds it
    assert info["train_state"]["step"] == 1


def test_a_checkpoint_from_before_the_single_step_counter_still_resumes(tmp_path):
    """Older train_state.json files hold both `step` and `adam_step`; new ones hold `step` alone."""
    backend = get_backend("numpy")
    model = GPT(GPTConfig(vocab_size=4, d_model=8, n_layers=1, head_dims=(4, 4), d_ff=8, seq_len=4), backend)
    model.params.step = 7
    save_checkpoint(tmp_path / "ck", model, CharTokenizer("abcd"), {"step": 7, "data": {"kind": "random"}}, family_name="gpt")
    state_path = tmp_path / "ck" / "train_state.json"
    state = json.loads(state_path.read_text())
    assert state["step"] == 7 and "adam_step" not in state
    state_path.write_text(json.dumps(state | {"adam_step": 7}))  # as microgpt wrote it before: both counters
    assert load_checkpoint(tmp_path / "ck", backend, with_optimizer=True)[0].params.step == 7
    only_adam = {key: value for key, value in state.items() if key != "step"} | {"adam_step": 7}
    state_path.write_text(json.dumps(only_adam))  # and the loader reads adam_step where step is missing
    assert load_checkpoint(tmp_path / "ck", backend, with_optimizer=True)[0].params.step == 7


@pytest.mark.parametrize("edit, expected", [
    (lambda c: {**c, "family": "nope"}, "unknown model family 'nope'; the families are: gpt"),
    (lambda c: {**c, "model": {k: v for k, v in c["model"].items() if k != "d_ff"}}, "has no d_ff"),
    (lambda c: {**c, "model": {**c["model"], "dropout": 0.1}}, "'dropout', which a gpt model does not have"),
    (lambda c: {**c, "model": {**c["model"], "d_model": "8"}}, "does not describe a gpt model"),
    (lambda c: {**c, "model": {**c["model"], "head_dims": [3, 6]}}, "does not describe a gpt model"),
    (lambda c: {**c, "model": {**c["model"], "vocab_size": 99}}, "vocab_size is 99, but its tokenizer has"),
    (lambda c: {**c, "tokenizer": {"kind": "words"}}, "the tokenizer cannot be read"),
    (lambda c: {**c, "tokenizer": {"kind": "char", "vocab": "aab"}}, "the tokenizer cannot be read"),
    (lambda c: {**c, "model": [8, 2]}, "has no model"),
    (lambda c: {**c, "tokenizer": {"kind": ["char"]}}, "the tokenizer cannot be read"),
    (lambda c: {**c, "model": {**c["model"], "head_dims": None}}, "head_dims is None, which reads as [2, 2, 2, 2]"),
    (lambda c: {k: v for k, v in c.items() if k != "tokenizer"}, "has no tokenizer"),
])
def test_a_format_2_config_that_is_wrong_is_one_clear_line(tmp_path, edit, expected):
    # tiny_model's heads are (3, 5); a null head_dims must not quietly read as four equal heads
    save_checkpoint(tmp_path / "ck", tiny_model(), CharTokenizer(VOCAB), family_name="gpt")
    config = tmp_path / "ck" / "config.json"
    config.write_text(json.dumps(edit(json.loads(config.read_text()))))
    with pytest.raises(CheckpointError, match=re.escape(expected)):
        load_checkpoint(tmp_path / "ck", get_backend("numpy"))


def test_a_hand_edited_save_id_of_another_type_reads_as_a_hand_edit(tmp_path):
    save_checkpoint(tmp_path / "ck", tiny_model(), CharTokenizer(VOCAB), family_name="gpt")
    config = tmp_path / "ck" / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "save_id": [1]}))
    assert load_checkpoint(tmp_path / "ck", get_backend("numpy"))[1].vocab == VOCAB  # the same mix twice: taken
