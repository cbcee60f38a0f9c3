"""A small builder of ONNX graphs over the `onnx` package's own helpers (onnx.helper, onnx.numpy_helper).

`Builder.op(type, inputs, **attributes)` appends a node and returns its output's name (or names); constants
become initializers, each made once per value; `weight` names an initializer as the checkpoint names the
weight. `Dims` holds what every op reads of the input's shape: the batch, T and the positions.
"""

from __future__ import annotations

import itertools

import numpy as np

FLOAT, INT64, DOUBLE = 1, 7, 11  # onnx.TensorProto's element types
OPSET = 23  # the first with Attention (its KV cache inside) and RotaryEmbedding; onnx 1.18, onnxruntime 1.23


class Builder:
    """Nodes, initializers and graph inputs/outputs, named uniquely, for one onnx.GraphProto."""

    def __init__(self, onnx):
        self.onnx = onnx
        self.nodes: list = []
        self.initializers: list = []
        self.inputs: list = []
        self.outputs: list = []
        self._count = itertools.count()
        self._constants: dict[tuple, str] = {}

    def name(self, hint: str) -> str:
        return f"{hint}_{next(self._count)}"

    def op(self, op_type: str, inputs: list[str], outputs: int = 1, name: str | None = None,
           node_name: str | None = None, **attributes):
        """Append one node (named `node_name`, else by its type); its output name (`name`, else made), or a list
        of `outputs` names where it has several."""
        made = [name] if name is not None and outputs == 1 else [self.name(op_type.lower()) for _ in range(outputs)]
        self.nodes.append(self.onnx.helper.make_node(op_type, inputs, made, name=node_name or self.name(op_type),
                                                     **attributes))
        return made[0] if outputs == 1 else made

    def const(self, value, dtype=np.float32) -> str:
        """An initializer holding `value` (made once per dtype, shape and bytes)."""
        array = np.asarray(value, dtype=dtype)
        key = (array.dtype.str, array.shape, array.tobytes())
        if key not in self._constants:
            name = self.name("const")
            self.initializers.append(self.onnx.numpy_helper.from_array(array, name))
            self._constants[key] = name
        return self._constants[key]

    def ints(self, *values: int) -> str:
        """An int64 vector constant (shapes, axes, split widths)."""
        return self.const(list(values), np.int64)

    def scalar(self, value: float) -> str:
        """A float32 scalar constant (broadcast against any float tensor)."""
        return self.const(value)

    def weight(self, name: str, array: np.ndarray) -> str:
        self.initializers.append(self.onnx.numpy_helper.from_array(np.ascontiguousarray(array, np.float32), name))
        return name

    def add_input(self, name: str, element: int, shape: list) -> str:
        self.inputs.append(self.onnx.helper.make_tensor_value_info(name, element, shape))
        return name

    def add_output(self, name: str, element: int, shape: list) -> None:
        self.outputs.append(self.onnx.helper.make_tensor_value_info(name, element, shape))

    def graph(self, name: str):
        return self.onnx.helper.make_graph(self.nodes, name, self.inputs, self.outputs, self.initializers)


class Dims:
    """The input's batch and T as int64 vectors [1], and the positions [T] of its rows (from `start`)."""

    def __init__(self, builder: Builder, ids: str, start: str | None):
        b = builder
        shape = b.op("Shape", [ids])  # [2]: batch, T
        self.batch = b.op("Slice", [shape, b.ints(0), b.ints(1)])  # [1]
        self.T = b.op("Slice", [shape, b.ints(1), b.ints(2)])  # [1]
        t_scalar = b.op("Squeeze", [self.T, b.ints(0)])  # []
        first = b.const(0, np.int64) if start is None else start  # [] the first row's position
        self.positions = b.op("Range", [first, b.op("Add", [first, t_scalar]), b.const(1, np.int64)])  # [T]
        self.t_scalar, self.start = t_scalar, first

    def shape(self, builder: Builder, *tail: int) -> str:
        """The int64 vector [batch, T, *tail]."""
        return builder.op("Concat", [self.batch, self.T, builder.ints(*tail)], axis=0) if tail else \
            builder.op("Concat", [self.batch, self.T], axis=0)
