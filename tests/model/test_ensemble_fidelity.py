"""The ensemble as the original µGPT has it (issue 32): an expert spec without a head count read as max(1,
d/16) heads of 16; the prior's projection at He init with a bias; the calculator reading a sum back from its
`=`, wherever the sum starts, and exact on prompts with and without a newline and in a window that starts
inside a line; one numbering (the prior is expert 0, the transformer experts 1 to n); and a checkpoint saved
before all this, with one-head experts and no bias, loading as it was trained."""

from __future__ import annotations

import json

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import microgpt
from microgpt.backends import get_backend
from microgpt.cli import main
from microgpt.data.tokenizer import CharTokenizer
from microgpt.model.family import family
from microgpt.model.priors import calculator_features, calculator_rows, check_calculator_tokenizer
from microgpt.model.specs import parse_spec
from microgpt.training.plot import renumbered
from microgpt.use.loaded import load

TOKENIZER = CharTokenizer("0123456789+= \nab")


@pytest.mark.parametrize(("text", "heads"), [("d64n3", (16, 16, 16, 16)), ("d32n1", (16, 16)), ("d8n1", (8,)),
                                              ("d40n1", (20, 20)), ("d50n1", (17, 17, 16)), ("d1x64n1", (64,)),
                                              ("d2x8n1", (8, 8)), ("d16+48n1", (16, 48))])
def test_an_expert_spec_without_a_head_count_reads_as_the_originals(text, heads):
    assert parse_spec(text, expert=True).head_dims == heads
    config = family("ensemble").Config(vocab_size=5, cooperative=text)
    assert config.experts[0].head_dims == heads
    assert parse_spec(config.cooperative, expert=True).head_dims == parse_spec(config.cooperative).head_dims == heads
    assert parse_spec("d64n3").head_dims == (64,)  # a gpt spec keeps its reading: one head of 64


def test_the_cooperative_help_says_how_a_width_alone_reads():
    from microgpt.core.fields import settings_fields

    help_text = next(f.help for f in settings_fields(family("ensemble").Config) if f.field == "cooperative")
    assert "max(1, width/16) heads of 16" in help_text and "d1x64" in help_text


def test_the_priors_projection_starts_as_the_originals_with_a_bias():
    kind = family("ensemble")
    for prior in ("bigram", "trigram", "calculator"):
        config = kind.Config(vocab_size=TOKENIZER.size, cooperative="d8n1", stream_dim=64, prior=prior)
        model = kind.build(config, get_backend("numpy", dtype=np.float64), TOKENIZER, 0)
        weights = model.params.to_host()
        # 16 x 64 = 1,024 draws of N(0, 2/16): their std is within 10% of sqrt(2/V) with overwhelming odds
        assert np.std(weights["prior.proj.w"]) == pytest.approx(np.sqrt(2 / TOKENIZER.size), rel=0.1)
        assert weights["prior.proj.b"].shape == (64,) and not weights["prior.proj.b"].any()


def test_the_calculator_reads_a_sum_back_from_its_equals_sign():
    for text in ("12 + 34 = 46\n", "\n12 + 34 = 46\n", "ab 12 + 34 = 46\n", "5 = 9\n12 + 34 = 46\n"):
        features = calculator_features(text)
        equals = text.rindex("=")
        assert "".join(features[equals : equals + 5]) == " 46\n"  # the space, the digits, the newline
        assert not any(features[:equals])
    assert "".join(calculator_features("2 + 34 = 4")) == " 3"  # a window inside "12": X read as the window has it
    assert calculator_features("12 + 34 = 47")[8:] == [" ", "4", "6", ""]  # a wrong digit: no opinion after it
    assert calculator_features("12 + 34 =46")[8:] == [" ", "", ""]  # no space after "=": the answer disagrees
    assert not any(calculator_features("a + 3 = ")) and not any(calculator_features("12 + = 3"))


def completion_of(text: str) -> str:
    """The calculator alone, greedily: its one-hot character after `text`, until it has no opinion."""
    ids_of = check_calculator_tokenizer(TOKENIZER)
    made = ""
    while len(made) < 10:
        ids = np.array(TOKENIZER.encode(text + made))[None, :]  # (1, n)
        features = calculator_rows(ids, ids_of, TOKENIZER.size, np.float64)[-1]  # (V,)
        if features.max() < 1:
            break
        made += TOKENIZER.decode([int(features.argmax())])
    return made


@pytest.mark.parametrize("prompt", ["12 + 34 =", "\n12 + 34 =", "99 + 99 =", "\n0 + 0 =", "345 + 67 =",
                                    "7 + 5 = 12\n63 + 28 =", "+ 5 = 12\n63 + 28 =", "2\n999 + 1 ="])
def test_the_calculator_is_exact_on_prompts_with_and_without_a_newline_and_inside_a_line(prompt):
    x, y = (int(part) for part in prompt.split("\n")[-1].removesuffix(" =").split(" + "))
    assert completion_of(prompt) == f" {x + y}\n"


