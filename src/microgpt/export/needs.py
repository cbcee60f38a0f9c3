"""The optional packages an export needs, imported on first use, or one line naming what to install.

`onnx` builds and checks the graph, `onnxruntime` runs it (the export verifies the model it writes), both in
microgpt's `export` extra; `torch` is not in it (a large download of its own, as for the PyTorch
cross-checks): a CPU build is enough.
"""

from __future__ import annotations

import importlib

from microgpt.core.errors import Named
from microgpt.core.version import install_hint
from microgpt.export.export_plan import ExportError

HINTS = {
    "onnx": f"{install_hint('export')}: onnx and onnxruntime",
    "onnxruntime": f"{install_hint('export')}: onnx and onnxruntime",
    "torch": "pip install torch (a CPU build will do; it is not in the export extra, being a large download)",
}
WHAT_FOR = {"onnx": (Named("format", "onnx"), " builds the graph with it"),
            "onnxruntime": (Named("format", "onnx"), " verifies the model in it"),
            "torch": (Named("format", "torch"), " builds a torch.nn.Module")}


class MissingPackage(ExportError):
    """A package an export needs is not importable; the message says what to install."""


def need(name: str):
    """The module `name`, or MissingPackage naming the install command."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise MissingPackage(f"{name} is not installed ({exc}) and ", *WHAT_FOR[name], f"; {HINTS[name]}") from None
