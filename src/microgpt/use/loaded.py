"""A trained model to use from Python: `microgpt.load(DIR)`.

    import microgpt
    model = microgpt.load("checkpoints/python-docs")
    print(model.sample(200, prompt="def ", temperature=0.8))
    print(model.complete("\n12 + 34 ="))  # greedy, up to the first newline (the prompt as given)
    print(model.evaluate(open("held_out.txt").read()).bits_per_char)
    logits = model.logits("def f")  # (tokens, vocab): the next-token logits after each prefix
    model.routing("To be, or").weights  # an ensemble's: (tokens, experts) router weights, and .prior's share
    model.fill("The qu_ck brown fox").text  # each _ filled from both sides (gap heads) or from the left
    model.trace("To be").attention(0, 1)  # every node's output by its path, heads, the logit lens (docs/inspect.md)
    model.loss("To be, or not", ablate=["blocks.0.attn.heads[2]"])  # the loss with a head zeroed

It loads a checkpoint onto a backend started as `train` starts one (`auto`:
CUDA where a GPU is usable, else the cpu backend, with `threads`), and offers
what `microgpt sample` and `microgpt eval` do, with the same checks; an error names each setting as these
methods take it (`temperature=-1.0`, core/errors.py `in_python_words`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from microgpt.backends import start_backend
from microgpt.core.checks import format_bytes
from microgpt.core.errors import ConfigError, in_python_words
from microgpt.data.tokenizer import Tokenizer
from microgpt.model.checkpoint import load_checkpoint
from microgpt.model.family import family
from microgpt.model.memory import estimate_training_bytes
from microgpt.settings.sources import Settings
from microgpt.use.evaluate import Evaluation, evaluate
from microgpt.use.fill import DEFAULT_MASK, Filled, fill_text
from microgpt.use.inspect import Trace, ablated_loss, trace_text
from microgpt.use.inspect.interventions import edits_for
from microgpt.use.inspect.windows import Graph
from microgpt.use.routing import Routing, no_routing, routing_of
from microgpt.use.sample import generate
from microgpt.use.speculative import Speculation


@dataclass
class LoadedModel:
    """A checkpoint's model (of any family) and tokenizer, ready to sample, score and inspect."""

    model: object
    family_name: str
    tokenizer: Tokenizer
    path: Path
    max_memory: int  # the cap a batch of `evaluate` is held to
    backend_note: str | None = None  # with backend "auto", which one it picked and why (as train says it)

    def fitting_batch(self, batch_size: int) -> int:
        """The largest batch of at most `batch_size` windows whose step fits `max_memory` (estimated as for a
        training step, which holds more than scoring does); a ConfigError when not even one window fits."""
        def needed(batch: int) -> int:
            return estimate_training_bytes(family(self.family_name), self.model.config, batch, self.model.be)

        if needed(batch_size) <= self.max_memory:
            return batch_size
        if needed(1) > self.max_memory:
            raise ConfigError(f"scoring one window of {self.path} needs about {format_bytes(needed(1))}, over "
                              f"--max-memory {format_bytes(self.max_memory)}; raise --max-memory")
        low, high = 1, batch_size  # needed(low) fits, needed(high) does not
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (middle, high) if needed(middle) <= self.max_memory else (low, middle)
        return low

    @property
    def seq_len(self) -> int:
        return self.model.config.seq_len

    @in_python_words()
    def sample(self, n_tokens: int = 200, prompt: str = "", temperature: float = 0.8, top_k: int = 0,
               top_p: float = 1.0, seed: int = 0, cache: bool = True,
               on_text: Callable[[str], None] | None = None, speculative: bool | Speculation = False) -> str:
        """n_tokens tokens of text continuing `prompt` (the tokenizer's start text when empty, a newline where it
        has one), without the prompt itself, as `microgpt sample` prints them; with `speculative`, drafted by the
        model's lookahead heads (pass a microgpt.use.speculative.Speculation to read how many drafts were kept)."""
        return generate(self.model, self.tokenizer, prompt, n_tokens, temperature=temperature, seed=seed,
                        on_text=on_text, top_k=top_k, top_p=top_p, cache=cache, speculative=speculative)

    @in_python_words()
    def complete(self, prompt: str, stop: str = "\n", max_tokens: int | None = None) -> str:
        """The greedy continuation of `prompt` up to the first `stop` (left out), at most max_tokens tokens (seq_len
        by default, a context's worth)."""
        return generate(self.model, self.tokenizer, prompt, self.seq_len if max_tokens is None else max_tokens,
                        temperature=0, stop=stop)

    @in_python_words()
    def evaluate(self, text: str, stride: int | None = None, batch_size: int = 32, max_positions: int | None = None,
                 what: str = "the text") -> Evaluation:
        """NLL per token, perplexity and bits per character of `text`, as `microgpt eval` scores a file (stride
        seq_len by default, 1 for the exact figure; in batches of `batch_size` windows, fewer where that would
        not fit `max_memory`)."""
        tokens = self.tokenizer.encode(text, source=what)
        return evaluate(self.model, tokens, batch_size=self.fitting_batch(batch_size), max_positions=max_positions,
                        what=what, stride=stride, tokenizer=self.tokenizer)

    @in_python_words()
    def routing(self, text: str, stride: int | None = None, batch_size: int = 32) -> Routing:
        """An ensemble's routing of `text` (use/routing.py): for each position, each transformer expert's router
        weight (.weights, summing to 1) and the prior's share (.prior), each position read with the context
        `evaluate` scores it with at the same stride (seq_len by default); a ConfigError for another family."""
        if not hasattr(self.model, "routing"):
            raise no_routing(str(self.path), self.family_name)
        ids = self.tokenizer.encode(text, source="the text")
        stride = self.seq_len if stride is None else stride
        return routing_of(self.model, self.tokenizer, ids, batch_size=batch_size, stride=stride, what=str(self.path),
                          family_name=self.family_name)

    @in_python_words()
    def fill(self, text: str, mask: str = DEFAULT_MASK) -> Filled:
        """`text` with each `mask` character filled greedily (use/fill.py): by the gap heads from the text on both
        sides where the model has them, else by the main head from the text before; .used says which."""
        return fill_text(self.model, self.tokenizer, text, mask)

    @cached_property
    def graph(self) -> Graph:
        """The model as its graph, with its weights (use/inspect/windows.py): what trace and loss run."""
        return Graph(self)

    def trace(self, text, ablate=(), mode: str = "zero", patch: dict | None = None) -> Trace:
        """Every node's output over `text` by its path, as [positions, width] arrays with the tokens beside them
        (use/inspect: t[path], t.paths(), t.tokens, t.attention(layer, head), t.logit_lens()), with ablations or
        patches as `loss` takes them."""
        ids = self.graph.ids(text)
        return trace_text(self.graph, ids, edits_for(self.graph, ids, ablate, mode, patch))

    def loss(self, text, ablate=(), mode: str = "zero", patch: dict | None = None) -> float:
        """The mean -log p (nats) of each next token of `text`, with each path of `ablate` zeroed (mode "zero") or
        set to its mean over the text ("mean"), and each path of `patch` taken from another text's trace."""
        return ablated_loss(self.graph, text, ablate, mode, patch)

    def logits(self, ids) -> np.ndarray:
        """Next-token logits as a host float array: for a text or a 1-D id sequence of at most seq_len tokens,
        (len, vocab), row t scoring the token after ids[: t + 1]; for a 2-D batch (B, T), (B, T, vocab)."""
        if isinstance(ids, str):
            ids = self.tokenizer.encode(ids, source="the text")
        ids = np.asarray(ids, dtype=np.int32)
        batch = ids[None, :] if ids.ndim == 1 else ids  # (B, T)
        if batch.ndim != 2 or not 1 <= batch.shape[1] <= self.seq_len:
            raise ValueError(f"logits takes ids of shape (T,) or (B, T) with 1 <= T <= seq_len {self.seq_len}, "
                             f"got {ids.shape}")
        out = self.model.be.to_host(self.model.logits(batch)).reshape(*batch.shape, -1)  # (B, T, vocab)
        return out[0] if ids.ndim == 1 else out


