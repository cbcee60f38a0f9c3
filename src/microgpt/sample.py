"""Text generation from a trained model.

`choose_token` turns one row of logits into a token id: greedy at temperature
0, otherwise a draw from the tempered softmax, optionally cut to the top-k
tokens and to the nucleus (the most likely tokens whose probabilities add up
to top-p). `generate` extends a prompt one character at a time; the model
sees at most seq_len tokens. With `use_cache` (the default) the prompt is run
once and each new token reuses the keys and values already computed
(`microgpt.model.decode`), O(T) per token; past seq_len the cache slides
(sliding-window attention over the last seq_len positions at every layer), and
its memory stays bounded by seq_len however many tokens are generated.
Without it, each token re-runs the full model on the last seq_len tokens. The
two agree while the context fits in seq_len, and for one-layer models always.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from microgpt.data import CharTokenizer
from microgpt.errors import ConfigError
from microgpt.model import GPT
from microgpt.model.decode import Decoder


def check_sampling(temperature: float, top_k: int, top_p: float) -> None:
    """A ConfigError naming the first invalid sampling setting."""
    if not (temperature >= 0 and np.isfinite(temperature)):
        raise ConfigError(f"temperature must be 0 (greedy) or a positive finite number, got {temperature}")
    if top_k < 0:
        raise ConfigError(f"top-k must be 0 (no limit) or a positive number of tokens, got {top_k}")
    if not 0 < top_p <= 1:
        raise ConfigError(f"top-p must be in (0, 1] (1 keeps every token), got {top_p}")


def choose_token(logits: np.ndarray, temperature: float, rng: np.random.Generator, top_k: int = 0,
                 top_p: float = 1.0) -> int:
    """Token id from logits (vocab,): argmax at temperature 0, else a draw from softmax(logits / T).

    top_k > 0 keeps only the k most likely tokens; top_p < 1 keeps the fewest most likely tokens whose
    probabilities reach top_p (at least one). Ties are ranked by token id, as argmax ranks them.
    """
    logits = np.asarray(logits, dtype=np.float64)
    if temperature == 0:
        return int(np.argmax(logits))
    scaled = logits / temperature
    probs = np.exp(scaled - scaled.max())  # (vocab,)
    probs /= probs.sum()
    if top_k or top_p < 1:
        ranked = np.argsort(-probs, kind="stable")  # (vocab,) most likely first
        keep = len(probs) if top_k == 0 else min(top_k, len(probs))
        if top_p < 1:
            reached = np.cumsum(probs[ranked[:keep]]) >= top_p  # (keep,)
            keep = int(np.argmax(reached)) + 1 if reached.any() else keep
        kept = np.zeros_like(probs)
        kept[ranked[:keep]] = probs[ranked[:keep]]
        probs = kept / kept.sum()
    return int(rng.choice(len(probs), p=probs))


class UnsoundOutputs(ValueError):
    """A model whose outputs are NaN or infinite; the message says so and what to do."""


def generate(model: GPT, tokenizer: CharTokenizer, prompt: str, n_tokens: int, temperature: float = 1.0,
             seed: int = 0, on_text: Callable[[str], None] | None = None, top_k: int = 0, top_p: float = 1.0,
             use_cache: bool = True) -> str:
    """The prompt's continuation of n_tokens characters; on_text receives each character as it is made."""
    check_sampling(temperature, top_k, top_p)
    rng = np.random.default_rng(seed)
    context = list(tokenizer.encode(prompt or start_text(tokenizer), source="the prompt"))
    decoder = Decoder(model) if use_cache else None
    out = []
    for _ in range(n_tokens):
        logits = next_logits(model, context, decoder)  # (vocab,)
        if not np.all(np.isfinite(logits)):
            raise UnsoundOutputs(f"the model's outputs are not finite (after {len(out)} characters); its weights "
                                 "are unusable, retrain it (with a lower --lr if it diverged)")
        token = choose_token(logits, temperature, rng, top_k, top_p)
        context.append(token)
        ch = tokenizer.vocab[token]
        out.append(ch)
        if on_text:
            on_text(ch)
    return "".join(out)


def next_logits(model: GPT, context: list[int], decoder: Decoder | None) -> np.ndarray:
    """Host logits (vocab,) for the token after context.

    Without a decoder: a full forward over the last seq_len tokens. With one: the first call fills its
    cache with the context (its last seq_len tokens), each later call feeds it the one token appended since.
    """
    if decoder is None:
        window = np.array(context[-model.config.seq_len :], dtype=np.int32)[None, :]  # (1, T)
        return model.be.to_host(model.logits(window)[-1])
    if decoder.consumed == 0:
        return model.be.to_host(decoder.prefill(context))[0]
    if decoder.consumed != len(context) - 1:
        raise ValueError(f"the decoder has seen {decoder.consumed} tokens, but the context grew to {len(context)}")
    return model.be.to_host(decoder.step(context[-1]))[0]


def start_text(tokenizer: CharTokenizer) -> str:
    """What an empty prompt starts from: a newline when the vocabulary has one, else its first character."""
    return "\n" if "\n" in tokenizer.vocab else tokenizer.vocab[0]
