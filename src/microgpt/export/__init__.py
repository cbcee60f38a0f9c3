"""Models that leave microgpt: a checkpoint as an ONNX model or a torch.nn.Module (docs/export.md).

Every family goes through its graph as one plan of steps (source.py, export_plan.py), which onnx_export.py and
torch_module.py each translate once. It imports use/ and model/ (and what they stand on); the CLI imports it.
`export` and `to_torch` refuse in Python's words (`out='m.bin'`, `format='onnx'`); the CLI calls
`write_export`, the same work, whose refusals say its flags (`--out m.bin`, `--format onnx`).
"""

from __future__ import annotations

from pathlib import Path

from microgpt.core.errors import Named, in_python_words

FORMATS = ("onnx", "torch")
PACKAGES = {"onnx": ("onnx", "onnxruntime"), "torch": ("torch",)}  # what each format imports
SUFFIXES = {".onnx": "onnx", ".pt": "torch", ".pth": "torch"}  # what --out's suffix chooses without a format


def to_torch(directory: str | Path, max_memory=None):
    """The checkpoint at `directory` as a torch.nn.Module (export/torch_module.py's ExportedModel, float32, cpu,
    eval mode): module(ids (batch, T) int64) -> logits (batch, T, vocab); it trains with any torch optimiser."""
    from microgpt.export.needs import need
    from microgpt.export.onnx_export import probe_ids
    from microgpt.export.source import read_source
    from microgpt.export.torch_export import build_torch, verify

    with in_python_words():
        need("torch")
        source = read_source(directory, max_memory)
        model = build_torch(source)
        ids = probe_ids(source.plan["vocab"], source.seq_len)
        verify(model, source.expected(ids), ids)
    return model


def export(directory: str | Path, format: str | None, out: str | Path, kv_cache: bool = False,
           overwrite: bool = False, max_memory=None) -> str:
    """Write the checkpoint at `directory` to `out` as `format` (onnx or torch; None: from out's suffix); a line
    saying what was written. ExportError (a ConfigError), CheckpointError or FileNotFoundError, each one line in
    Python's words, with nothing written."""
    with in_python_words():
        return write_export(directory, format, out, kv_cache, overwrite, max_memory)


def write_export(directory: str | Path, format: str | None, out: str | Path, kv_cache: bool = False,
                 overwrite: bool = False, max_memory=None) -> str:
    """`export`, its refusals in the command line's words (`microgpt export`)."""
    from microgpt.export.export_plan import ExportError
    from microgpt.export.files import check_out, write_atomically
    from microgpt.export.needs import need
    from microgpt.export.onnx_export import onnx_bytes, probe_ids
    from microgpt.export.source import read_source

    out = Path(out)
    check_out(out, overwrite)
    fmt = SUFFIXES.get(out.suffix.lower()) if format is None else format
    if fmt is None:
        raise ExportError(Named("out", str(out)), " does not say the format by its suffix (.onnx or .pt); add ",
                          *_alternatives("format", FORMATS))
    if fmt not in FORMATS:
        raise ExportError(Named("format", fmt), f" is not one of {', '.join(FORMATS)}")
    if kv_cache and fmt != "onnx":
        raise ExportError(Named("kv_cache", True), " is for ", Named("format", "onnx"),
                          " (the torch module runs whole windows)")
    for package in PACKAGES[fmt]:
        need(package)
    source = read_source(directory, max_memory)
    ids = probe_ids(source.plan["vocab"], source.seq_len)
    expected = source.expected(ids)
    if fmt == "onnx":
        data = onnx_bytes(source, expected, ids, kv_cache)
        write_atomically(out, lambda f: f.write(data))
        what = "an ONNX model" + (" with a KV cache" if kv_cache else "")
    else:
        from microgpt.export.torch_export import build_torch, verify
        from microgpt.export.torch_module import save

        model = build_torch(source)
        verify(model, expected, ids)
        write_atomically(out, lambda f: save(model, f))
        what = "a torch module (microgpt.export.torch_module.load reads it)"
    ops = [step["op"] for step in source.plan["steps"]]
    return (f"{out}: {source.describe} as {what}, from {directory}; its forward is {len(ops)} operations "
            f"({', '.join(dict.fromkeys(ops))})")


def _alternatives(key: str, values) -> list:
    """Named(key, a) " or " Named(key, b) ...: each value the setting may take."""
    parts = []
    for value in values:
        parts += [" or ", Named(key, value)] if parts else [Named(key, value)]
    return parts


__all__ = ["FORMATS", "export", "to_torch"]
