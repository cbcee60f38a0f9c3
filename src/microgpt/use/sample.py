"""Text generation from a trained model.

`choose_token` turns one row of logits into a token id: greedy at temperature
0, otherwise a draw from the tempered softmax, optionally cut to the top-k
tokens and to the nucleus (the most likely tokens whose probabilities add up
to top-p). `generate` extends a prompt one token at a time, streaming the text
through the tokenizer's incremental decoder (so a token that ends inside a
UTF-8 character waits for the rest of it); the model sees at most seq_len
tokens. With `cache` (the default) it runs through the model's own
`decoder()`: for GPT the prompt is run once and each new token reuses the keys
and values already computed, O(T) per token, and past seq_len the cache slides
(sliding-window attention over the last seq_len positions at every layer).
Without it, each token re-runs the model on the last seq_len tokens
(model/decode.py's `Rerun`). The two agree while the context fits in seq_len,
and for one-layer models always. With a `stop` text, generation ends as soon as
the text made contains it, and the text returned (and streamed) ends before it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

from microgpt.core.errors import ConfigError, DataError, Named
from microgpt.data.tokenizer import Tokenizer
from microgpt.model.decode import Rerun
from microgpt.use.choose import check_finite, check_sampling, choose_token, token_probs
from microgpt.use.speculative import Speculation


def generate(model, tokenizer: Tokenizer, prompt: str, n_tokens: int, temperature: float = 1.0, seed: int = 0,
             on_text: Callable[[str], None] | None = None, top_k: int = 0, top_p: float = 1.0,
             cache: bool = True, stop: str = "", speculative: bool | Speculation = False) -> str:
    """The prompt's continuation as text: n_tokens tokens of it, or, with `stop`, what comes before stop's first
    appearance, generation ending with the token that completes stop. on_text receives the same text as it is
    made: a piece per token (none while a character is incomplete, or while the end could begin stop), and at
    the end what an incomplete tail decodes to. With `speculative` (True, or a Speculation of speculative.py
    that counts what was accepted) the model's heads draft and the main head checks them."""
    check_sampling(temperature, top_k, top_p)
    speculation = Speculation() if speculative is True else speculative or None
    if speculation is not None and not cache:
        raise ConfigError(Named("speculative"), " checks its drafts against the KV cache, which ",
                          Named("cache", False), " turns off; drop one of them")
    rng = np.random.default_rng(seed)
    context = list(tokenizer.encode(prompt or tokenizer.start_text(), source="the prompt"))
    if not context:  # a tokenizer that drops whitespace (WordPiece) encodes a blank prompt to nothing
        raise DataError(f"the prompt {prompt!r} encodes to no tokens with this model's tokenizer "
                        f"({tokenizer.describe()}); give a prompt with a word in it, or none")
    if speculation is not None:
        tokens = speculation.tokens(model, context, n_tokens, lambda logits: token_probs(logits, temperature, top_k,
                                                                                          top_p), rng,
                                    greedy=temperature == 0)
    else:
        tokens = one_at_a_time(model.decoder() if cache else Rerun(model), context, n_tokens,
                               lambda logits: choose_token(logits, temperature, rng, top_k, top_p))
    text = tokenizer.decoder()
    made, shown = "", 0  # the text so far, and how much of it on_text has had
    for token in tokens:
        piece = text.add(token)
        made += piece
        if stop and stop in made[max(0, len(made) - len(piece) - len(stop) + 1):]:
            break
        ready = len(made) - held_back(made, stop)
        if on_text and ready > shown:
            on_text(made[shown:ready])
            shown = ready
    else:
        made += text.flush()
    if stop and stop in made:
        made = made[: made.index(stop)]
    if on_text and len(made) > shown:
        on_text(made[shown:])
    return made


def held_back(text: str, stop: str) -> int:
    """How many characters at the end of `text` begin `stop` without being all of it (wait before showing them)."""
    return next((n for n in range(min(len(stop) - 1, len(text)), 0, -1) if text.endswith(stop[:n])), 0)


def one_at_a_time(decoder, context: list[int], n_tokens: int, choose: Callable[[np.ndarray], int]) -> Iterator[int]:
    """n_tokens new tokens after `context` (which they are appended to), each chosen from the logits after the
    one before."""
    for count in range(n_tokens):
        logits = next_logits(context, decoder)  # (vocab,)
        check_finite(logits, count)
        token = choose(logits)
        context.append(token)
        yield token


def next_logits(context: list[int], decoder) -> np.ndarray:
    """Host logits (vocab,) for the token after context: the first call fills the decoder with the context (it
    keeps the last seq_len tokens), each later call feeds it the one token appended since."""
    model = decoder.model
    if decoder.consumed == 0:
        return model.be.to_host(decoder.prefill(context))[0]
    if decoder.consumed != len(context) - 1:
        raise ValueError(f"the decoder has seen {decoder.consumed} tokens, but the context grew to {len(context)}")
    return model.be.to_host(decoder.step(context[-1]))[0]
