"""`microgpt export --format onnx`: for every family and tokenizer the model passes onnx.checker with full
shape inference, takes ids [batch, T] with any batch and T up to seq_len, and ONNX Runtime's logits match
`microgpt.load(DIR)`'s on the cpu; with --kv-cache it decodes a prompt and then a token at a time, past seq_len
(the cache sliding), as microgpt's own decoder does; the docs' greedy decoder writes what `sample
--temperature 0` writes. Skipped, with the reason, where onnx or onnxruntime is missing (the export extra).

Tolerance 1e-4 (the issue's): float32 on both sides, the same operations in other orders (matmul blocking,
the softmax's and LayerNorm's sums, the router's host NumPy against ONNX Runtime's kernels); measured at most
5e-6 on these models. A wrong op (a transposed weight, a RoPE pair crossed, a mask off by one, a router
reading the wrong stream) moves the logits by 1e-2 or more.
"""

from __future__ import annotations

import json
import re
import runpy
from pathlib import Path

import numpy as np
import pytest

import microgpt
from export_cases import CACHEABLE, CASES, ROOT, SEQ_LEN, checkpoint, probe
from extras import need
from microgpt.cli import main

onnx = need("onnx")
ort = need("onnxruntime")

TOLERANCE = 1e-4  # see the module docstring
SHAPES = [(1, 1), (3, 5), (2, SEQ_LEN)]  # (batch, T): one token, a ragged middle, a full window


def exported(case: str, where: Path, *flags: str) -> Path:
    out = where / f"{case}{'-kv' if flags else ''}.onnx"
    assert main(["export", str(checkpoint(case)), "--format", "onnx", "--out", str(out), *flags]) == 0
    return out


def session(path: Path):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("case", list(CASES))
def test_onnx_runtime_gives_microgpts_logits(case, tmp_path, capsys):
    path = exported(case, tmp_path)
    assert capsys.readouterr().out.startswith(f"{path}: ")
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)  # strict shape inference included
    onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
    assert [i.name for i in model.graph.input] == ["ids"] and [o.name for o in model.graph.output] == ["logits"]
    assert [d.dim_param for d in model.graph.input[0].type.tensor_type.shape.dim] == ["batch", "T"]
    loaded = microgpt.load(checkpoint(case))  # the cpu backend (auto, without a GPU)
    run = session(path)
    for batch, length in SHAPES:
        ids = probe(loaded.tokenizer.size, batch, length, seed=batch)
        got = run.run(["logits"], {"ids": ids})[0]
        assert got.shape == (batch, length, loaded.tokenizer.size)
        np.testing.assert_allclose(got, loaded.logits(ids.astype(np.int32)), rtol=0, atol=TOLERANCE)
    meta = run.get_modelmeta().custom_metadata_map
    assert json.loads(meta["microgpt.tokenizer"]) == loaded.tokenizer.to_json()
    assert int(meta["microgpt.seq_len"]) == SEQ_LEN and json.loads(meta["microgpt.kv_cache"]) is None


@pytest.mark.parametrize("case", CACHEABLE)
def test_a_kv_cache_decodes_as_microgpts_decoder_does_past_seq_len(case, tmp_path):
    path = exported(case, tmp_path, "--kv-cache")
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    loaded = microgpt.load(checkpoint(case))
    run = session(path)
    names = [o.name for o in run.get_outputs()]
    inputs = run.get_inputs()
    assert [i.name for i in inputs[:2]] == ["ids", "position"]
    assert [n.replace("present", "past") for n in names[1:]] == [i.name for i in inputs[2:]]
    tokens = probe(loaded.tokenizer.size, 1, 3 * SEQ_LEN, seed=5)[0]  # a prompt of 5, then 31 single tokens
    decoder = loaded.model.decoder()
    past = {i.name: np.zeros((1, i.shape[1], 0, i.shape[3]), np.float32) for i in inputs[2:]}
    position = 0
    for start, stop in [(0, 5), *((t, t + 1) for t in range(5, len(tokens)))]:
        piece = tokens[None, start:stop]  # (1, n)
        logits, *present = run.run(names, {"ids": piece, "position": np.array(position), **past})
        position += piece.shape[1]
        past = dict(zip(past, present))
        assert all(p.shape[2] == min(stop, SEQ_LEN - 1) for p in present)  # the window: seq_len - 1 kept
        ours = decoder.prefill(piece[0].astype(np.int32)) if start == 0 else decoder.step(int(piece[0, 0]))
        np.testing.assert_allclose(logits[0, -1], loaded.model.be.to_host(ours)[0], rtol=0, atol=TOLERANCE,
                                   err_msg=f"after {stop} tokens")
    batch = probe(loaded.tokenizer.size, 3, SEQ_LEN, seed=6)  # a batch of prompts in one call
    first = {i.name: np.zeros((3, i.shape[1], 0, i.shape[3]), np.float32) for i in inputs[2:]}
    got = run.run(["logits"], {"ids": batch, "position": np.array(0), **first})[0]
    np.testing.assert_allclose(got, loaded.logits(batch.astype(np.int32)), rtol=0, atol=TOLERANCE)


@pytest.mark.parametrize("case", ["ensemble-bigram-context", "ensemble-none-global-routed", "graph-gpt_bigram"])
def test_a_kv_cache_is_refused_where_positions_mix_otherwise(case, tmp_path, capsys):
    out = tmp_path / "model.onnx"
    assert main(["export", str(checkpoint(case)), "--out", str(out), "--kv-cache"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--kv-cache:" in err and "export without --kv-cache" in err
    assert not list(tmp_path.iterdir())


def test_the_calculator_prior_has_no_export(tmp_path, capsys):
    for fmt in ("onnx", "torch"):
        assert main(["export", str(checkpoint("calculator")), "--format", fmt, "--out", str(tmp_path / "m")]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "calculator prior parses the text" in err
    assert not list(tmp_path.iterdir())


def docs_decoder() -> str:
    """The greedy decoder's code block in docs/export.md."""
    text = (ROOT / "docs" / "export.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, re.DOTALL)
    return next(block for block in blocks if "def greedy" in block)


def test_the_docs_greedy_decoder_writes_what_sample_writes_at_temperature_0(tmp_path):
    code = docs_decoder()
    body = code.split("def greedy", 1)[1].splitlines()[1:]
    assert len([line for line in body if line.strip()]) <= 10  # the ten-line decoder the docs promise
    (tmp_path / "greedy.py").write_text(code, encoding="utf-8")
    namespace = runpy.run_path(str(tmp_path / "greedy.py"))  # the docs' block as a user would paste it
    for case in ("gpt", "lookahead-gap", "graph-two_experts"):
        path = exported(case, tmp_path, "--kv-cache")
        loaded = microgpt.load(checkpoint(case))
        prompt = "the cat sat on the mat; "  # 24 characters: longer than seq_len 12, so the decoder crops it
        made = namespace["greedy"](str(path), list(loaded.tokenizer.encode(prompt)), 3 * SEQ_LEN)
        assert loaded.tokenizer.decode(made) == loaded.sample(3 * SEQ_LEN, prompt=prompt, temperature=0)