def load(directory: str | Path, backend: str | None = None, threads: int | None = None,
         max_memory: int | str | None = None, precision: str | None = None) -> LoadedModel:
    """The checkpoint at `directory` on `backend` (auto by default, cpu, numpy or cuda) with `threads`, refused
    above `max_memory` (bytes or "512MiB"; the train default), its products at `precision` (fp32 by default, or
    bf16: docs/precision.md), checked as `sample` checks it. The settings
    are read and checked as train's are (settings/sources.py). A directory that is not there raises
    FileNotFoundError; a damaged or foreign one, CheckpointError (a ValueError) in one line.

    The model it gives (a LoadedModel) offers:
    """
    settings = Settings({"backend": backend, "threads": threads, "max_memory": max_memory, "precision": precision})
    started, note = start_backend(settings.value("backend"), None, settings.value("threads"))
    started.use_precision(settings.value("precision"))
    model, tokenizer, info = load_checkpoint(directory, started, max_memory=settings.value("max_memory"))
    return LoadedModel(model, info["family"], tokenizer, Path(directory), settings.value("max_memory"), note)


def offers() -> str:
    """What a LoadedModel gives, a line each, from its own fields and methods (for `help(microgpt.load)`)."""
    lines = [f"    .{name}: {kind}" for name, kind in (("model", "the family's model (its config, params, backend)"),
                                                       ("family_name", "gpt, ensemble or lookahead"),
                                                       ("tokenizer", "its tokenizer (encode, decode, size)"),
                                                       ("seq_len", "the context length in tokens"))]
    for name in ("sample", "complete", "evaluate", "logits", "routing", "fill", "trace", "loss"):
        first_sentence = " ".join(getattr(LoadedModel, name).__doc__.split("\n\n")[0].split()).split(". ")[0]
        lines.append(f"    .{name}(...): {first_sentence.rstrip('.')}")
    return "\n".join(lines)


load.__doc__ = load.__doc__.rstrip() + "\n" + offers()
