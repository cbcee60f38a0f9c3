"""Speculative sampling with a model's own draft heads: the heads propose the next K tokens, one pass of the model
over them checks them all, and the text comes out distributed exactly as the main head's.

A model that can draft gives `speculative_decoder()` (model/lookahead/speculative.py): `prefill(context)`
returns the main head's logits after the context, `feed(tokens)` the main head's logits after each token fed,
`keep(m)` keeps the first m tokens of the last pass, and `draft(token, count, pick)` gives the draft heads'
drafts and logits after the last one kept (pick None: their argmaxes, at temperature 0), `token` being the next
(heads that read the tokens before theirs, hydra heads, read it and the drafts before their own). Each round
feeds the next token (already chosen) with K drafts for the tokens after it, drawn from the heads'
distributions q_k; the pass gives the main head's distribution p after each. Draft k is kept with
probability min(1, p(d) / q_k(d)) while all before it were;
at the first one refused, the token there is drawn from the residual max(0, p - q_k), normalised, and the round
ends (Leviathan et al. 2023, "Fast Inference from Transformers via Speculative Decoding"; Chen et al. 2023).
Every token is then distributed as the main head's (sample.token_probs of its logits), so at temperature 0,
where every distribution is all on its argmax, the text is plain greedy sampling's. There (`greedy`) the rule
comes down to comparing argmaxes, which is what is done: a draft is the head's argmax, kept while it is the
main head's, and the first one that is not is replaced by the main head's. Above 0, tokens are drawn by the
inverse of the cumulative distribution (`draw`), as numpy's Generator.choice does, without its checks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from microgpt.core.errors import ConfigError, Named
from microgpt.use.choose import check_finite


def draw(p: np.ndarray, rng: np.random.Generator) -> int:
    """A token drawn from the distribution p (vocab,), which need not be normalised: the first whose cumulative
    share passes a uniform draw (a token of probability 0 is never drawn)."""
    cumulative = np.cumsum(p)  # (vocab,)
    cumulative /= cumulative[-1]
    return int(np.searchsorted(cumulative, rng.random(), side="right"))


def accept_or_resample(draft: int, p: np.ndarray, q: np.ndarray, rng: np.random.Generator) -> tuple[bool, int]:
    """(kept, token): the draft, drawn from q (vocab,), is kept with probability min(1, p(d) / q(d)); otherwise a
    token drawn from max(0, p - q), normalised. The token so chosen is distributed as p."""
    if rng.random() < min(1.0, p[draft] / q[draft]):
        return True, draft
    return False, draw(np.maximum(p - q, 0.0), rng)  # not all 0, since p(d) < q(d) and both sum to 1


@dataclass
class Speculation:
    """Counts of one speculative generation: passes over the model, tokens made, and per draft head how many of
    its drafts were checked and kept."""

    passes: int = 0
    made: int = 0  # tokens
    checked: list[int] = field(default_factory=list)  # per head
    kept: list[int] = field(default_factory=list)  # per head

    def tokens(self, model, context: list[int], n_tokens: int, probs: Callable[[np.ndarray], np.ndarray],
               rng: np.random.Generator, greedy: bool = False) -> Iterator[int]:
        """n_tokens new tokens after `context` (appended to it), `probs` turning logits into the distribution to
        sample from (temperature, top-k, top-p); `greedy` (temperature 0) takes every argmax instead."""
        decoder = self.decoder_for(model)
        if not self.checked:
            self.checked, self.kept = [0] * decoder.drafts, [0] * decoder.drafts
        if n_tokens == 0:
            return
        main = decoder.prefill(context)  # (vocab,)
        check_finite(main, 0)
        token = int(np.argmax(main)) if greedy else draw(probs(main), rng)  # the next token: the main head's
        done = 0  # tokens made so far
        while True:
            room = min(decoder.drafts, n_tokens - done - 1)  # drafts that would still be wanted after `token`
            if room == 0:  # `token` is the last one wanted: no pass to check it
                context.append(token)
                self.made += 1
                yield token
                return
            if greedy:  # the heads' argmaxes, in one call where the decoder can (hydra heads on the cpu backend)
                draft_probs = None
                drafted, draft_logits = decoder.draft(token, room, None)
                check_finite(draft_logits, done)
            else:
                draft_probs = []  # the heads' distributions q, as they are drawn from
                drafted, _ = decoder.draft(token, room, self.picker(done, draft_probs, probs, rng))
            fed = [token] + drafted
            mains = decoder.feed(fed)  # (n, vocab)
            check_finite(mains, done)
            self.passes += 1
            kept, token = self.judge(fed, mains, draft_probs, probs, rng)
            decoder.keep(kept)
            for t in fed[:kept]:
                context.append(t)
                yield t
            done += kept
            self.made += kept
            if done >= n_tokens:
                return

    @staticmethod
    def picker(done: int, draft_probs: list, probs, rng) -> Callable[[np.ndarray], int]:
        """What turns a head's logits into its draft above temperature 0: a token drawn from the head's
        distribution q, which is appended to draft_probs for the judging."""

        def pick(logits: np.ndarray) -> int:
            check_finite(logits, done)
            draft_probs.append(probs(logits))
            return draw(draft_probs[-1], rng)

        return pick

    def judge(self, fed: list[int], mains: np.ndarray, draft_probs, probs, rng) -> tuple[int, int]:
        """(tokens of `fed` kept, the next token): each draft fed[k + 1] judged against the main head's logits
        mains[k] after the token before it. Without draft_probs (greedy) a draft is kept when it is the main head's
        argmax; with them by accept_or_resample. The next token replaces the first draft refused, or, every draft
        kept, is the main head's after the last of them (its argmax, or drawn from its distribution)."""
        kept, drafts = 1, len(fed) - 1
        if draft_probs is None:
            best = np.argmax(mains, axis=1)  # (n,)
            for k in range(drafts):
                self.checked[k] += 1
                if fed[k + 1] != best[k]:
                    return kept, int(best[k])
                self.kept[k] += 1
                kept += 1
            return kept, int(best[drafts])
        targets = probs(mains)  # (n, vocab): the main head's p after each token fed
        for k in range(drafts):
            self.checked[k] += 1
            accepted, chosen = accept_or_resample(fed[k + 1], targets[k], draft_probs[k], rng)
            if not accepted:
                return kept, chosen
            self.kept[k] += 1
            kept += 1
        return kept, draw(targets[drafts], rng)

    @staticmethod
    def decoder_for(model):
        """The model's speculative decoder; a ConfigError, before anything is sampled, where it has none."""
        if not hasattr(model, "speculative_decoder"):
            raise ConfigError(Named("speculative"), " needs a model with draft heads (a lookahead run: microgpt "
                              "train ... --lookahead K); this one has none: sample without ", Named("speculative"))
        return model.speculative_decoder()

    def report(self) -> str:
        """'speculative: 400 tokens in 190 passes (2.11 per pass); drafts kept: head 1 71% of 190, head 2 ...'."""
        rates = ", ".join(f"head {k + 1} {kept / checked:.0%} of {checked}" if checked else f"head {k + 1} not reached"
                          for k, (kept, checked) in enumerate(zip(self.kept, self.checked)))
        per_pass = self.made / self.passes if self.passes else 0.0
        tokens, passes = ("token" if self.made == 1 else "tokens"), ("pass" if self.passes == 1 else "passes")
        return (f"speculative: {self.made} {tokens} in {self.passes} {passes} ({per_pass:.2f} per pass); drafts "
                f"kept: {rates}")
