"""Speculative sampling with the lookahead heads (microgpt/speculative.py, model/lookahead/speculative.py): its
decoder gives the plain decoder's logits whatever it feeds and keeps, its text at temperature 0 is greedy
sampling's, its tokens at temperature > 0 are distributed as the main head's, and bad uses get one clear line.

Distribution tests draw with fixed seeds and compare the counts with the exact probabilities by Pearson's
chi-square: the bound used is the statistic's 99.99th percentile for those degrees of freedom (so a correct
sampler does not fail by chance, and with fixed seeds never flakes), and a third of what a sampler that kept
every draft scores (tested alongside).
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from microgpt.backends import get_backend
from microgpt.core.errors import ConfigError
from microgpt.data.tokenizer import CharTokenizer
from microgpt.model.family import family
from microgpt.use.choose import token_probs
from microgpt.use.loaded import LoadedModel
from microgpt.use.sample import generate
from microgpt.use.speculative import Speculation, accept_or_resample

TOKENIZER = CharTokenizer("abcdefghijk")


def tiny(dtype=np.float64, vocab_text: str = "abcdefghijk", spread: float = 0.5, **settings):
    kind = family("lookahead")
    tokenizer = CharTokenizer(vocab_text)
    config = kind.Config(vocab_size=tokenizer.size, **{"d_model": 8, "n_layers": 2, "head_dims": (4, 4), "d_ff": 8,
                                                       "seq_len": 9, "lookahead": 3, **settings})
    model = kind.build(config, get_backend("numpy", dtype=dtype), tokenizer, 3)
    rng = np.random.default_rng(1)
    model.params.from_host({n: v + rng.normal(0, spread, v.shape) for n, v in model.params.to_host().items()})
    return model, tokenizer


@pytest.mark.parametrize("mode", ["mtp", "hydra"])
def test_feeding_and_keeping_gives_the_plain_decoders_logits(mode):
    """Past the window too: after any mix of passes and kept prefixes, the main head's logits after each kept
    token are the plain decoder's after the same tokens."""
    model, _ = tiny(lookahead_mode=mode)
    rng = np.random.default_rng(0)
    spec, kept_tokens = model.speculative_decoder(), [1, 2, 3]
    main = spec.prefill(kept_tokens)
    got = [main]
    while len(kept_tokens) < 40:  # seq_len 9: well past it
        fed = rng.integers(0, 11, size=rng.integers(1, 5)).tolist()  # 1 .. K + 1 tokens
        mains = spec.feed(fed)
        keep = int(rng.integers(1, len(fed) + 1))
        spec.keep(keep)
        kept_tokens += fed[:keep]
        got += list(mains[:keep])
    plain = model.decoder()
    want = [model.be.to_host(plain.prefill(kept_tokens[:3]))[0]]
    want += [model.be.to_host(plain.step(t))[0] for t in kept_tokens[3:]]
    np.testing.assert_allclose(np.array(got), np.array(want), rtol=1e-10, atol=1e-12)  # float64, other sum orders


@pytest.mark.parametrize("prompt_length", range(1, 10))
def test_a_pass_from_any_position_gives_the_plain_decoders_logits(prompt_length):
    """Every prompt length up to seq_len (9), then 0 to 11 tokens one at a time, then a pass of 1 to K + 1 (4)
    tokens: every start around the window's end, a pass crossing it from inside among them."""
    model, _ = tiny()
    rng = np.random.default_rng(prompt_length)
    prompt = rng.integers(0, 11, size=prompt_length).tolist()
    for lead in range(12):
        for size in range(1, 5):
            lead_tokens, fed = rng.integers(0, 11, size=lead).tolist(), rng.integers(0, 11, size=size).tolist()
            spec, plain = model.speculative_decoder(), model.decoder()
            spec.prefill(prompt)
            plain.prefill(prompt)
            for t in lead_tokens:
                spec.feed([t])
                plain.step(t)
            mains = spec.feed(fed)
            want = np.array([model.be.to_host(plain.step(t))[0] for t in fed])  # (size, vocab)
            np.testing.assert_allclose(mains, want, rtol=1e-10, atol=1e-12,  # float64, other sum orders
                                       err_msg=f"prompt {prompt_length}, lead {lead}, pass of {size}")


@pytest.mark.parametrize(("dtype", "head_layers", "mode"), [(np.float64, 1, "mtp"), (np.float32, 1, "mtp"),
                                                           (np.float64, 0, "mtp"), (np.float64, 1, "hydra"),
                                                           (np.float32, 1, "hydra"), (np.float64, 2, "hydra")])
