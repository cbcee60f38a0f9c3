"""Drafting with hydra heads (model/lookahead/hydra_draft.py): the folded host stack against the heads' own
forward, both against the training forward (`heads`, given the true tokens) while the context fits the window,
the stack on the cpu backend in float32 against numpy's, and on the emulated GPU (the heads' own forward) greedy
text is plain greedy's.

Random passes and kept prefixes from prompts of every length, well past the window, with heads of 1 and 2
layers and K at its maximum (seq_len - 1). float64: the stack folds each LayerNorm's gain into the next product
and each token's product into a table, which sum in another order, so 1e-10 relative. float32: 1e-4 of the
largest logit.
"""

from __future__ import annotations

import numpy as np
import pytest

from microgpt.backends import get_backend
from microgpt.model.lookahead.hydra_draft import HydraDecoder
from tiny_lookahead import TOKENIZER, drafter

F64_RTOL, F32_TOL = 1e-10, 1e-4  # see the module docstring


def drafts_both_ways(model, seed: int, prompt_length: int, passes: int = 25):
    """The folded stack's drafts and logits and the heads' own forward's after the same prompt, passes and kept
    prefixes, each head's draft the argmax of the reference's logits (so both read the same tokens)."""
    rng = np.random.default_rng(seed)
    folded, single = HydraDecoder(model, folded_weights=True), HydraDecoder(model, folded_weights=False)
    prompt = rng.integers(0, TOKENIZER.size, size=prompt_length).tolist()
    folded.prefill(prompt)
    single.prefill(prompt)
    got, want = [], []
    for _ in range(passes):
        token, count = int(rng.integers(0, TOKENIZER.size)), int(rng.integers(1, model.config.lookahead + 1))
        drafts, logits = single.draft(token, count, lambda row: int(np.argmax(row)))
        queue = iter(drafts)
        folded_drafts, folded_logits = folded.draft(token, count, lambda row, queue=queue: next(queue))
        assert folded_drafts == drafts
        got.append(folded_logits)
        want.append(logits)
        fed = [token] + drafts
        np.testing.assert_array_equal(folded.feed(fed), single.feed(fed))  # the main head is untouched
        kept = int(rng.integers(1, len(fed) + 1))
        folded.keep(kept)
        single.keep(kept)
    return np.concatenate(got), np.concatenate(want), folded.position


@pytest.mark.parametrize("settings", [{"head_layers": 1}, {"head_layers": 2}, {"head_layers": 1, "lookahead": 6}])
@pytest.mark.parametrize("prompt_length", [1, 4, 7])
def test_the_folded_stack_drafts_what_the_heads_do(settings, prompt_length):
    model = drafter(get_backend("numpy", dtype=np.float64), "hydra", **settings)
    got, want, position = drafts_both_ways(model, prompt_length, prompt_length)
    assert position > 2 * model.config.seq_len  # well past the window
    np.testing.assert_allclose(got, want, rtol=F64_RTOL, atol=F64_RTOL * np.abs(want).max())


def test_the_stack_on_cpu_in_float32_matches_the_reference():
    numpy_model = drafter(get_backend("numpy"), "hydra")
    cpu_model = drafter(get_backend("cpu", threads=1), "hydra")
    cpu_model.params.from_host(numpy_model.params.to_host())
    got, _, _ = drafts_both_ways(cpu_model, 5, 3)
    _, want, _ = drafts_both_ways(numpy_model, 5, 3)
    np.testing.assert_allclose(got, want, rtol=0, atol=F32_TOL * np.abs(want).max())


@pytest.mark.parametrize("folded_weights", [True, False])
def test_within_the_window_the_drafts_are_the_training_forwards(folded_weights):
    """After the prompt ids[:t + 1], head k given the true tokens t + 1 .. t + k gives its training logits at t."""
    model = drafter(get_backend("numpy", dtype=np.float64), "hydra", head_layers=2)
    seq_len, heads_k = model.config.seq_len, model.config.lookahead
    ids = np.random.default_rng(9).integers(0, TOKENIZER.size, size=(1, seq_len))  # (1, T)
    heads = model.heads(ids)[1:]
    for t in range(seq_len - heads_k):  # positions whose tokens t + 1 .. t + K lie in the window
        decoder = HydraDecoder(model, folded_weights=folded_weights)
        decoder.prefill(ids[0, : t + 1])
        truth = iter(ids[0, t + 2 :].tolist())
        _, logits = decoder.draft(int(ids[0, t + 1]), heads_k, lambda row, truth=truth: next(truth, 0))  # the last draft is read by no head
        for k, head in enumerate(heads):
            want = model.be.to_host(head.logits)[t]  # (vocab,)
            np.testing.assert_allclose(logits[k], want, rtol=F64_RTOL, atol=F64_RTOL * np.abs(want).max())


def test_on_the_emulated_gpu_the_heads_run_their_own_forward_and_greedy_text_is_plain_greedys(emulated):
    from microgpt.use.sample import generate
    from microgpt.use.speculative import Speculation

    backend, _ = emulated
    model = drafter(backend, "hydra")
    assert model.speculative_decoder().stack is None  # a GPU backend: the heads' own forward
    speculation = Speculation()
    drafted = generate(model, TOKENIZER, "abc", 30, temperature=0, speculative=speculation)
    assert drafted == generate(model, TOKENIZER, "abc", 30, temperature=0) and speculation.passes > 0


@pytest.mark.parametrize("greedy", [True, False])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("settings", [{"head_layers": 1}, {"head_layers": 2}])
def test_on_cpu_the_kernels_drafts_are_the_numpy_stacks(greedy, dtype, settings):
    """The cpu backend's kernels (backends/cpu_kernels/hydra_draft.py: pick None, every head in one call; a pick,
    one call a head) against the folded stack's NumPy loop on the numpy backend (the specification), same
    weights, after the same passes: the same drafts, and logits within rounding (the kernels sum in another
    order)."""
    pick = None if greedy else (lambda row: int(np.argsort(row)[-2]))  # not the argmax: a pick of its own
    reference = drafter(get_backend("numpy", dtype=dtype), "hydra", **settings)
    model = drafter(get_backend("cpu", dtype=dtype, threads=1), "hydra", **settings)
    model.params.from_host(reference.params.to_host())
    fast, spec = HydraDecoder(model), HydraDecoder(reference)
    assert fast.stack.kernels is not None and spec.stack.kernels is None
    rng = np.random.default_rng(4)
    prompt = rng.integers(0, TOKENIZER.size, size=5).tolist()
    fast.prefill(prompt)
    spec.prefill(prompt)
    for _ in range(25):  # well past the window (seq_len 7)
        token, count = int(rng.integers(0, TOKENIZER.size)), int(rng.integers(1, model.config.lookahead + 1))
        drafts, logits = fast.draft(token, count, pick)
        want_drafts, want = spec.draft(token, count, pick)
        assert drafts == want_drafts
        tolerance = (F64_RTOL if dtype == np.float64 else F32_TOL) * np.abs(want).max()
        np.testing.assert_allclose(logits, want, rtol=0, atol=tolerance)
        fed = [token] + drafts
        fast.feed(fed)
        spec.feed(fed)
        kept = int(rng.integers(1, len(fed) + 1))
        fast.keep(kept)
        spec.keep(kept)
