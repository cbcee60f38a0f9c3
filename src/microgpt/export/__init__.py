"""Models that leave microgpt: a checkpoint as an ONNX model or a torch.nn.Module (docs/export.md).

Every family goes through its graph as one plan of steps (source.py, export_plan.py), which onnx_export.py and
torch_module.py each translate once. It imports use/ and model/ (and what they stand on); the CLI imports it.
"""

from __future__ import annotations

from pathlib import Path

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

    need("torch")
    source = read_source(directory, max_memory)
    model = build_torch(source)
    ids = probe_ids(source.plan["vocab"], source.seq_len)
    verify(model, source.expected(ids), ids)
    return model


def export(directory: str | Path, fmt: str | None, out: str | Path, kv_cache: bool = False, overwrite: bool = False,
           max_memory=None) -> str:
    """Write the checkpoint at `directory` to `out` as `fmt` (onnx or torch; None: from out's suffix); a line
    saying what was written. ExportError (a ConfigError), CheckpointError or FileNotFoundError, each one line,
    with nothing written."""
    from microgpt.export.export_plan import ExportError
    from microgpt.export.files import check_out, write_atomically
    from microgpt.export.needs import need
    from microgpt.export.onnx_export import onnx_bytes, probe_ids
    from microgpt.export.source import read_source

    out = Path(out)
    check_out(out, overwrite)
    fmt = SUFFIXES.get(out.suffix.lower()) if fmt is None else fmt
    if fmt is None:
        raise ExportError(f"--out {out} does not say the format by its suffix (.onnx or .pt); add --format "
                          f"{' or --format '.join(FORMATS)}")
    if fmt not in FORMATS:
        raise ExportError(f"--format {fmt!r} is not one of {', '.join(FORMATS)}")
    if kv_cache and fmt != "onnx":
        raise ExportError("--kv-cache is for --format onnx (the torch module runs whole windows)")
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


__all__ = ["FORMATS", "export", "to_torch"]
