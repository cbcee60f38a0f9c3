"""The position-wise primitives: each output row reads only the same row of its inputs.

embedding, linear, logits, stream_read, stream_write (linear maps that read or write the ensemble's stream),
layer_norm, relu, gelu, add (any number of inputs), mul, scale, concat, split and narrow (zero the columns
past the first `keep`), and `linear_relu`, which the compiler puts in place of a linear whose only reader is
a relu (the backend's fused bias + ReLU). Linear maps and LayerNorm run through model/transformer.py, the
families' own, so a graph's arithmetic is theirs op for op.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from microgpt.core.errors import ConfigError
from microgpt.model.graph.ops.base import (
    REQUIRED,
    Kernel,
    Op,
    Port,
    ShapeError,
    ValueType,
    expect,
    number_param,
    whole_param,
)
from microgpt.model.params import ParamSpec
from microgpt.model.transformer import LayerNorm, Linear, layer_norm_specs

INITS = ("he", "lecun", "torch", "zero")  # N(0, 2/d_in), N(0, 1/d_in), N(0, 1/(3 d_in)), zeros


def _init_std(node, d_in: int) -> float:
    init = node.params["init"]
    if isinstance(init, (int, float)) and not isinstance(init, bool):
        return number_param(node.params, "init", low=0)
    if init not in INITS:
        raise ConfigError(f"param init must be one of {', '.join(INITS)} or a standard deviation, got {init!r}")
    return {"he": math.sqrt(2.0 / d_in), "lecun": math.sqrt(1.0 / d_in), "torch": math.sqrt(1.0 / (3 * d_in)),
            "zero": 0.0}[init]  # torch: the spread of torch's default U(-1/sqrt(d_in), 1/sqrt(d_in))


def _flag(params: dict, key: str) -> bool:
    if not isinstance(params[key], bool):
        raise ConfigError(f"param {key} must be true or false, got {params[key]!r}")
    return params[key]


class MatrixKernel(Kernel):
    """y = x @ w (+ b): a Linear of model/transformer.py where there is a bias, its two products where not."""

    def __init__(self, node, backend, views):
        self.be, self.bias = backend, "b" in node.op.weights(node)
        if self.bias:
            self.layer = Linear(backend, views, node.name)
        else:
            self.w, self.dw = views.value[f"{node.name}.w"], views.gradient[f"{node.name}.w"]

    def forward(self, inputs, run):
        (x,) = inputs
        return [self.layer.forward(x) if self.bias else self.be.matmul(x, self.w)], x  # (rows, d_out)

    def backward(self, douts, x, run):
        (dy,) = douts
        if self.bias:
            return [self.layer.backward(dy, x)]
        self.be.matmul_into(x, dy, self.dw, transpose_a=True, accumulate=True)
        return [self.be.matmul(dy, self.w, transpose_b=True)]  # (rows, d_in)


class LinearOp(Op):
    name = "linear"
    doc = "x @ w + b; w ~ N(0, init), b zero"
    inputs: ClassVar[dict] = {"x": Port("stream")}
    params: ClassVar[dict] = {"out": REQUIRED, "bias": True, "init": "he", "decay": True}
    words = frozenset({"init"})
    choices: ClassVar[dict] = {"init": INITS}  # or a standard deviation (a number)
    out_kind = "stream"

    def out_width(self, node) -> int:
        return whole_param(node.params, "out")

    def infer(self, node):
        expect("x", node.in_types["x"][0], "stream")
        _init_std(node, node.in_types["x"][0].width)  # checked here, where a refusal names the node
        return {"out": ValueType(self.out_kind, self.out_width(node))}

    def weights(self, node) -> list[str]:
        return ["w", "b"] if _flag(node.params, "bias") else ["w"]

    def param_specs(self, node):
        d_in, d_out = node.in_types["x"][0].width, node.types["out"].width
        specs = [ParamSpec(f"{node.name}.w", (d_in, d_out), _init_std(node, d_in), decay=_flag(node.params, "decay"))]
        if "b" in self.weights(node):
            specs.append(ParamSpec(f"{node.name}.b", (d_out,), 0.0))
        return specs

    def kernel(self, node, backend, views, shared):
        return MatrixKernel(node, backend, views)


class LogitsOp(LinearOp):
    name = "logits"
    doc = "x @ w + b to the vocabulary: the scores a loss reads"
    params: ClassVar[dict] = {"bias": True, "init": "he", "decay": True}
    out_kind = "logits"

    def out_width(self, node) -> int:
        return node.dims["vocab"]


class StreamReadOp(LinearOp):
    name = "stream_read"
    doc = "s @ R, no bias: what a reader takes from the shared stream; R ~ N(0, 1/stream width)"
    params: ClassVar[dict] = {"out": "d", "bias": False, "init": "lecun", "decay": True}


class StreamWriteOp(LinearOp):
    name = "stream_write"
    doc = "h @ W, no bias: what a writer adds to the shared stream; W ~ N(0, 1/d)"
    params: ClassVar[dict] = {"out": "stream_dim", "bias": False, "init": "lecun", "decay": True}


class LinearReluKernel(Kernel):
    """relu(x @ w + b) through the backend's fused bias + ReLU (the compiler's rewrite of linear -> relu)."""

    def __init__(self, node, backend, views):
        self.be, self.layer = backend, Linear(backend, views, node.name)

    def forward(self, inputs, run):
        (x,) = inputs
        hidden, mask = self.be.fused_bias_relu(self.be.matmul(x, self.layer.w), self.layer.b)  # each (rows, d_out)
        return [hidden], (x, mask)

    def backward(self, douts, saved, run):
        x, mask = saved
        return [self.layer.backward(self.be.relu_backward(douts[0], mask), x)]


class LinearReluOp(LinearOp):
    name = "linear_relu"
    doc = "relu(x @ w + b): a linear with bias and the relu that alone reads it, fused by the compiler"
    internal = True

    def kernel(self, node, backend, views, shared):
        return LinearReluKernel(node, backend, views)


class EmbeddingKernel(Kernel):
    def __init__(self, node, backend, views):
        self.be, self.width = backend, node.types["out"].width
        self.table, self.dtable = views.value[node.name], views.gradient[node.name]

    def forward(self, inputs, run):
        (ids,) = inputs
        return [self.be.embedding_gather(self.table, ids, run.rows, self.width)], ids  # (rows, width)

    def backward(self, douts, ids, run):
        self.be.embedding_scatter_add(douts[0], ids, self.dtable, run.rows, self.width)
        return [None]


class EmbeddingOp(Op):
    name = "embedding"
    doc = "a learned row per token: E[ids], E ~ N(0, 1/width)"
    inputs: ClassVar[dict] = {"ids": Port("token_ids")}
    params: ClassVar[dict] = {"width": "d"}

    def infer(self, node):
        expect("ids", node.in_types["ids"][0], "token_ids")
        return {"out": ValueType("stream", whole_param(node.params, "width"))}

    def param_specs(self, node):
        width = node.types["out"].width
        return [ParamSpec(node.name, (node.dims["vocab"], width), math.sqrt(1.0 / width))]

    def kernel(self, node, backend, views, shared):
        return EmbeddingKernel(node, backend, views)


class LayerNormKernel(Kernel):
    def __init__(self, node, backend, views):
        self.layer = LayerNorm(backend, views, node.name)

    def forward(self, inputs, run):
        out, saved = self.layer.forward(inputs[0])  # (rows, d)
        return [out], saved

    def backward(self, douts, saved, run):
        return [self.layer.backward(douts[0], saved)]


class LayerNormOp(Op):
    name = "layer_norm"
    doc = "(x - mean) / std * gamma + beta over each row; gamma 1, beta 0"
    inputs: ClassVar[dict] = {"x": Port("stream")}

    def infer(self, node):
        expect("x", node.in_types["x"][0], "stream")
        return {"out": node.in_types["x"][0]}

    def param_specs(self, node):
        return layer_norm_specs(node.name, node.types["out"].width)

    def kernel(self, node, backend, views, shared):
        return LayerNormKernel(node, backend, views)


class Elementwise(Op):
    """One float input, an output of its type."""

    inputs: ClassVar[dict] = {"x": Port("float")}

    def infer(self, node):
        expect("x", node.in_types["x"][0], "float")
        return {"out": node.in_types["x"][0]}


class ReluKernel(Kernel):
    def __init__(self, backend):
        self.be = backend

    def forward(self, inputs, run):
        out, mask = self.be.relu_forward(inputs[0].copy())  # a copy: relu_forward may work in place
        return [out], mask

    def backward(self, douts, mask, run):
        return [self.be.relu_backward(douts[0], mask)]


class ReluOp(Elementwise):
    name = "relu"
    doc = "max(x, 0)"

    def kernel(self, node, backend, views, shared):
        return ReluKernel(backend)


GELU_C = math.sqrt(2.0 / math.pi)


class GeluKernel(Kernel):
    """The tanh form: 0.5 x (1 + tanh(c (x + 0.044715 x^3))), c = sqrt(2 / pi); NumPy's ufuncs, which CuPy's
    arrays take too."""

    def forward(self, inputs, run):
        (x,) = inputs
        inner = np.tanh(GELU_C * (x + 0.044715 * x * x * x))  # (rows, d)
        return [0.5 * x * (1.0 + inner)], (x, inner)

    def backward(self, douts, saved, run):
        x, inner = saved
        d_inner = (1.0 - inner * inner) * GELU_C * (1.0 + 3 * 0.044715 * x * x)
        return [douts[0] * (0.5 * (1.0 + inner) + 0.5 * x * d_inner)]


class GeluOp(Elementwise):
    name = "gelu"
    doc = "0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))"

    def kernel(self, node, backend, views, shared):
        return GeluKernel()


class ScaleKernel(Kernel):
    def __init__(self, backend, by: float):
        self.be, self.by = backend, by

    def forward(self, inputs, run):
        return [self.be.scale(inputs[0], self.by)], None

    def backward(self, douts, saved, run):
        return [self.be.scale(douts[0], self.by)]


class ScaleOp(Elementwise):
    name = "scale"
    doc = "x times a constant `by`"
    params: ClassVar[dict] = {"by": REQUIRED}

    def infer(self, node):
        number_param(node.params, "by")
        return super().infer(node)

    def kernel(self, node, backend, views, shared):
        return ScaleKernel(backend, number_param(node.params, "by"))


def _same(node, port: str) -> ValueType:
    """The one type every value on `port` has (float kinds), or a ShapeError naming the first that differs."""
    types = node.in_types[port]
    expect(port, types[0], "float")
    for other in types[1:]:
        if other != types[0]:
            raise ShapeError(port, f"expects every input as the first, {types[0]}, got {other}")
    return types[0]


class AddKernel(Kernel):
    def __init__(self, backend):
        self.be = backend

    def forward(self, inputs, run):
        total = self.be.add(inputs[0], inputs[1]) if len(inputs) > 1 else inputs[0].copy()  # (rows, width)
        for x in inputs[2:]:
            self.be.add_(total, x)
        return [total], len(inputs)

    def backward(self, douts, count, run):
        return [douts[0]] * count


class AddOp(Op):
    name = "add"
    doc = "the sum of every input (any number, one type), in the order the edges are listed"
    inputs: ClassVar[dict] = {"in": Port("float", many=True)}

    def infer(self, node):
        return {"out": _same(node, "in")}

    def kernel(self, node, backend, views, shared):
        return AddKernel(backend)


class MulKernel(Kernel):
    def forward(self, inputs, run):
        a, b = inputs
        return [a * b], (a, b)

    def backward(self, douts, saved, run):
        a, b = saved
        return [douts[0] * b, douts[0] * a]


class MulOp(Op):
    name = "mul"
    doc = "a * b, element by element"
    inputs: ClassVar[dict] = {"a": Port("float"), "b": Port("float")}

    def infer(self, node):
        a, b = node.in_types["a"][0], node.in_types["b"][0]
        expect("a", a, "float")
        expect("b", b, a.kind, a.width)
        return {"out": a}

    def kernel(self, node, backend, views, shared):
        return MulKernel()


class ConcatKernel(Kernel):
    def __init__(self, backend, widths: list[int]):
        self.be, self.widths = backend, widths

    def forward(self, inputs, run):
        out = self.be.zeros((inputs[0].shape[0], sum(self.widths)))  # (rows, sum of widths)
        col = 0
        for x, width in zip(inputs, self.widths):
            out[:, col : col + width] = x
            col += width
        return [out], None

    def backward(self, douts, saved, run):
        grads, col = [], 0
        for width in self.widths:
            grads.append(douts[0][:, col : col + width].copy())  # (rows, width)
            col += width
        return grads


class ConcatOp(Op):
    name = "concat"
    doc = "the inputs side by side, in the order the edges are listed"
    inputs: ClassVar[dict] = {"in": Port("stream", many=True)}

    def infer(self, node):
        for got in node.in_types["in"]:
            expect("in", got, "stream")
        return {"out": ValueType("stream", sum(t.width for t in node.in_types["in"]))}

    def kernel(self, node, backend, views, shared):
        return ConcatKernel(backend, [t.width for t in node.in_types["in"]])


class SplitKernel(Kernel):
    def __init__(self, backend, widths: list[int]):
        self.be, self.widths = backend, widths

    def forward(self, inputs, run):
        (x,) = inputs
        outs, col = [], 0
        for width in self.widths:
            outs.append(x[:, col : col + width].copy())  # (rows, width)
            col += width
        return outs, x.shape

    def backward(self, douts, shape, run):
        dx, col = self.be.zeros(shape), 0  # (rows, sum of widths)
        for dy, width in zip(douts, self.widths):
            if dy is not None:
                dx[:, col : col + width] = dy
            col += width
        return [dx]


class SplitOp(Op):
    name = "split"
    doc = "the input's columns cut into parts of the given `widths`, as outputs out0, out1, ..."
    inputs: ClassVar[dict] = {"x": Port("stream")}
    params: ClassVar[dict] = {"widths": REQUIRED}

    def widths(self, node) -> list[int]:
        widths = node.params["widths"]
        if not isinstance(widths, list) or len(widths) < 2 or not all(
                isinstance(w, int) and not isinstance(w, bool) and w >= 1 for w in widths):
            raise ConfigError(f"param widths must be a list of two or more whole numbers, got {widths!r}")
        return widths

    def output_ports(self, node) -> tuple[str, ...]:
        return tuple(f"out{i}" for i in range(len(self.widths(node))))

    def infer(self, node):
        widths = self.widths(node)
        expect("x", node.in_types["x"][0], "stream", sum(widths), "+".join(map(str, widths)))
        return {f"out{i}": ValueType("stream", w) for i, w in enumerate(widths)}

    def kernel(self, node, backend, views, shared):
        return SplitKernel(backend, self.widths(node))


class NarrowKernel(Kernel):
    def __init__(self, keep: int):
        self.keep = keep

    def forward(self, inputs, run):
        out = inputs[0].copy()  # (rows, width)
        out[:, self.keep :] = 0.0
        return [out], None

    def backward(self, douts, saved, run):
        dx = douts[0].copy()
        dx[:, self.keep :] = 0.0
        return [dx]


class NarrowOp(Elementwise):
    name = "narrow"
    doc = "the input with every column past the first `keep` set to zero (a narrower channel at the same shape)"
    inputs: ClassVar[dict] = {"x": Port("stream")}
    params: ClassVar[dict] = {"keep": REQUIRED}

    def infer(self, node):
        out = super().infer(node)
        if whole_param(node.params, "keep") > out["out"].width:
            raise ConfigError(f"param keep {node.params['keep']} is wider than the input, {out['out']}")
        return out

    def kernel(self, node, backend, views, shared):
        return NarrowKernel(node.params["keep"])


OPS = [EmbeddingOp(), LinearOp(), LogitsOp(), StreamReadOp(), StreamWriteOp(), LinearReluOp(), LayerNormOp(),
       ReluOp(), GeluOp(), AddOp(), MulOp(), ScaleOp(), ConcatOp(), SplitOp(), NarrowOp()]
