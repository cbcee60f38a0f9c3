"""A BPE model through the commands: trained, saved with its tokenizer, resumed, sampled and scored; text the
training text lacks encodes for bpe and is one clear error for char; sampling streams whole characters."""

from __future__ import annotations

import json

import numpy as np
import pytest

from microgpt.cli import main
from microgpt.data.tokenizer import BPETokenizer, CharTokenizer
from microgpt.use.sample import generate

TEXT = "the cat sat on the mat; the dog sat on the log. naïve café, déjà vu.\n" * 30
UNSEEN = "日本語 🐍 Ωμέγα"  # characters the training text never had
TINY = ["--backend", "numpy", "--threads", "1", "--d-model", "16", "--n-layers", "1", "--seq-len", "16",
        "--batch-size", "4", "--val-tokens", "100", "--gen", "0", "--quiet"]


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "text.txt").write_text(TEXT, encoding="utf-8")
    (tmp_path / "unseen.txt").write_text((UNSEEN + " the cat. ") * 20, encoding="utf-8")
    return tmp_path


def test_a_bpe_model_trains_resumes_samples_and_scores_text_it_never_saw(workdir, capsys):
    assert main(["train", "text.txt", "--tokenizer", "bpe", "--vocab-size", "300", "--steps", "20", "--model", "b",
                 *TINY]) == 0
    config = json.loads((workdir / "b" / "config.json").read_text())
    tokenizer = BPETokenizer.from_json(config["tokenizer"])
    assert config["tokenizer"]["kind"] == "bpe" and config["model"]["vocab_size"] == tokenizer.size <= 300
    assert main(["train", "--resume", "b", "--steps", "30", "--quiet", "--gen", "0"]) == 0
    assert main(["train", "--resume", "b", "--steps", "40", "--tokenizer", "char", "--quiet"]) == 2
    assert "--tokenizer char does not match the checkpoint b, whose tokenizer is bpe" in capsys.readouterr().err
    assert main(["sample", "b", "--prompt", UNSEEN, "--tokens", "20", "--backend", "numpy"]) == 0
    assert capsys.readouterr().out.strip()  # the continuation alone: sample prints no prompt
    assert main(["eval", "b", "unseen.txt", "--json", "--backend", "numpy"]) == 0
    result = json.loads(capsys.readouterr().out)
    text = (workdir / "unseen.txt").read_text(encoding="utf-8")
    ids = tokenizer.encode(text)
    context, scored = ids[: config["model"]["seq_len"]], ids[config["model"]["seq_len"] :]
    assert result["positions"] == len(scored) and result["characters"] == tokenizer.count_characters(scored)
    # a character split between the context and the scored tokens counts once, with its first byte
    assert tokenizer.count_characters(context) + result["characters"] == len(text)
    assert result["bits_per_char"] == pytest.approx(
        result["nll"] * result["positions"] / result["characters"] / np.log(2), rel=1e-12)


def test_a_char_model_names_the_character_it_never_saw(workdir, capsys):
    assert main(["train", "text.txt", "--steps", "5", "--model", "c", *TINY]) == 0
    assert main(["sample", "c", "--prompt", UNSEEN, "--backend", "numpy"]) == 2
    assert "the prompt has the character '日' (U+65E5) at offset 0" in capsys.readouterr().err
    assert main(["eval", "c", "unseen.txt", "--backend", "numpy"]) == 2
    assert "unseen.txt has the character '日' (U+65E5)" in capsys.readouterr().err


def test_vocab_size_goes_with_bpe_only(workdir, capsys):
    assert main(["train", "text.txt", "--vocab-size", "300", "--steps", "5", "--no-save", *TINY]) == 2
    assert ("--vocab-size 300 does nothing here: the char tokenizer takes no vocabulary size; add --tokenizer bpe"
            in capsys.readouterr().err)
    with pytest.raises(SystemExit):
        main(["train", "text.txt", "--tokenizer", "bpe", "--vocab-size", "256", "--no-save", *TINY])
    assert "--vocab-size: must be a whole number from 257 to 2147483647, got '256'" in capsys.readouterr().err


