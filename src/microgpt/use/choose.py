"""From a row of logits to the next token: the distribution sampling draws from, and one draw from it.

`token_probs` is the distribution at a temperature (greedy at 0), cut to the
top-k tokens and to the nucleus (the most likely tokens whose probabilities add
up to top-p); `choose_token` draws from it. The sampler (sample.py) and the
speculative sampler (speculative.py), which must give the same distribution,
both take their tokens from here.
"""

from __future__ import annotations

import numpy as np

from microgpt.core.errors import ConfigError, Named, UnsoundOutputs


def check_sampling(temperature: float, top_k: int, top_p: float) -> None:
    """A ConfigError naming the first invalid sampling setting."""
    if not (temperature >= 0 and np.isfinite(temperature)):
        raise ConfigError(Named("temperature", temperature), " must be 0 (greedy) or a positive finite number")
    if top_k < 0:
        raise ConfigError(Named("top_k", top_k), " must be 0 (no limit) or a positive number of tokens")
    if not 0 < top_p <= 1:
        raise ConfigError(Named("top_p", top_p), " must be in (0, 1] (1 keeps every token)")


def choose_token(logits: np.ndarray, temperature: float, rng: np.random.Generator, top_k: int = 0,
                 top_p: float = 1.0) -> int:
    """Token id from logits (vocab,): argmax at temperature 0, else a draw from `token_probs`."""
    if temperature == 0:
        return int(np.argmax(np.asarray(logits, dtype=np.float64)))
    probs = token_probs(logits, temperature, top_k, top_p)  # (vocab,)
    return int(rng.choice(len(probs), p=probs))


def token_probs(logits: np.ndarray, temperature: float, top_k: int = 0, top_p: float = 1.0) -> np.ndarray:
    """The distribution (vocab,) that sampling draws from, for logits (vocab,), or one per row (n, vocab) for
    logits (n, vocab): at temperature 0, all on the argmax; else softmax(logits / T), where top_k > 0 keeps only the
    k most likely tokens, and top_p < 1 keeps the fewest most likely tokens whose probabilities reach top_p (at
    least one). Ties are ranked by token id, as argmax ranks them."""
    logits = np.asarray(logits, dtype=np.float64)
    if logits.ndim == 2 and (top_k or top_p < 1):
        return np.stack([token_probs(row, temperature, top_k, top_p) for row in logits])  # (n, vocab)
    if temperature == 0:
        probs = np.zeros_like(logits)  # (vocab,) or (n, vocab)
        np.put_along_axis(probs, np.argmax(logits, axis=-1)[..., None], 1.0, axis=-1)
        return probs
    scaled = logits / temperature
    probs = np.exp(scaled - scaled.max(axis=-1, keepdims=True))  # (vocab,) or (n, vocab)
    probs /= probs.sum(axis=-1, keepdims=True)
    if top_k or top_p < 1:
        ranked = np.argsort(-probs, kind="stable")  # (vocab,) most likely first
        keep = len(probs) if top_k == 0 else min(top_k, len(probs))
        if top_p < 1:
            reached = np.cumsum(probs[ranked[:keep]]) >= top_p  # (keep,)
            keep = int(np.argmax(reached)) + 1 if reached.any() else keep
        kept = np.zeros_like(probs)
        kept[ranked[:keep]] = probs[ranked[:keep]]
        probs = kept / kept.sum()
    return probs


def check_finite(logits: np.ndarray, count: int) -> None:
    """An UnsoundOutputs error, naming how far sampling got, where the model's logits are NaN or infinite."""
    if not np.all(np.isfinite(logits)):
        raise UnsoundOutputs(f"the model's outputs are not finite (after {count} tokens); its weights "
                             "are unusable, retrain it (with a lower --lr if it diverged)")
