"""The names a setting can choose from, each mapped to the module that implements it.

Plain strings at the ground, so that a setting's check can list the choices
without importing anything above it. A backend's module is imported only when it
is chosen (`microgpt.backends`); a family's when it is chosen
(`microgpt.model.family`), and when the train command lists every setting
there is, since each family declares its own (settings/known.py). A new family is a folder under `model/`
and one line here; a new backend, a module under `backends/` and one line here.
"""

from __future__ import annotations

BACKENDS: dict[str, tuple[str, str]] = {  # --backend NAME -> (module, class); "auto" picks among them
    "numpy": ("microgpt.backends.numpy_backend", "NumpyBackend"),
    "cpu": ("microgpt.backends.cpu_backend", "CpuBackend"),
    "cuda": ("microgpt.backends.cuda", "CuBLASBackend"),
    "cublas": ("microgpt.backends.cuda", "CuBLASBackend"),
}

PRECISIONS = ("fp32", "bf16")  # --precision NAME: of the inputs of every matrix product (backends/bf16.py)

FAMILIES: dict[str, str] = {  # --family NAME -> the module that is the family (model/family.py says what it gives)
    "gpt": "microgpt.model.gpt",
    "ensemble": "microgpt.model.ensemble",
    "lookahead": "microgpt.model.lookahead",
    "graph": "microgpt.model.graph",
}
