"""`microgpt export DIR --format onnx`: the plan (export_plan.py) as an ONNX model, checked, verified and saved.

The model takes `ids` int64 [batch, T] (T up to seq_len: ONNX Runtime refuses a longer one,
`refuse_past_seq_len`) and gives `logits` float32 [batch, T, vocab], row t scoring the token after ids[:, : t
+ 1]. With `kv_cache` it also takes `position` (int64 [], the first new token's position: 0 for a prompt) and,
per attention node and head group n in graph order, `past_key.n` and `past_value.n` [batch, heads, past,
width], and gives `present_key.n` and `present_value.n`: the past and the new ones, their last seq_len - 1
(what the next token sees beside itself). A first call passes past 0; with a cache a T past seq_len slides, as
seq_len tokens and then one at a time would. That needs a graph whose positions mix only through causal
attention and RoPE (model/graph/decode.py's `blocker`); another is refused. The metadata holds the family,
seq_len, the cache layout and the tokenizer.

Before the file is written the model passes `onnx.checker.check_model(full_check=True)` (strict shape
inference) and ONNX Runtime's logits are held within 1e-4 of microgpt's on a probe batch, and with a cache
on a prompt and then one token at a time.
"""

from __future__ import annotations

import json

import numpy as np

from microgpt.core.errors import Named
from microgpt.core.version import install_hint
from microgpt.export.export_plan import ExportError
from microgpt.export.needs import need
from microgpt.export.onnx_graph import FLOAT, INT64, OPSET, Builder, Dims
from microgpt.export.onnx_ops import Emitter
from microgpt.export.source import Source

# float32 on both sides, summed in other orders: measured below 1e-5 at logits up to 7 on every family; the
# bound grows with the logits' size (rounding is relative), so a long-trained model's larger logits pass too
PROBE_TOLERANCE = 1e-4
PRODUCER = "microgpt"


def refuse_cache(source: Source) -> None:
    """ExportError naming the first node on the path to the logits that a KV cache cannot serve."""
    from microgpt.model.graph.decode import blocker

    node = blocker(source.program)
    if node is not None:
        what = node.params.get("mask") if node.op.name in ("attention", "rope_attention") else node.params.get("kind")
        raise ExportError(Named("kv_cache"), f": {node.where} ({node.op.name}{' ' + what if what else ''}) is on the "
                          "path to the logits, and a key/value cache serves only a graph whose positions mix through "
                          "causal attention and rope alone; export without ", Named("kv_cache"))


def refuse_past_seq_len(b: Builder, ids: str, seq_len: int) -> str:
    """`ids` reshaped to [batch, T] by a T read from a table of the lengths 1 to seq_len, so that ONNX Runtime
    refuses a T past seq_len, as microgpt's logits do, with an error naming the node (ONNX has no assert):
    "... running Gather node. Name:'ids longer than seq_len 64 are refused: ...' ... idx=64 must be within
    the inclusive range [-64,63]". A Gather of one index, which ONNX Runtime's optimiser keeps (a Gather of a
    Range it turns into a Slice, which clamps in silence)."""
    shape = b.op("Shape", [ids])  # [2]: batch, T
    last = b.op("Sub", [b.op("Slice", [shape, b.ints(1), b.ints(2)]), b.ints(1)])  # [1]: T - 1
    length = b.op("Gather", [b.const(np.arange(1, seq_len + 1), np.int64), last], axis=0,
                  node_name=f"ids longer than seq_len {seq_len} are refused: give at most the last {seq_len}")
    return b.op("Reshape", [ids, b.op("Concat", [b.op("Slice", [shape, b.ints(0), b.ints(1)]), length], axis=0)])


