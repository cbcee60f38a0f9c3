"""microgpt: train and study small GPT language models from scratch, on characters or byte-level BPE tokens.

The compute lives behind a pluggable backend (`microgpt.backends`): NumPy on
the CPU, CuPy and cuBLAS on a GPU. The model families (`microgpt.model`: gpt,
ensemble and lookahead) are written once against that contract, with hand-written backward
passes and Adam, and read text through a tokenizer (`microgpt.data.tokenizer`).
`microgpt.train(...)` trains from Python, `microgpt.plan(...)` says what it would train (see
microgpt/training/api.py), and
`microgpt.load(DIR)` gives a trained model to sample, score and inspect
(microgpt/use/loaded.py).
"""

from microgpt.core.version import __version__

__all__ = ["__version__", "load", "plan", "train"]


def __getattr__(name: str):
    if name in ("train", "plan"):  # imported on first use, so `import microgpt` stays light
        from microgpt.training import api

        return getattr(api, name)
    if name == "load":
        from microgpt.core.errors import in_python_words
        from microgpt.use.loaded import load

        return in_python_words()(load)  # its refusals name settings as its keywords: max_memory=, not --max-memory
    raise AttributeError(f"module 'microgpt' has no attribute {name!r}")


def __dir__() -> list[str]:
    """What the module has, the names imported on first use included, for tab completion."""
    return sorted({*globals(), *__all__})