def test_at_temperature_0_the_text_is_greedy_samplings(dtype, head_layers, mode):
    """From prompts of every length up to past seq_len (9), and for 0 to 3 tokens as well as 60."""
    model, tokenizer = tiny(dtype, head_layers=head_layers, lookahead_mode=mode)
    for prompt in ["abcdefghijk"[:n] for n in range(1, 12)]:
        for n_tokens in (0, 1, 2, 3, 60):
            plain = generate(model, tokenizer, prompt, n_tokens, temperature=0)
            speculation = Speculation()
            drafted = generate(model, tokenizer, prompt, n_tokens, temperature=0, speculative=speculation)
            assert drafted == plain and len(plain) == n_tokens, (prompt, n_tokens)
            assert speculation.made == n_tokens


@pytest.mark.parametrize("mode", ["mtp", "hydra"])
def test_on_the_cpu_backend_the_text_at_temperature_0_is_greedy_samplings(mode):
    """In float32, where hydra heads draft their argmaxes in one compiled call (backends/cpu_kernels/hydra_draft.py)
    and mtp heads as one stack, from prompts of every length up to past seq_len (9)."""
    reference, tokenizer = tiny(np.float32, lookahead_mode=mode)
    model = family("lookahead").build(reference.config, get_backend("cpu", threads=1), tokenizer, 3)
    model.params.from_host(reference.params.to_host())
    for prompt in ["abcdefghijk"[:n] for n in range(1, 12)]:
        speculation = Speculation()
        drafted = generate(model, tokenizer, prompt, 60, temperature=0, speculative=speculation)
        assert drafted == generate(model, tokenizer, prompt, 60, temperature=0), prompt
        assert speculation.made == 60 and sum(speculation.kept) > 0  # drafts were kept, not only refused


def test_the_accept_rule_gives_the_target_distribution():
    rng = np.random.default_rng(0)
    p, q = rng.dirichlet(np.ones(5)), rng.dirichlet(np.ones(5))  # (5,) each
    draws = 40_000
    counts = np.zeros(5)
    for _ in range(draws):
        draft = int(rng.choice(5, p=q))
        counts[accept_or_resample(draft, p, q, rng)[1]] += 1
    chi2 = ((counts - draws * p) ** 2 / (draws * p)).sum()
    assert chi2 < 30  # 4 degrees of freedom: the 99.99th percentile is 23.5


def chi_square(model, tokenizer, settings: dict, speculation: bool, samples: int = 600,
               length: int = 3) -> tuple[float, int]:
    """(Pearson's statistic, its degrees of freedom) of the `length`-token continuations of "a" against the main
    head's exact probabilities, the sequences expected fewer than 5 times pooled into one bin (so that no bin's
    expectation is too small for the statistic)."""
    prompt = [int(t) for t in tokenizer.encode("a")]
    counts = dict.fromkeys(itertools.product(range(tokenizer.size), repeat=length), 0)
    for seed in range(samples):
        text = generate(model, tokenizer, "a", length, seed=seed, speculative=Speculation() if speculation else None,
                        **settings)
        counts[tuple(int(t) for t in tokenizer.encode(text))] += 1
    bins, pooled = [], [0, 0.0]  # (count, expected) per bin; the pooled bin's
    for sequence, count in counts.items():
        logits = model.be.to_host(model.logits(np.array([prompt + list(sequence)])))  # (1 + length, vocab)
        exact = np.prod([token_probs(logits[i], settings["temperature"], settings["top_k"], settings["top_p"])[token]
                         for i, token in enumerate(sequence)])
        if exact == 0:
            assert count == 0, sequence  # cut by top-k: never drawn
        elif samples * exact < 5:
            pooled[0] += count
            pooled[1] += samples * exact
        else:
            bins.append((count, samples * exact))
    if pooled[1] > 0:
        bins.append(tuple(pooled))
    return sum((count - expected) ** 2 / expected for count, expected in bins), len(bins) - 1


CHI2_BOUND = {df: bound for df, bound in enumerate([15.1, 18.4, 21.1, 23.5, 25.7, 27.9, 29.9, 31.8, 33.7, 35.6,
                                                  37.4, 39.1, 40.8, 42.5, 44.1, 45.7, 47.3, 48.8, 50.3, 51.8,
                                                  53.3, 54.7, 56.2, 57.6, 59.0, 60.3, 61.7], start=1)}
# the chi-square distribution's 99.99th percentile by degrees of freedom (standard tables)


@pytest.mark.parametrize(("settings", "mode"), [({"temperature": 1.0, "top_k": 0, "top_p": 1.0}, "mtp"),
                                              ({"temperature": 0.7, "top_k": 2, "top_p": 1.0}, "mtp"),
                                              ({"temperature": 1.0, "top_k": 0, "top_p": 0.8}, "mtp"),
                                              ({"temperature": 1.0, "top_k": 0, "top_p": 1.0}, "hydra"),
                                              ({"temperature": 0.7, "top_k": 2, "top_p": 1.0}, "hydra")])
