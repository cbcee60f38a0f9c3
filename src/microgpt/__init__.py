"""microgpt: train and study small character-level GPT models from scratch.

The compute lives behind a pluggable backend (`microgpt.backends`): NumPy on
the CPU, CuPy and cuBLAS on a GPU. The model (`microgpt.model`) is written once
against that contract, with a hand-written backward pass and Adam.
"""

__version__ = "0.1.0"
