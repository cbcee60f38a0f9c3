"""What a primitive is: its ports, its parameters, how it checks shapes, and the kernel that runs it.

A value flowing along an edge has a kind and a width, and always one row per position of every sequence
(B*T rows, packed as the families pack them):
- `token_ids`: the (B*T,) token ids, the graph's input (no width);
- `stream`: (B*T, width) floats, hidden states;
- `logits`: (B*T, vocab) floats, scores over the vocabulary, which a loss reads;
- `weights`: (B*T, n) floats, a router's mixing weights over n experts.

An `Op` describes a primitive: its input ports (a port marked `many` takes any number of edges, in the
order the document lists them), its output ports, its parameters with their defaults, `infer` (from the
evaluated params and the incoming values' types, the output types, or a ShapeError naming the port),
`param_specs` (its weights, named after the node's path) and `kernel`, which binds the op to a backend and
one set of parameter views. A kernel's `forward(inputs, run)` returns (outputs, saved); `backward(douts,
saved, run)` adds its parameter gradients into their buffers and returns the gradient of each input (None
for token ids), never writing into the gradients it was given.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from microgpt.core.errors import ConfigError

KINDS = ("token_ids", "stream", "logits", "weights")
REQUIRED = object()  # a parameter without a default
MAX_NUMBER = 1e6  # the size of a number param (a scale, a loss weight, an init's deviation), at most


@dataclass(frozen=True)
class ValueType:
    kind: str
    width: int | None = None  # None for token_ids

    def __str__(self) -> str:
        return "token_ids [T]" if self.kind == "token_ids" else f"{self.kind} [T, {self.width}]"


class ShapeError(ConfigError):
    """A port given a value of the wrong kind or width; the compiler prefixes the node path."""

    def __init__(self, port: str, message: str):
        super().__init__(message)
        self.port = port


@dataclass(frozen=True)
class Port:
    kind: str  # one of KINDS, or "float" for stream or logits alike
    many: bool = False  # takes any number of edges (at least one)


@dataclass
class Node:
    """One primitive after flattening: where it sits, what it is, its evaluated params, its inputs and outputs."""

    path: tuple[str, ...]  # ("blocks", "0", "attn", "wq")
    op: Op
    params: dict
    inputs: dict[str, list[int]] = field(default_factory=dict)  # port -> value ids, in edge order
    outputs: dict[str, int] = field(default_factory=dict)  # port -> value id
    in_types: dict[str, list[ValueType]] = field(default_factory=dict)  # input port -> its values' types
    types: dict[str, ValueType] = field(default_factory=dict)  # output port -> its type
    dims: dict = field(default_factory=dict)  # what the run binds: vocab, T

    @property
    def name(self) -> str:
        """The parameter prefix: the path joined by dots ("blocks.0.attn.wq")."""
        return ".".join(self.path)

    @property
    def where(self) -> str:
        """The node as messages name it ("blocks.0/attn/wq")."""
        return "/".join(self.path)

    def input_ids(self) -> list[int]:
        return [value for port in self.op.inputs for value in self.inputs.get(port, [])]


class Op:
    """A primitive. Subclasses set `name`, `inputs`, `outputs`, `params`, `doc` and implement `infer` and
    `kernel`; `param_specs` defaults to none, `cross_position` says whether an output row reads other rows."""

    name = "abstract"
    doc = ""
    inputs: ClassVar[dict[str, Port]] = {}
    outputs: tuple[str, ...] = ("out",)
    params: ClassVar[dict[str, object]] = {}
    words: frozenset[str] = frozenset()  # params that take a word (a mask's kind), not a size
    choices: ClassVar[dict[str, tuple[str, ...]]] = {}  # the words a word param may take (the editor's menus)
    cross_position = False  # True: a row of the output depends on other positions (attention, RoPE, priors)

    def infer(self, node: Node) -> dict[str, ValueType]:
        """The output types from node.params and node.in_types (both checked here), or a ShapeError."""
        raise NotImplementedError

    def output_ports(self, node: Node) -> tuple[str, ...]:
        """The node's output ports (split's depend on its params)."""
        return self.outputs

    def param_specs(self, node: Node) -> list:
        return []

    def kernel(self, node: Node, backend, views, shared) -> Kernel:
        raise NotImplementedError


class Kernel:
    """A node bound to a backend and parameter views."""

    def forward(self, inputs: list, run) -> tuple[list, object]:
        raise NotImplementedError

    def backward(self, douts: list, saved, run) -> list:
        raise NotImplementedError


def expect(port: str, got: ValueType, kind: str, width: int | None = None, named: str | None = None) -> None:
    """ShapeError unless `got` is of `kind` ("float": stream or logits) and, where given, `width` wide; `named`
    is how the document wrote the width ("d"), shown beside its value."""
    kinds = ("stream", "logits") if kind == "float" else (kind,)
    if got.kind not in kinds:
        raise ShapeError(port, f"expects {' or '.join(kinds)}, got {got}")
    if width is not None and got.width != width:
        wanted = f"[T, {named}]=[T, {width}]" if named and named != str(width) else f"[T, {width}]"
        raise ShapeError(port, f"expects {wanted}, got [T, {got.width}]")


def whole_param(params: dict, key: str, low: int = 1) -> int:
    value = params[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"param {key} must be a whole number of at least {low}, got {value!r}")
    return value


def number_param(params: dict, key: str, low: float = -MAX_NUMBER) -> float:
    """A number param: finite, from `low` to MAX_NUMBER (NaN, infinity or 1e308 would only make every value
    NaN, which the causality check would take for the future leaking in)."""
    value = params[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= MAX_NUMBER:
        raise ConfigError(f"param {key} must be a finite number from {low:,.0f} to {MAX_NUMBER:,.0f}, got {value!r}")
    return float(value)