class Scripted:
    """A model whose next token is always the next id of a script (one-hot logits), to drive `generate`."""

    def __init__(self, script: list[int], vocab: int):
        from microgpt.backends import get_backend

        self.script, self.vocab, self.be = script, vocab, get_backend("numpy")
        self.config = type("Config", (), {"seq_len": 8})()

    def decoder(self):
        model = self

        class Decoder:
            consumed = 0

            def __init__(self):
                self.model = model

            def prefill(self, ids):
                self.consumed = len(ids)
                return self._next()

            def step(self, token_id):
                self.consumed += 1
                return self._next()

            def _next(self):
                made = self.consumed - 1  # tokens made so far (the prompt is one token)
                logits = np.zeros((1, model.vocab))  # (1, vocab)
                logits[0, model.script[made]] = 1.0
                return logits

        return Decoder()


def test_sampling_streams_whole_characters_when_a_token_ends_inside_one():
    bpe = BPETokenizer.train("plain ascii text only\n" * 50, 300)
    wanted = "é🐍 ok"
    script = [int(i) for i in bpe.encode(wanted)]
    # the unseen characters are single-byte tokens, so "é" and "🐍" each span tokens that end inside them
    assert len(script) > len(wanted)
    pieces: list[str] = []
    text = generate(Scripted(script, bpe.size), bpe, "\n", len(script), temperature=0, on_text=pieces.append)
    assert text == "".join(pieces) == wanted
    assert pieces[:2] == ["é", "🐍"] and "\ufffd" not in text  # each multi-byte character came out whole


def test_the_char_decoder_is_one_character_per_token():
    char = CharTokenizer("abc")
    pieces: list[str] = []
    assert generate(Scripted([2, 0, 1], 3), char, "a", 3, temperature=0, on_text=pieces.append) == "cab"
    assert pieces == ["c", "a", "b"]


def test_a_bpe_run_short_of_its_vocabulary_resumes_with_the_same_command(workdir, capsys):
    flags = ["text.txt", "--tokenizer", "bpe", "--vocab-size", "5000", "--model", "b", *TINY]
    assert main(["train", *flags, "--steps", "5"]) == 0
    size = json.loads((workdir / "b" / "config.json").read_text())["model"]["vocab_size"]
    assert size < 5000 and f"its bpe tokenizer has {size} tokens, not the 5000 asked for" in capsys.readouterr().out
    assert main(["train", *flags, "--steps", "8", "--resume", "b"]) == 0  # what it asked for still agrees
    assert main(["train", *flags[:4], "4000", *flags[5:], "--steps", "9", "--resume", "b"]) == 2
    assert "--vocab-size 4000 does not match the checkpoint b" in capsys.readouterr().err


def test_bits_per_character_of_tokens_that_start_no_character_is_said_plainly(workdir, capsys):
    assert main(["train", "text.txt", "--tokenizer", "bpe", "--vocab-size", "300", "--steps", "2", "--model", "b",
                 *TINY]) == 0
    (workdir / "cjk.txt").write_text("a" * 15 + "日本語", encoding="utf-8")  # the first scored tokens: inside 日
    capsys.readouterr()
    assert main(["eval", "b", "cjk.txt", "--max-positions", "1", "--json", "--backend", "numpy"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["characters"] == 0 and result["bits_per_char"] is None
    assert main(["eval", "b", "cjk.txt", "--max-positions", "1", "--backend", "numpy"]) == 0
    assert "bits per char:   none: the scored tokens start no character" in capsys.readouterr().out


def test_compare_says_when_the_text_runs_out_of_merges(workdir, capsys):
    flags = ["--backend", "numpy", "--threads", "1", "--seq-len", "16", "--batch-size", "4", "--val-tokens", "100"]
    assert main(["train", "text.txt", "--tokenizer", "bpe", "--vocab-size", "5000", "--compare", "d8n1,d4x2n1",
                 *flags, "--steps", "2", "--no-save"]) == 0
    assert "not the 5000 asked for (--vocab-size)" in capsys.readouterr().out
