"""Text generation from a trained model.

`choose_token` turns one row of logits into a token id: greedy at temperature
0, otherwise a draw from the tempered softmax. `generate` extends a prompt one
character at a time, always feeding the last seq_len tokens as context.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from microgpt.data import CharTokenizer
from microgpt.model import GPT


def choose_token(logits: np.ndarray, temperature: float, rng: np.random.Generator) -> int:
    """Token id from logits (vocab,): argmax when temperature is 0, else a draw from softmax(logits / T)."""
    logits = np.asarray(logits, dtype=np.float64)
    if temperature == 0:
        return int(np.argmax(logits))
    scaled = logits / temperature
    probs = np.exp(scaled - scaled.max())
    probs /= probs.sum()
    return int(rng.choice(len(probs), p=probs))


def generate(model: GPT, tokenizer: CharTokenizer, prompt: str, n_tokens: int, temperature: float = 1.0,
             seed: int = 0, on_text: Callable[[str], None] | None = None) -> str:
    """The prompt's continuation of n_tokens characters; on_text receives each character as it is made."""
    if temperature < 0:
        raise ValueError(f"temperature must be 0 (greedy) or positive, got {temperature}")
    rng = np.random.default_rng(seed)
    context = list(tokenizer.encode(prompt or start_text(tokenizer), source="the prompt"))
    out = []
    for _ in range(n_tokens):
        window = np.array(context[-model.config.seq_len:], dtype=np.int32)[None, :]  # (1, T)
        last = model.be.to_host(model.logits(window)[-1])  # (vocab,)
        token = choose_token(last, temperature, rng)
        context.append(token)
        ch = tokenizer.vocab[token]
        out.append(ch)
        if on_text:
            on_text(ch)
    return "".join(out)


def start_text(tokenizer: CharTokenizer) -> str:
    """What an empty prompt starts from: a newline when the vocabulary has one, else its first character."""
    return "\n" if "\n" in tokenizer.vocab else tokenizer.vocab[0]
