"""`microgpt eval MODEL --prompts FILE`: each prompt completed greedily up to a newline and held to its answer, for
a char and a bpe model trained through the CLI; the prompt file's bad lines and the flag mix-ups are one line."""

from __future__ import annotations

import json

import pytest

import microgpt
from microgpt.cli import main
from microgpt.use.loaded import LoadedModel
from microgpt.use.prompts import read_prompts

TEXT = "".join(f"{x} + {y} = {x + y}\n" for x in range(12) for y in range(12))
PROMPTS = ["3 + 4 =", "11 + 9 =", "0 + 0 =", "7 + 1"]
TINY = ["--backend", "numpy", "--threads", "1", "--d-model", "16", "--n-layers", "1", "--seq-len", "16",
        "--batch-size", "4", "--val-tokens", "100", "--gen", "0", "--quiet", "--steps", "30"]
TOKENIZERS = {"char": [], "bpe": ["--tokenizer", "bpe", "--vocab-size", "280"]}


@pytest.fixture(scope="module", params=sorted(TOKENIZERS))
def model_dir(request, tmp_path_factory):
    where = tmp_path_factory.mktemp(request.param)
    (where / "text.txt").write_text(TEXT, encoding="utf-8")
    assert main(["train", str(where / "text.txt"), "--model", str(where / "m"), *TINY,
                 *TOKENIZERS[request.param]]) == 0
    return where / "m"


def greedy_line(directory, prompt: str) -> str:
    """What the model greedily writes after `prompt` (as written, nothing before it), up to its first newline:
    sampled here without a stop."""
    model = microgpt.load(directory, backend="numpy")
    return model.sample(model.seq_len, prompt=prompt, temperature=0).split("\n")[0]