def test_eval_prompts_gives_the_prompt_as_written(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.txt").write_text("".join(f"{x} + {y} = {x + y}\n" for x in range(20) for y in range(20)))
    (tmp_path / "p.tsv").write_text("12 + 3 =\t15\n", encoding="utf-8")
    assert main(["train", "t.txt", "--cooperative", "d8n1", "--stream-dim", "8", "--seq-len", "16", "--steps", "2",
                 "--backend", "numpy", "--quiet", "--gen", "0", "--val-tokens", "0", "--model", "m"]) == 0
    loaded = load(tmp_path / "m", backend="numpy")
    capsys.readouterr()
    assert main(["eval", "m", "--prompts", "p.tsv", "--json", "--backend", "numpy"]) == 0
    result = json.loads(capsys.readouterr().out)["results"][0]
    assert result["completion"] == loaded.complete("12 + 3 =")  # no newline put before it


def test_the_metrics_number_the_prior_0_and_an_old_log_reads_so():
    old = {"step": 3, "loss": 2.0, "expert0_write_norm": 1.0, "expert0_router_weight": 0.4,
           "expert1_router_weight": 0.6, "prior_final_cos": 0.2}
    assert renumbered(old) == {"step": 3, "loss": 2.0, "expert1_write_norm": 1.0, "expert1_router_weight": 0.4,
                               "expert2_router_weight": 0.6, "expert0_final_cos": 0.2}
    new = {"step": 3, "loss": 2.0, "expert0_write_norm": 1.0, "expert1_router_weight": 1.0}
    assert renumbered(new) == new


def test_a_checkpoint_saved_before_keeps_its_one_head_experts_and_its_biasless_projection(tmp_path, monkeypatch):
    """Rewritten as the microgpt before issue 32 saved it: `d32n1` for one head of 32, no prior_bias, no
    prior.proj.b, no expert_init. It loads as that model: its logits are those of the same weights in a model
    built with one head of 32 and no bias (float32 both, the same arithmetic: equal to the last bit), its
    experts' init He's, the only one there was."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.txt").write_text("".join(f"{x} + {y} = {x + y}\n" for x in range(20) for y in range(20)))
    assert main(["train", "t.txt", "--cooperative", "d1x32n1,d8n1", "--stream-dim", "8", "--seq-len", "16",
                 "--prior", "calculator", "--steps", "2", "--backend", "numpy", "--quiet", "--gen", "0",
                 "--val-tokens", "0", "--model", "m"]) == 0
    config_path, weights_path = tmp_path / "m" / "config.json", tmp_path / "m" / "model.safetensors"
    config = json.loads(config_path.read_text())
    assert config["model"]["cooperative"] == "d1x32n1,d8n1" and config["model"]["prior_bias"] is True
    config["model"]["cooperative"] = "d32n1,d8n1"  # the old writing of one head of 32
    del config["model"]["prior_bias"], config["model"]["expert_init"]
    config_path.write_text(json.dumps(config))
    weights = load_file(str(weights_path))
    del weights["prior.proj.b"]
    save_file(weights, str(weights_path), metadata={"format": "microgpt", "format_version": "2",
                                                    "save_id": config["save_id"]})
    (tmp_path / "m" / "optimizer.safetensors").unlink()
    (tmp_path / "m" / "train_state.json").unlink()
    loaded = load(tmp_path / "m", backend="numpy")
    assert loaded.model.config.experts[0].head_dims == (32,) and not loaded.model.config.prior_bias
    assert loaded.model.config.cooperative == "d1x32n1,d8n1" and "prior.proj.b" not in loaded.model.params.specs
    assert loaded.model.config.expert_init == "he"
    kind = family("ensemble")
    same = kind.build(kind.Config(vocab_size=loaded.tokenizer.size, cooperative="d1x32n1,d8n1", stream_dim=8,
                                  seq_len=16, prior="calculator", prior_bias=False, expert_init="he"),
                      get_backend("numpy"), loaded.tokenizer, 0)
    same.params.from_host(weights)
    ids = np.array([loaded.tokenizer.encode("12 + 3 = 15\n4 + ")])
    np.testing.assert_array_equal(loaded.model.be.to_host(loaded.model.logits(ids)), same.be.to_host(same.logits(ids)))
    assert "without a bias" in kind.describe(loaded.model.config)


def test_a_run_saved_before_torchs_init_was_the_default_resumes_at_hes(tmp_path):
    """A config.json without expert_init (saved when He's was the only init) resumes as He's model, not at the
    default's: config.json keeps saying so, and the losses are those of the same run never interrupted."""
    text = tmp_path / "t.txt"
    text.write_text("the cat sat on the mat\n" * 60, encoding="utf-8")
    shape = {"cooperative": "d8n1,d8n1", "stream_dim": 4, "seq_len": 16, "batch_size": 2, "backend": "numpy",
             "threads": 1, "gen": 0, "val_tokens": 0, "preset": "reference"}  # no schedule: 3 steps of 6 are 3
    _, whole = microgpt.train(text, steps=6, model=str(tmp_path / "whole"), expert_init="he", **shape)
    microgpt.train(text, steps=3, model=str(tmp_path / "cut"), expert_init="he", **shape)
    config_path = tmp_path / "cut" / "config.json"
    config = json.loads(config_path.read_text())
    del config["model"]["expert_init"]
    config_path.write_text(json.dumps(config))
    _, resumed = microgpt.train(text, resume=str(tmp_path / "cut"), steps=6, backend="numpy", threads=1, gen=0,
                                preset="reference")
    assert json.loads(config_path.read_text())["model"]["expert_init"] == "he"
    assert resumed.losses == whole.losses[3:]