def test_at_temperature_above_0_the_tokens_are_distributed_as_the_main_heads(settings, mode):
    """Three tokens after a prompt, over a vocabulary of 3: one pass of two drafts, so both heads' drafts are
    judged, kept and refused; with top-k, over the cut distributions. Hydra head 2's distribution depends on
    head 1's draft, drawn before it."""
    model, tokenizer = tiny(vocab_text="abc", spread=0.3, lookahead=2, lookahead_mode=mode)
    chi2, df = chi_square(model, tokenizer, settings, speculation=True)
    assert chi2 < CHI2_BOUND[df], (chi2, df)
    speculation = Speculation()
    for seed in range(20):
        generate(model, tokenizer, "a", 3, seed=seed, speculative=speculation, **settings)
    assert 0 < speculation.kept[0] < speculation.checked[0] and speculation.checked[1] > 0  # kept and refused


@pytest.mark.parametrize("mode", ["mtp", "hydra"])
def test_later_rounds_are_distributed_as_the_main_heads_too(mode):
    """Five tokens over a vocabulary of 2: after the first pass, a second round starts from the token drawn
    after the last kept draft (or from the residual), with drafts from the heads at the last kept position."""
    model, tokenizer = tiny(vocab_text="ab", spread=0.3, lookahead=2, lookahead_mode=mode)
    settings = {"temperature": 1.0, "top_k": 0, "top_p": 1.0}
    chi2, df = chi_square(model, tokenizer, settings, speculation=True, length=5)
    assert chi2 < CHI2_BOUND[df], (chi2, df)


@pytest.mark.parametrize("mode", ["mtp", "hydra"])
def test_the_chi_square_check_catches_a_sampler_that_keeps_every_draft(monkeypatch, mode):
    model, tokenizer = tiny(vocab_text="abc", spread=0.3, lookahead=2, lookahead_mode=mode)
    monkeypatch.setattr("microgpt.use.speculative.accept_or_resample", lambda draft, p, q, rng: (True, draft))
    chi2, df = chi_square(model, tokenizer, {"temperature": 1.0, "top_k": 0, "top_p": 1.0}, speculation=True)
    assert chi2 > 3 * CHI2_BOUND[df], (chi2, df)


def test_speculation_without_the_cache_is_refused():
    model, tokenizer = tiny()
    with pytest.raises(ConfigError, match="--no-cache turns off"):
        generate(model, tokenizer, "a", 3, cache=False, speculative=Speculation())


def test_one_token_left_needs_no_pass():
    model, tokenizer = tiny()
    speculation = Speculation()
    generate(model, tokenizer, "a", 1, temperature=0, speculative=speculation)
    assert speculation.passes == 0 and speculation.report().startswith("speculative: 1 token in 0 passes")


def test_gap_heads_cannot_draft():
    model, tokenizer = tiny(lookahead_mode="gap")
    with pytest.raises(ConfigError, match="gap heads .* cannot draft; --speculative needs a model trained with "
                                          "--lookahead-mode mtp or hydra"):
        generate(model, tokenizer, "a", 3, speculative=Speculation())


def test_a_model_without_heads_is_refused():
    kind = family("gpt")
    model = kind.build(kind.Config(vocab_size=11, d_model=4, n_layers=1, d_ff=4, seq_len=8),
                       get_backend("numpy"), TOKENIZER, 0)
    with pytest.raises(ConfigError, match=r"--speculative needs a model with draft heads \(a lookahead run: "
                                          r"microgpt train ... --lookahead K\)") as refused:
        generate(model, TOKENIZER, "a", 3, speculative=Speculation())
    assert refused.value.key == "speculative"


def test_python_words_the_refusal_with_its_own_keywords():
    """LoadedModel.sample takes the settings `microgpt sample` does, by the same names (cache, speculative), and
    its errors name them as keywords."""
    model, tokenizer = tiny(lookahead_mode="gap")
    loaded = LoadedModel(model, "lookahead", tokenizer, Path("tiny"), max_memory=2**30)
    with pytest.raises(ConfigError, match=r"\(lookahead_mode='gap'\): .* speculative needs a model trained with "
                                          r"lookahead_mode=mtp or hydra$"):
        loaded.sample(3, speculative=True)
    with pytest.raises(ConfigError, match="^speculative checks its drafts against the KV cache, which cache=False"):
        loaded.sample(3, speculative=True, cache=False)