def test_completions_are_held_to_the_answers(model_dir, tmp_path, capsys):
    expected = [greedy_line(model_dir, p) for p in PROMPTS]
    answers = [f"  {expected[0].strip()} ", expected[1].strip() + "0", expected[2].strip(), "not " + expected[3]]
    lines = [f"{p}\t{a}" for p, a in zip(PROMPTS, answers)]
    prompts = tmp_path / "prompts.tsv"
    prompts.write_text(f"{lines[0]}\n\n{lines[1]}\r\n  \n{lines[2]}\n{lines[3]}", encoding="utf-8")

    assert main(["eval", str(model_dir), "--prompts", str(prompts), "--json", "--backend", "numpy"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["correct"], result["total"], result["accuracy"]) == (2, 4, 0.5)
    assert result["results"] == [
        {"line": line, "prompt": p, "answer": a, "completion": c, "correct": right}
        for line, p, a, c, right in zip([1, 3, 5, 6], PROMPTS, answers, expected, [True, False, True, False])]

    assert main(["eval", str(model_dir), "--prompts", str(prompts), "--backend", "numpy"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1:] == [
        f"  right  {PROMPTS[0]!r} -> {expected[0]!r}",
        f"  wrong  {PROMPTS[1]!r} -> {expected[1]!r} (the answer: {answers[1].strip()!r})",
        f"  right  {PROMPTS[2]!r} -> {expected[2]!r}",
        f"  wrong  {PROMPTS[3]!r} -> {expected[3]!r} (the answer: {answers[3].strip()!r})",
        "2 of 4 correct"]


def test_a_prompt_is_completed_as_written(model_dir, tmp_path, monkeypatch, capsys):
    asked = []
    monkeypatch.setattr(LoadedModel, "complete", lambda self, text: asked.append(text) or "")
    prompts = tmp_path / "prompts.tsv"
    prompts.write_text("0 + 0 =\t0\n 1\t1\n", encoding="utf-8")
    assert main(["eval", str(model_dir), "--prompts", str(prompts), "--backend", "numpy"]) == 0
    assert asked == ["0 + 0 =", " 1"]  # nothing put before it (issue 32: no newline papering over a prior)
    assert capsys.readouterr().out.endswith("0 of 2 correct\n")


def test_a_prompt_spells_a_newline_a_tab_and_a_backslash_with_escapes(tmp_path):
    prompts = tmp_path / "prompts.tsv"
    prompts.write_text("\\n3 + 4 =\t7\n1\\t2\t0\na\\\\nb\t0\n\\d\\\t0\n", encoding="utf-8")
    # \n and \t are a newline and a tab, \\ one backslash (so \\n is a backslash and an n), any other backslash itself
    assert [p.prompt for p in read_prompts(prompts, 1 << 20)] == ["\n3 + 4 =", "1\t2", "a\\nb", "\\d\\"]
    prompts.write_text("x\ta\\tb\\\\c\n", encoding="utf-8")
    assert [(p.prompt, p.answer) for p in read_prompts(prompts, 1 << 20)] == [("x", "a\tb\\c")]  # answers alike


def test_a_prompt_that_starts_a_line_is_given_its_newline(model_dir, tmp_path, monkeypatch, capsys):
    asked = []
    monkeypatch.setattr(LoadedModel, "complete", lambda self, text: asked.append(text) or "")
    prompts = tmp_path / "prompts.tsv"
    prompts.write_text("\\n3 + 4 =\t7\n", encoding="utf-8")
    assert main(["eval", str(model_dir), "--prompts", str(prompts), "--backend", "numpy"]) == 0
    assert asked == ["\n3 + 4 ="]
    assert capsys.readouterr().out.endswith("0 of 1 correct\n")


def test_without_a_newline_a_completion_is_seq_len_tokens_or_max_tokens(model_dir):
    model = microgpt.load(model_dir, backend="numpy")
    assert model.complete("5 + 5 =", stop="") == model.sample(model.seq_len, prompt="5 + 5 =", temperature=0)
    assert model.complete("5 + 5 =", stop="", max_tokens=3) == model.sample(3, prompt="5 + 5 =", temperature=0)


def run_eval(*args: str, capsys) -> list[str]:
    """The error lines of an eval that must fail with exit status 2."""
    assert main(["eval", *args, "--backend", "numpy"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "Traceback" not in captured.err
    return captured.err.strip().splitlines()


def test_a_line_without_a_tab_names_the_file_and_the_line(model_dir, tmp_path, capsys):
    prompts = tmp_path / "prompts.tsv"
    prompts.write_text("1 + 1 =\t2\n\n1 + 2 = 3\n", encoding="utf-8")
    assert run_eval(str(model_dir), "--prompts", str(prompts), capsys=capsys) == [
        f"microgpt eval: error: {prompts} line 3 has no tab; give lines of prompt<TAB>answer"]
    prompts.write_text("\t2\n", encoding="utf-8")
    assert run_eval(str(model_dir), "--prompts", str(prompts), capsys=capsys) == [
        f"microgpt eval: error: {prompts} line 1 has nothing before its tab; give lines of prompt<TAB>answer"]
    prompts.write_text("\n \n", encoding="utf-8")
    assert run_eval(str(model_dir), "--prompts", str(prompts), capsys=capsys) == [
        f"microgpt eval: error: {prompts} has only blank lines; give lines of prompt<TAB>answer"]
    prompts.write_text("", encoding="utf-8")
    assert run_eval(str(model_dir), "--prompts", str(prompts), capsys=capsys) == [
        f"microgpt eval: error: {prompts} is empty; give lines of prompt<TAB>answer"]


def test_a_file_or_prompts_but_not_both_and_no_scoring_flags_with_prompts(model_dir, tmp_path, capsys):
    prompts = tmp_path / "prompts.tsv"
    prompts.write_text("1 + 1 =\t2\n", encoding="utf-8")
    assert run_eval(str(model_dir), capsys=capsys) == [
        "microgpt eval: error: give a FILE to score, or --prompts FILE of prompt<TAB>answer lines to answer"]
    assert run_eval(str(model_dir), str(prompts), "--prompts", str(prompts), capsys=capsys) == [
        "microgpt eval: error: give a FILE to score or --prompts FILE to answer, not both"]
    for flag in ("--stride", "--max-positions", "--batch-size"):
        assert run_eval(str(model_dir), "--prompts", str(prompts), flag, "2", capsys=capsys) == [
            f"microgpt eval: error: {flag} is for scoring a FILE, not for --prompts; drop it"]


def test_a_char_model_names_a_prompt_character_it_never_saw_and_a_bpe_model_encodes_it(model_dir, tmp_path, capsys):
    prompts = tmp_path / "prompts.tsv"
    prompts.write_text("1 + 1 =\t2\n2 * 3 =\t6\n", encoding="utf-8")
    if json.loads((model_dir / "config.json").read_text())["tokenizer"]["kind"] == "bpe":
        assert main(["eval", str(model_dir), "--prompts", str(prompts), "--backend", "numpy"]) == 0
        assert capsys.readouterr().out.endswith(" of 2 correct\n")
        return
    assert run_eval(str(model_dir), "--prompts", str(prompts), capsys=capsys) == [(
        f"microgpt eval: error: the prompt on line 2 of {prompts} has the character '*' (U+002A) at offset 2 "
        "(line 1), which is not in the model's vocabulary")]