def build_onnx(source: Source, kv_cache: bool = False):
    """The onnx.ModelProto of a Source, checked (onnx.checker, full_check)."""
    onnx = need("onnx")
    if kv_cache:
        refuse_cache(source)
    plan, b = source.plan, Builder(onnx)
    ids = b.add_input("ids", INT64, ["batch", "T"])
    if kv_cache:  # a longer T slides the window as a token at a time would
        b.inputs[0].doc_string = "token ids, int64 [batch, T]: each sees itself and the seq_len - 1 before it"
    else:
        b.inputs[0].doc_string = f"token ids, int64 [batch, T], T from 1 to seq_len {plan['seq_len']}"
        ids = refuse_past_seq_len(b, ids, plan["seq_len"])
    start = b.add_input("position", INT64, []) if kv_cache else None
    emitter = Emitter(b, Dims(b, ids, start), source.weights, plan["seq_len"], cache=kv_cache)
    values = {plan["ids"]: ids}
    for step in plan["steps"]:
        values.update(zip(step["outputs"], emitter.emit(step, [values[v] for v in step["inputs"]])))
    b.nodes.append(onnx.helper.make_node("Identity", [values[plan["logits"]]], ["logits"], name="logits"))
    b.outputs.insert(0, onnx.helper.make_tensor_value_info("logits", FLOAT, ["batch", "T", plan["vocab"]]))
    model = onnx.helper.make_model(b.graph(f"microgpt {source.family_name}"), producer_name=PRODUCER,
                                   opset_imports=[onnx.helper.make_opsetid("", OPSET)],
                                   doc_string=f"{source.describe}; exported from {source.path}")
    model.ir_version = onnx.helper.find_min_ir_version_for(list(model.opset_import))  # what older runtimes read
    onnx.helper.set_model_props(model, {
        "microgpt.family": source.family_name, "microgpt.describe": source.describe,
        "microgpt.seq_len": str(plan["seq_len"]), "microgpt.vocab_size": str(plan["vocab"]),
        "microgpt.kv_cache": json.dumps(emitter.caches if kv_cache else None),
        "microgpt.tokenizer": json.dumps(source.tokenizer_json)})
    try:
        onnx.checker.check_model(model, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        raise ExportError(f"the exported graph fails onnx.checker ({_first_line(exc)}); nothing was written (a "
                          "microgpt bug: please report it)") from None
    return model


def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]


def session(model_bytes: bytes):
    """An ONNX Runtime session on the cpu of a serialized model; ExportError where this onnxruntime cannot run
    it (one from before opset 23's Attention and RotaryEmbedding)."""
    ort = need("onnxruntime")
    options = ort.SessionOptions()
    options.log_severity_level = 3  # errors only
    try:
        return ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001  (onnxruntime's own exception types, which vary by version)
        raise ExportError(f"onnxruntime {ort.__version__} cannot run the exported model ({_first_line(exc)}); "
                          f"it needs onnxruntime 1.23 or later: {install_hint('export')}") from None


def probe_ids(vocab: int, seq_len: int, batch: int = 2) -> np.ndarray:
    """(batch, seq_len) int64 ids that touch many rows of every table: a stride through the vocabulary."""
    return ((np.arange(batch * seq_len) * 7 + 3) % vocab).reshape(batch, seq_len).astype(np.int64)


def empty_caches(caches: list[dict], batch: int) -> dict[str, np.ndarray]:
    """The past inputs of a first call: every cache [batch, heads, 0, width]."""
    return {f"past_{kind}.{n}": np.zeros((batch, c["heads"], 0, c["width"]), np.float32)
            for n, c in enumerate(caches) for kind in ("key", "value")}


def verify(model, source: Source, expected: np.ndarray, ids: np.ndarray, kv_cache: bool) -> None:
    """ExportError unless ONNX Runtime's logits of `ids` are within PROBE_TOLERANCE of `expected` (microgpt's
    (B, T, vocab)); with a cache, a prompt of half of them and then one token at a time."""
    run = session(model.SerializeToString())
    if not kv_cache:
        got = run.run(["logits"], {"ids": ids})[0]
    else:
        caches = json.loads(run.get_modelmeta().custom_metadata_map["microgpt.kv_cache"])
        names = [o.name for o in run.get_outputs()]
        state, rows, position, half = empty_caches(caches, len(ids)), [], 0, max(1, ids.shape[1] // 2)
        for piece in [ids[:, :half], *(ids[:, t : t + 1] for t in range(half, ids.shape[1]))]:
            logits, *present = run.run(names, {"ids": piece, "position": np.array(position), **state})
            rows.append(logits)
            position += piece.shape[1]
            state = {name.replace("present", "past"): value for name, value in zip(names[1:], present)}
        got = np.concatenate(rows, axis=1)
    worst, bound = float(np.max(np.abs(got - expected))), PROBE_TOLERANCE * max(1.0, float(np.max(np.abs(expected))))
    if not worst <= bound:
        raise ExportError(f"the exported model's logits differ from microgpt's by {worst:.3g} (over "
                          f"{bound:.3g}); nothing was written (a microgpt bug: please report it)")


def onnx_bytes(source: Source, expected: np.ndarray, ids: np.ndarray, kv_cache: bool = False) -> bytes:
    """The checked and verified model, serialized."""
    model = build_onnx(source, kv_cache)
    verify(model, source, expected, ids, kv_cache)
    return model.SerializeToString()
