"""Sampling: greedy and seeded determinism, top-k and top-p, the KV cache against full forwards, the CLI."""

from __future__ import annotations

import numpy as np
import pytest

from microgpt.backends import get_backend
from microgpt.cli import main
from microgpt.core.errors import ConfigError, DataError
from microgpt.data.tokenizer import CharTokenizer
from microgpt.model.checkpoint import save_checkpoint
from microgpt.model.decode import Rerun
from microgpt.model.gpt import GPT
from microgpt.model.transformer import Decoder
from microgpt.use.choose import choose_token, token_probs
from microgpt.use.sample import generate, next_logits
from tiny_gpt import VOCAB, tiny_model

TOKENIZER = CharTokenizer(VOCAB)
LOGITS_ATOL = 1e-4  # float32: cached and full-forward logits differ only by summation order (seen: ~2e-6)


def test_greedy_ignores_the_seed_and_is_the_argmax_of_the_full_forward():
    model = tiny_model()
    text = generate(model, TOKENIZER, "ab", 10, temperature=0, seed=1)
    assert text == generate(model, TOKENIZER, "ab", 10, temperature=0, seed=2)
    context = list(TOKENIZER.encode("ab"))
    for ch in text:
        window = np.array(context[-6:], dtype=np.int32)[None, :]  # (1, T)
        assert VOCAB[int(np.argmax(model.logits(window)[-1]))] == ch
        context.append(VOCAB.index(ch))


def test_sampling_is_reproducible_with_a_seed_and_varies_without_one():
    model = tiny_model()
    first = generate(model, TOKENIZER, "a", 40, temperature=1.0, seed=7)
    assert first == generate(model, TOKENIZER, "a", 40, temperature=1.0, seed=7)
    assert first != generate(model, TOKENIZER, "a", 40, temperature=1.0, seed=8)


class Counted:
    """30 tokens sampled from a tiny model at temperature 1 with a fixed seed (`full`), then again with `stop`:
    its `text`, the tokens `made`, and for each on_text call (tokens made by then, all the text shown by then)."""

    def __init__(self, monkeypatch, stop: str):
        import microgpt.use.sample

        model = tiny_model()
        self.full = generate(model, TOKENIZER, "ab", 30, seed=4)
        self.made, self.shown = 0, []
        real = microgpt.use.sample.next_logits

        def counting(*args):
            self.made += 1
            return real(*args)

        monkeypatch.setattr(microgpt.use.sample, "next_logits", counting)
        self.text = generate(model, TOKENIZER, "ab", 30, seed=4, stop=stop(self.full), on_text=self.on_text)

    def on_text(self, piece: str) -> None:
        self.shown.append((self.made, (self.shown[-1][1] if self.shown else "") + piece))


def test_stop_ends_the_text_before_stop_and_generation_with_the_token_that_completes_it(monkeypatch):
    run = Counted(monkeypatch, lambda full: full[12:14])
    assert len(set(run.full)) > 4  # varied, so that stop comes up part-way
    first = run.full.index(run.full[12:14])
    assert run.text == run.full[:first] == run.shown[-1][1]
    assert run.made == first + 2  # none after the token that completed stop


def test_text_that_might_begin_stop_waits_and_comes_out_when_stop_does_not_follow(monkeypatch):
    run = Counted(monkeypatch, lambda full: full[0] + "\t")  # "\t" is not in the vocabulary: it never completes
    begins = run.full[0]
    assert run.full.count(begins * 2) > 0 and run.full.count(begins) > 3
    assert run.text == run.full == run.shown[-1][1] and run.made == 30
    for made, so_far in run.shown[:-1]:  # after k tokens, the first k characters, less a last one that begins stop
        assert so_far == (run.full[: made - 1] if run.full[made - 1] == begins else run.full[:made])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_top_k_1_and_a_tiny_top_p_are_greedy(seed):
    model = tiny_model()
    greedy = generate(model, TOKENIZER, "ab", 15, temperature=0)
    assert generate(model, TOKENIZER, "ab", 15, temperature=1.5, seed=seed, top_k=1) == greedy
    assert generate(model, TOKENIZER, "ab", 15, temperature=1.5, seed=seed, top_p=1e-6) == greedy


def test_top_k_and_top_p_draw_only_from_the_kept_tokens():
    logits = np.log([0.05, 0.5, 0.15, 0.3])  # ranked: 1 (0.5), 3 (0.3), 2 (0.15), 0 (0.05)
    rng = np.random.default_rng(0)

    def support(**cut):
        return {choose_token(logits, 1.0, rng, **cut) for _ in range(400)}

    assert support() == {0, 1, 2, 3}
    assert support(top_k=2) == {1, 3}
    assert support(top_k=3) == {1, 2, 3}
    assert support(top_p=0.75) == {1, 3}  # 0.5 + 0.3 reaches 0.75
    assert support(top_p=0.85) == {1, 2, 3}
    assert support(top_k=2, top_p=0.4) == {1}


