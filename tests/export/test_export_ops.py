"""Every graph primitive through both exporters: each case of tests/graph_cases*.py (one per op, the fused and
unfused forms, every mask, prior kind and router, odd widths and heads [1, 3, 2], values read twice) built
with perturbed weights (no bias at 0, no gamma at 1), exported as ONNX (checked with full shape inference)
and as the torch module, and held to the graph's own logits; with a KV cache where the graph allows one,
decoded a token at a time. The calculator prior, which has no export, is refused by name.

Tolerances: float32 on every side, the same operations in other orders; measured at most 3e-6 at these
logits (a few units). ONNX 1e-4 and torch 1e-5, the bounds the checkpoint tests hold (test_export_onnx.py
and test_export_torch.py say why); a wrong op misses them by orders of magnitude.
"""

from __future__ import annotations

import numpy as np
import pytest

from extras import need
from graph_case_registry import CASES, case, case_seed, chars_of
from graph_gradcheck import perturb
from microgpt.backends import get_backend
from microgpt.data.tokenizer import CharTokenizer
from microgpt.export.export_plan import ExportError
from microgpt.export.source import source_of

ONNX_TOLERANCE, TORCH_TOLERANCE = 1e-4, 1e-5  # see the module docstring


def model_of(name: str):
    """(the case's model with perturbed float32 weights, its tokenizer, seq_len)."""
    model, seq_len = case(name, get_backend("numpy"), case_seed(name))
    perturb(model, case_seed(name) + 1)
    return model, CharTokenizer(chars_of(name)), seq_len


def exportable(name: str) -> bool:
    """Whether the case has an export: every case but those whose logits read a calculator prior still on at
    step 0 (the one primitive without one)."""
    model, tokenizer, _ = model_of(name)
    calculator = any(n.op.name == "prior" and n.params["kind"] == "calculator" for n in model.program.nodes)
    try:
        source_of(model, "graph", tokenizer)
    except ExportError:
        assert calculator, name  # nothing else is refused
        return False
    return True


EXPORTABLE = [name for name in sorted(CASES) if exportable(name)]


def ids_for(vocab: int, seq_len: int) -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    return [rng.integers(0, vocab, size=shape).astype(np.int64) for shape in ((2, seq_len), (3, max(1, seq_len - 2)))]


@pytest.mark.parametrize("name", EXPORTABLE)
def test_every_primitive_exports_to_onnx(name):
    need("onnxruntime")
    from microgpt.export.onnx_export import build_onnx, refuse_cache, session, verify

    model, tokenizer, seq_len = model_of(name)
    source = source_of(model, "graph", tokenizer)
    run = session(build_onnx(source).SerializeToString())  # build_onnx runs onnx.checker (full_check)
    for ids in ids_for(tokenizer.size, seq_len):
        got = run.run(["logits"], {"ids": ids})[0]
        np.testing.assert_allclose(got, source.expected(ids), rtol=0, atol=ONNX_TOLERANCE)
    try:
        refuse_cache(source)
    except ExportError:
        return  # a graph a cache cannot serve: refused (test_export_onnx.py checks the line)
    ids = ids_for(tokenizer.size, seq_len)[0]
    verify(build_onnx(source, kv_cache=True), source, source.expected(ids), ids, kv_cache=True)


@pytest.mark.parametrize("name", EXPORTABLE)
def test_every_primitive_exports_to_torch(name):
    torch = need("torch")
    from microgpt.export.torch_export import build_torch

    model, tokenizer, seq_len = model_of(name)
    source = source_of(model, "graph", tokenizer)
    module = build_torch(source)
    with torch.no_grad():
        for ids in ids_for(tokenizer.size, seq_len):
            got = module(torch.from_numpy(ids)).numpy()
            np.testing.assert_allclose(got, source.expected(ids), rtol=0, atol=TORCH_TOLERANCE)


@pytest.mark.parametrize("name", sorted(set(CASES) - set(EXPORTABLE)))
def test_the_calculator_prior_is_refused_by_name(name):
    model, tokenizer, _ = model_of(name)
    with pytest.raises(ExportError, match="the calculator prior parses the text"):
        source_of(model, "graph", tokenizer)


def test_the_cases_reach_every_op_of_both_exporters():
    from microgpt.export.onnx_ops import Emitter

    reached = set()
    for name in EXPORTABLE:
        model, tokenizer, _ = model_of(name)
        reached |= {step["op"] for step in source_of(model, "graph", tokenizer).plan["steps"]}
    written = {attr.removeprefix("op_") for attr in dir(Emitter) if attr.startswith("op_")}
    assert written == reached, f"no case reaches {sorted(written - reached)}; one reaches {sorted(reached - written)}"
    need("torch")
    from microgpt.export import torch_module
    assert {a.removeprefix("op_") for a in dir(torch_module.ExportedModel) if a.startswith("op_")} == written
