"""The draft heads as one stack (model/lookahead/draft_stack.py) against the heads run one by one, and both against
the training forward while the context fits the window.

Every pass of 1 .. K + 1 tokens and every kept prefix, from prompts of every length, well past the window (so
passes cross its end and the rings wrap), with heads of 0, 1 and 2 layers, two head groups of unequal widths,
and K at its maximum (seq_len - 1); on the emulated GPU, where the heads run one by one, greedy text is plain
greedy's. float64: the stack folds each LayerNorm's gain into the next product, which
sums in another order, so 1e-10 relative. float32: 1e-4 of the largest logit (rounding of values near 10, the
products summed in another order, and the cpu kernels' exp within 2 ulp).
"""

from __future__ import annotations

import numpy as np
import pytest

from microgpt.backends import get_backend
from microgpt.model.lookahead.speculative import SpeculativeDecoder
from tiny_lookahead import TOKENIZER, drafter

F64_RTOL, F32_TOL = 1e-10, 1e-4  # see the module docstring


def drafts_both_ways(model, seed: int, prompt_length: int, passes: int = 25):
    """The stack's drafts and the one-by-one heads' after the same prompt, passes and kept prefixes."""
    rng = np.random.default_rng(seed)
    stacked, single = SpeculativeDecoder(model, stacked=True), SpeculativeDecoder(model, stacked=False)
    prompt = rng.integers(0, TOKENIZER.size, size=prompt_length).tolist()
    stacked.prefill(prompt)
    single.prefill(prompt)
    got, want = [stacked.head_logits()], [single.head_logits()]
    for _ in range(passes):
        fed = rng.integers(0, TOKENIZER.size, size=rng.integers(1, model.config.lookahead + 2)).tolist()
        np.testing.assert_array_equal(stacked.feed(fed), single.feed(fed))  # the main head is untouched
        kept = int(rng.integers(1, len(fed) + 1))
        stacked.keep(kept)
        single.keep(kept)
        got.append(stacked.head_logits())
        want.append(single.head_logits())
    return np.array(got), np.array(want), stacked.position


@pytest.mark.parametrize("settings", [{"head_layers": 1}, {"head_layers": 0}, {"head_layers": 2},
                                      {"head_layers": 1, "lookahead": 6}])
@pytest.mark.parametrize("prompt_length", [1, 4, 7])
def test_the_stack_drafts_what_the_heads_one_by_one_do(settings, prompt_length):
    model = drafter(get_backend("numpy", dtype=np.float64), "mtp", **settings)
    got, want, position = drafts_both_ways(model, prompt_length, prompt_length)
    assert position > 3 * model.config.seq_len  # well past the window
    np.testing.assert_allclose(got, want, rtol=F64_RTOL, atol=F64_RTOL * np.abs(want).max())


def test_the_stack_on_cpu_in_float32_matches_the_reference():
    numpy_model = drafter(get_backend("numpy"), "mtp")
    cpu_model = drafter(get_backend("cpu", threads=1), "mtp")
    cpu_model.params.from_host(numpy_model.params.to_host())
    rng_seed, prompt_length = 5, 3
    got, _, _ = drafts_both_ways(cpu_model, rng_seed, prompt_length)
    _, want, _ = drafts_both_ways(numpy_model, rng_seed, prompt_length)
    np.testing.assert_allclose(got, want, rtol=0, atol=F32_TOL * np.abs(want).max())


def test_within_the_window_the_drafts_are_the_training_forwards():
    model = drafter(get_backend("numpy", dtype=np.float64), "mtp")
    ids = np.random.default_rng(9).integers(0, TOKENIZER.size, size=(1, model.config.seq_len))  # (1, T)
    heads = model.heads(ids)[1:]
    decoder = model.speculative_decoder()
    decoder.prefill(ids[0, :2])
    rows = [decoder.head_logits()]
    for t in ids[0, 2:]:
        decoder.feed([int(t)])
        rows.append(decoder.head_logits())
    for k, head in enumerate(heads):  # head k's logits at every position from the second on
        want = model.be.to_host(head.logits)[1:]  # (T - 1, vocab)
        np.testing.assert_allclose(np.array(rows)[:, k], want, rtol=F64_RTOL, atol=F64_RTOL * np.abs(want).max())


def test_a_draft_without_a_pass_is_refused():
    decoder = drafter(get_backend("numpy", dtype=np.float64), "mtp").speculative_decoder()
    decoder.prefill([1, 2])
    decoder.head_logits()
    with pytest.raises(RuntimeError, match="draft follows a pass"):
        decoder.draft(3, 1, int)


def test_on_the_emulated_gpu_the_heads_run_one_by_one_and_greedy_text_is_plain_greedys(emulated):
    from microgpt.use.sample import generate
    from microgpt.use.speculative import Speculation

    backend, _ = emulated
    model = drafter(backend, "mtp")
    assert model.speculative_decoder().stack is None  # a GPU backend: the heads one by one
    speculation = Speculation()
    drafted = generate(model, TOKENIZER, "abc", 30, temperature=0, speculative=speculation)
    assert drafted == generate(model, TOKENIZER, "abc", 30, temperature=0) and speculation.passes > 0