@pytest.mark.parametrize(("temperature", "top_k", "top_p"), [(0, 0, 1), (0.8, 0, 1), (1, 3, 1), (1, 0, 0.7)])
def test_the_distributions_of_rows_at_once_are_each_rows(temperature, top_k, top_p):
    logits = np.random.default_rng(4).normal(0, 2, size=(5, 9)).astype(np.float32)  # (n, vocab)
    logits[2, 3] = logits[2, 5] = logits[2].max() + 1  # a tie: argmax ranks by token id
    rows = token_probs(logits, temperature, top_k, top_p)  # (n, vocab)
    np.testing.assert_array_equal(rows, [token_probs(row, temperature, top_k, top_p) for row in logits])


SHAPES = [{}, {"n_layers": 1, "head_dims": (4, 4)}, {"n_layers": 3, "head_dims": (2, 2, 4)}]


@pytest.mark.parametrize("shape", SHAPES)
def test_cached_logits_match_full_forwards_while_the_context_fits(backend_name, shape):
    model = tiny_model(backend_name, **shape)
    context = list(TOKENIZER.encode("ab"))
    decoder, rerun = Decoder(model), Rerun(model)
    while len(context) <= model.config.seq_len:
        cached = next_logits(context, decoder)
        full = next_logits(context, rerun)
        np.testing.assert_allclose(cached, full, rtol=0, atol=LOGITS_ATOL)
        context.append(int(np.argmax(full)))


