"""Held-out evaluation: negative log-likelihood, perplexity and bits per character of a text.

Every token position t from seq_len on is scored once, in windows of seq_len tokens that each score their
last S positions (the stride; the last window may repeat a few, scored once). The stride trades context
for speed: a token gets between seq_len - S + 1 and seq_len tokens of context, and a text takes 1/S as many
windows. The default, S = seq_len, reads the text in consecutive windows, each token with 1 to seq_len
tokens of context as training reads them: a window per seq_len tokens, the cost of a training step's
forward. S = 1 is the exact figure, every token with its full seq_len tokens of context: a window per token,
about seq_len times the work (a window's hidden states depend on where it starts, so nothing carries from
one window to the next). The NLL is per token, which depends on the tokenizer; bits per character divides
the same total by the characters the scored tokens stand for, so models with different tokenizers compare
on it. Windows are batched (many per forward), each batch cut into a slice per backend thread as training
cuts its steps, and run through the family's ordinary forward (`logits`); only the scored rows of the
logits are read back, and the log-softmax runs on the host in each thread (its exponentials in float32,
every sum in float64). With
stride 1 a GPT computes only the scored row past its last block's keys and values (`GPT.last_logits`).
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from functools import partial

import numpy as np

from microgpt.core.errors import DataError, Named, UnsoundOutputs
from microgpt.model.thread_split import in_slices, slice_count


@dataclass(frozen=True)
class Evaluation:
    positions: int  # tokens scored
    nll: float  # mean negative log-likelihood per token, in nats
    seconds: float
    characters: int  # characters of text the scored tokens stand for (the positions, for the char tokenizer)

    @property
    def perplexity(self) -> float:
        """exp(nll), per token; infinite for a model so bad that exp overflows (nll past about 709 nats)."""
        return math.exp(self.nll) if self.nll < math.log(sys.float_info.max) else math.inf

    @property
    def bits_per_char(self) -> float:
        """The total NLL in bits over the characters scored: what compares across tokenizers. NaN where the
        scored tokens start no character (a few BPE tokens inside one multi-byte character)."""
        if self.characters == 0:
            return math.nan
        return self.nll * self.positions / self.characters / math.log(2)


def scorable_positions(n_tokens: int, seq_len: int, what: str = "the text", most: int | None = None) -> int:
    """How many positions a text of n_tokens has with a full seq_len context, at most `most`; a DataError when
    none."""
    if n_tokens < seq_len + 1:
        raise DataError(
            f"{what} has {n_tokens} tokens, fewer than seq_len + 1 = {seq_len + 1}: the model reads "
            f"{seq_len} tokens of context before each one it scores; give a longer text"
        )
    return n_tokens - seq_len if most is None else min(n_tokens - seq_len, most)


def evaluate(model, tokens: np.ndarray, batch_size: int = 32, max_positions: int | None = None,
             what: str = "the text", stride: int | None = None, on_progress=None, tokenizer=None) -> Evaluation:
    """Mean NLL of tokens[t] for t = seq_len, seq_len + 1, ... (at most max_positions), each scored once in a window
    that ends at most stride - 1 positions after it (stride 1: exactly seq_len tokens of context; None, the
    default: stride seq_len), for a model of any family. `on_progress(done, total)`, when given, hears of each
    batch: positions scored so far, of all. `tokenizer` counts the characters the scored tokens stand for
    (without one, a token is a character)."""
    seq_len = model.config.seq_len
    stride = seq_len if stride is None else stride
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    if not 1 <= stride <= seq_len:
        raise DataError(Named("stride", stride), f" must be between 1 and the model's seq_len {seq_len}")
    if not hasattr(tokens, "chunks"):  # a prepared dataset's split is read a window at a time, never whole
        tokens = np.asarray(tokens, dtype=np.int32)
    positions = scorable_positions(len(tokens), seq_len, what, max_positions)
    end = seq_len + positions  # one past the last scored position
    firsts = np.arange(seq_len, end, stride)  # (windows,) the first position each window scores
    rows = np.arange(seq_len - stride, seq_len)  # (S,) the logits rows that can be scored
    start = time.perf_counter()
    total = 0.0  # float64 sum of -log p over the scored positions
    characters = 0
    for i in range(0, len(firsts), batch_size):
        first = firsts[i : i + batch_size]  # (B,)
        last = np.minimum(first + stride, end) - 1  # (B,) the last position each window scores
        starts = last - seq_len  # (B,) row j of a window predicts position starts + j + 1
        spans = np.stack([tokens[s : s + seq_len + 1] for s in starts]).astype(np.int32)  # (B, T+1)
        windows = spans[:, :seq_len]  # (B, T)
        targets = spans[:, seq_len - stride + 1 :]  # (B, S): the tokens the scored rows predict
        scored = starts[:, None] + rows[None, :] + 1 >= first[:, None]  # (B, S): the last window may repeat some
        nll = scored_nll(model, windows, targets, stride)  # (B*S,)
        total += float(np.sum(nll[scored.reshape(-1)]))
        kept = targets.reshape(-1)[scored.reshape(-1)]  # (scored,) each position once
        characters += len(kept) if tokenizer is None else tokenizer.count_characters(kept)
        if on_progress is not None:
            on_progress(int(last[-1]) + 1 - seq_len, positions)
    model.be.sync()
    if not math.isfinite(total):
        raise UnsoundOutputs(f"the model's outputs on {what} are not finite; its weights are unusable, retrain it "
                             "(with a lower --lr if it diverged)")
    return Evaluation(positions=positions, nll=total / positions, seconds=time.perf_counter() - start,
                      characters=characters)


def scored_nll(model, windows: np.ndarray, targets: np.ndarray, stride: int) -> np.ndarray:
    """-log p (B*S,), float64, of targets (B, S), the tokens that the last S = stride rows of windows (B, T)
    predict: for stride 1 through the model's `last_logits` where it has one (GPT: its last block runs those
    rows alone, its windows split over the backend's streams), else through its forward, the windows cut into
    a slice per backend stream, run at once."""
    batch, seq_len = windows.shape
    if stride == 1 and hasattr(model, "last_logits"):
        logits = np.concatenate(in_slices(model.be, model.last_logits, windows))  # (B, vocab)
        return nll_rows(logits, targets.reshape(-1))

    def slice_nll(rows: np.ndarray) -> np.ndarray:
        logits = model.logits(windows[rows]).reshape(len(rows), seq_len, -1)  # (b, T, vocab)
        scored = logits if stride == seq_len else logits[:, seq_len - stride :].copy()  # (b, S, vocab)
        return nll_rows(model.be.to_host(scored).reshape(len(rows) * stride, -1), targets[rows].reshape(-1))

    slices = np.array_split(np.arange(batch), slice_count(model.be, batch))  # contiguous rows of windows
    return np.concatenate(model.be.run_streams([partial(slice_nll, rows) for rows in slices]))  # (B*S,)


def nll_rows(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """-log softmax(logits)[target] per row, float64 (rows,), for logits (rows, vocab) and targets (rows,): the
    logits taken as float32 (what the backends compute them in, so a float64 copy of them gives the same bits)
    and their exponentials in float32, their sums and the logarithm in float64 (within about 1e-7 nats of a
    float64 log-softmax, at a quarter of its time for a vocabulary of thousands)."""
    logits = np.asarray(logits, dtype=np.float32)
    top = logits.max(axis=1, keepdims=True)  # (rows, 1)
    shifted = logits - top  # (rows, vocab), at most 0
    np.exp(shifted, out=shifted)
    log_sum = top[:, 0].astype(np.float64) + np.log(shifted.sum(axis=1, dtype=np.float64))  # (rows,)
    return log_sum - logits[np.arange(len(targets)), targets].astype(np.float64)