def sliding_window_logits(model, ids) -> np.ndarray:
    """Logits (n, vocab) of a plain float64 forward over the whole sequence in which position i attends to
    positions i - seq_len + 1 .. i at every layer: what a sliding KV cache computes, written independently."""
    t = {k: v.astype(np.float64) for k, v in model.params.to_host().items()}
    n, window = len(ids), model.config.seq_len
    pos = np.arange(n)
    visible = (pos[None, :] <= pos[:, None]) & (pos[None, :] > pos[:, None] - window)  # (n, n)

    def norm(x, name):
        mean, var = x.mean(1, keepdims=True), x.var(1, keepdims=True)
        return (x - mean) / np.sqrt(var + 1e-5) * t[name + ".gamma"] + t[name + ".beta"]

    def rotate(x):  # rotary embedding by absolute position, pairs (2j, 2j+1)
        x, w = x.copy(), x.shape[1]
        for j in range(w // 2):
            angle = pos / 10000 ** (2 * j / w)
            a, b = x[:, 2 * j].copy(), x[:, 2 * j + 1].copy()
            x[:, 2 * j], x[:, 2 * j + 1] = a * np.cos(angle) - b * np.sin(angle), a * np.sin(angle) + b * np.cos(angle)
        return x

    x = t["tok_emb"][ids]
    for i in range(model.config.n_layers):
        p = f"blocks.{i}."
        h = norm(x, p + "ln1")
        q, k, v = (h @ t[p + f"attn.{m}.w"] + t[p + f"attn.{m}.b"] for m in ("wq", "wk", "wv"))
        heads, col = [], 0
        for w in model.config.head_dims:
            scores = rotate(q[:, col : col + w]) @ rotate(k[:, col : col + w]).T / np.sqrt(w)
            scores[~visible] = -np.inf
            probs = np.exp(scores - scores.max(1, keepdims=True))
            heads.append(probs / probs.sum(1, keepdims=True) @ v[:, col : col + w])
            col += w
        x = x + np.concatenate(heads, axis=1) @ t[p + "attn.wo.w"] + t[p + "attn.wo.b"]
        h = norm(x, p + "ln2")
        x = x + np.maximum(h @ t[p + "ff.l1.w"] + t[p + "ff.l1.b"], 0) @ t[p + "ff.l2.w"] + t[p + "ff.l2.b"]
    return norm(x, "final_norm") @ t["head.w"] + t["head.b"]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("prompt", ["ab c", "abcdefgh ab"], ids=["short-prompt", "prompt-over-seq-len"])
def test_the_cache_slides_past_seq_len_as_sliding_window_attention(backend_name, shape, prompt):
    model = tiny_model(backend_name, **shape)
    context = list(TOKENIZER.encode(prompt))
    first = max(0, len(context) - model.config.seq_len)  # a long prompt is cropped to its last seq_len tokens
    decoder = Decoder(model)
    for _ in range(20):  # the context grows to over four times seq_len
        cached = next_logits(context, decoder)
        reference = sliding_window_logits(model, np.array(context[first:]))[-1]
        np.testing.assert_allclose(cached, reference, rtol=0, atol=LOGITS_ATOL)
        context.append(int(np.argmax(cached)))
    assert decoder.length == model.config.seq_len


def test_the_sliding_window_reference_is_the_model_itself_within_seq_len():
    model = tiny_model(n_layers=2)
    ids = TOKENIZER.encode("abc defg")[:6]
    full = model.be.to_host(model.logits(ids[None, :]))
    np.testing.assert_allclose(full, sliding_window_logits(model, ids), rtol=0, atol=LOGITS_ATOL)


def test_cached_and_uncached_generation_give_the_same_text_for_one_layer_past_seq_len(backend_name):
    # With one layer every key and value depends only on its own token and position, so the sliding
    # cache and a re-run on the cropped window see the same thing.
    model = tiny_model(backend_name, n_layers=1)
    for prompt in ("a", "abc", "abcdefgh"):  # shorter than, and longer than, seq_len 6
        for temperature, seed in ((0, 0), (1.0, 4)):
            cached = generate(model, TOKENIZER, prompt, 30, temperature=temperature, seed=seed)
            uncached = generate(model, TOKENIZER, prompt, 30, temperature=temperature, seed=seed, cache=False)
            assert cached == uncached


def test_cached_and_uncached_generation_agree_while_the_context_fits(backend_name):
    model = tiny_model(backend_name, n_layers=3, head_dims=(2, 2, 4))
    for temperature, seed in ((0, 0), (1.0, 4)):
        cached = generate(model, TOKENIZER, "a", 5, temperature=temperature, seed=seed)  # context ends at seq_len
        assert cached == generate(model, TOKENIZER, "a", 5, temperature=temperature, seed=seed, cache=False)


@pytest.mark.parametrize("shape", SHAPES)
def test_the_cached_forward_is_the_training_forward(shape):
    # Prefill and single steps run the training forward's own attention code, so in float64 they agree with
    # the full forward to rounding: only summation orders differ (one row's head matmul instead of all rows',
    # a softmax over the visible keys instead of the masked square): seen <= 5e-15 on logits of size ~3.
    config = tiny_model(**shape).config
    model = GPT(config, get_backend("numpy", dtype=np.float64), seed=3)
    ids = TOKENIZER.encode("ab cdef")[: config.seq_len]
    full = model.be.to_host(model.logits(ids[None, :]))  # (T, vocab)
    for n in range(1, len(ids) + 1):
        np.testing.assert_allclose(Decoder(model).prefill(ids[:n])[0], full[n - 1], rtol=0, atol=1e-12)
    stepped = Decoder(model)
    for i, token in enumerate(ids):
        np.testing.assert_allclose(stepped.step(int(token))[0], full[i], rtol=0, atol=1e-12)


def test_a_cached_forward_takes_a_prompt_at_position_0_or_one_token_after_it():
    model = tiny_model()
    with pytest.raises(ValueError, match="got 2 tokens at position 3"):
        model.next_token_logits(np.array([1, 2], dtype=np.int32), Decoder(model).rings, 3)
    with pytest.raises(ValueError, match="got 7 tokens at position 0"):
        model.next_token_logits(np.arange(7, dtype=np.int32), Decoder(model).rings, 0)


def test_sampling_twenty_times_seq_len_keeps_the_rope_tables_bounded_and_the_logits_right():
    # Positions past seq_len get RoPE tables of their own rows (tests/model/test_rope.py), identical to the rows of
    # tables grown to cover them, so the logits keep matching the float64 sliding-window forward to float32
    # rounding (LOGITS_ATOL) however long the sequence; the tables never grow past seq_len rows.
    model = tiny_model()
    seq_len = model.config.seq_len
    context = list(TOKENIZER.encode("ab"))
    decoder = Decoder(model)
    for _ in range(20 * seq_len):
        cached = next_logits(context, decoder)
        context.append(int(np.argmax(cached)))
    assert decoder.position == len(context) - 1 == 20 * seq_len + 1
    reference = sliding_window_logits(model, np.array(context[:-1]))[-1]
    np.testing.assert_allclose(cached, reference, rtol=0, atol=LOGITS_ATOL)
    shapes = model.rope.held_shapes()
    assert shapes and all(rows <= seq_len for rows, _ in shapes)


def test_prefill_fills_the_cache_the_same_as_stepping():
    model = tiny_model()
    ids = TOKENIZER.encode("ab cd")
    batched = Decoder(model)
    batched.prefill(ids)
    stepped = Decoder(model)
    for token in ids:
        stepped.step(int(token))
    for layer_b, layer_s in zip(batched.rings, stepped.rings):
        for ring_b, ring_s in zip(layer_b, layer_s):
            np.testing.assert_allclose(ring_b.keys, ring_s.keys, rtol=0, atol=1e-5)
            np.testing.assert_allclose(ring_b.values, ring_s.values, rtol=0, atol=1e-5)
    assert batched.length == stepped.length == 5


def test_a_full_cache_keeps_seq_len_tokens_and_moves_on():
    decoder = Decoder(tiny_model())
    decoder.prefill(TOKENIZER.encode("abcdef"))
    decoder.step(1)
    decoder.step(2)
    assert decoder.length == 6 and decoder.position == 8 and decoder.consumed == 8


@pytest.mark.parametrize("setting, message", [
    ({"temperature": -0.5}, "temperature"), ({"temperature": float("nan")}, "temperature"),
    ({"top_k": -1}, "top-k"), ({"top_p": 0.0}, "top-p"), ({"top_p": 1.5}, "top-p"),
])
def test_invalid_sampling_settings_are_clear_errors(setting, message):
    with pytest.raises(ConfigError, match=message):
        generate(tiny_model(), TOKENIZER, "a", 5, **setting)


def test_a_prompt_character_outside_the_vocabulary_is_named():
    with pytest.raises(DataError, match=r"the prompt has the character 'z' \(U\+007A\) at offset 2"):
        generate(tiny_model(), TOKENIZER, "abz", 5)


def test_cli_sample_streams_what_follows_the_prompt(tmp_path, capsys):
    model = tiny_model(n_layers=1)  # one layer: --no-cache gives the same text past seq_len
    save_checkpoint(tmp_path / "ck", model, CharTokenizer(VOCAB), family_name="gpt")
    expected = generate(model, TOKENIZER, "ab ", 12, temperature=0) + "\n"
    base = ["sample", str(tmp_path / "ck"), "--prompt", "ab ", "--tokens", "12", "--backend", "numpy"]
    for extra in (["--temperature", "0"], ["--temperature", "0", "--no-cache"], ["--top-k", "1", "--seed", "3"]):
        assert main(base + extra) == 0
        assert capsys.readouterr().out == expected
    assert main(base + ["--top-p", "0.9", "--top-k", "4", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert len(out) == 12 + 1 and set(out) <= set(VOCAB)


def test_cli_sample_rejects_a_bad_prompt_and_bad_flags_without_a_traceback(tmp_path, capsys):
    save_checkpoint(tmp_path / "ck", tiny_model(), CharTokenizer(VOCAB), family_name="gpt")
    assert main(["sample", str(tmp_path / "ck"), "--prompt", "aXb", "--backend", "numpy"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip().splitlines() == [(
        "microgpt sample: error: the prompt has the character 'X' (U+0058) at offset 1 (line 1), "
        "which is not in the model's vocabulary"
    )]
    for flag, value in (("--top-p", "0"), ("--top-p", "1.1"), ("--top-k", "-2"), ("--temperature", "-1")):
        with pytest.raises(SystemExit) as exit_info:
            main(["sample", str(tmp_path / "ck"), flag, value])
        assert exit_info.value.code == 2
        assert f"argument {flag}" in capsys.readouterr().err


def test_num_samples_and_out(tmp_path, capsys):
    """--num-samples N gives N samples with seeds S, S + 1, ...; --out writes them to a file, not stdout."""
    from microgpt.cli import main

    (tmp_path / "t.txt").write_text("abcabcabd " * 60)
    assert main(["train", str(tmp_path / "t.txt"), "--d-model", "8", "--heads", "2", "--n-layers", "1", "--d-ff",
                 "8", "--seq-len", "8", "--steps", "5", "--gen", "0", "--quiet", "--model", str(tmp_path / "ck")]) == 0
    capsys.readouterr()
    common = ["sample", str(tmp_path / "ck"), "--tokens", "20", "--prompt", "ab", "--backend", "numpy"]
    singles = []
    for seed in (5, 6, 7):
        assert main([*common, "--seed", str(seed)]) == 0
        singles.append(capsys.readouterr().out.rstrip("\n"))
    assert main([*common, "--seed", "5", "--num-samples", "3"]) == 0
    assert capsys.readouterr().out == "\n---\n".join(singles) + "\n"
    out = tmp_path / "samples.txt"
    assert main([*common, "--seed", "5", "--num-samples", "3", "--out", str(out)]) == 0
    printed = capsys.readouterr()
    assert printed.out == "" and f"written to {out}" in printed.err
    assert out.read_text() == "\n---\n".join(singles) + "\n"
    assert main([*common, "--out", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err
