"""All of a model's parameters, gradients and Adam moments in one allocation.

One (4, total) array holds the flat `data`, `grad`, `m` and `v` buffers as its
rows; every parameter is a view into `data` (its gradient a view into `grad`).
Zeroing the gradients is one call and one `adam_step` updates every parameter;
on the CUDA backend the whole training state is one contiguous device allocation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from microgpt.backends.base import Backend


@dataclass(frozen=True)
class ParamSpec:
    name: str
    shape: tuple[int, ...]  # the shape in the checkpoint; 1-D vectors are (1, n) rows in memory
    init_std: float  # N(0, init_std^2); 0 means a constant
    init_value: float = 0.0
    decay: bool = False  # AdamW's weight decay applies to it (the weight matrices of linear layers)
    trainable: bool = True  # the optimiser updates it; a frozen one is saved and loaded, never changed

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def mem_shape(self) -> tuple[int, ...]:
        return (1, self.shape[0]) if len(self.shape) == 1 else self.shape


class Parameters:
    """Flat data/grad/m/v buffers (each (1, total), rows of one allocation) and named views into them."""

    def __init__(self, backend: Backend, specs: list[ParamSpec]):
        self.backend = backend
        self.specs = {spec.name: spec for spec in specs}
        self.total = sum(spec.size for spec in specs)
        self.storage = backend.zeros((4, self.total))  # rows: data, grad, m, v
        self.data, self.grad, self.m, self.v = (self.storage[i : i + 1] for i in range(4))  # each (1, total)
        self.step = 0  # Adam steps taken
        self._offsets: dict[str, int] = {}
        offset = 0
        for spec in specs:
            self._offsets[spec.name] = offset
            offset += spec.size
        self.value = {name: self._view(self.data, name) for name in self.specs}
        self.gradient = self.gradient_views(self.grad)

    def _view(self, buffer, name: str):
        """The parameter's (mem_shape) view into buffer (1, total). Writes through it must land in buffer: the
        reshape is of a contiguous 1-D slice, which NumPy and CuPy always reshape to a view, never a copy."""
        spec = self.specs[name]
        start = self._offsets[name]
        return buffer[0, start : start + spec.size].reshape(spec.mem_shape)  # (mem_shape), a view

    def gradient_views(self, buffer) -> dict[str, object]:
        """Each parameter's view into another flat (1, total) gradient buffer (a thread's, when a batch is
        split over the backend's threads, model/thread_split.py)."""
        return {name: self._view(buffer, name) for name in self.specs}

    def initialize(self, seed: int) -> None:
        """Draw every parameter from its init distribution with a host RNG, so all backends start alike."""
        rng = np.random.default_rng(seed)
        flat = np.empty(self.total, dtype=np.float64)
        for name, spec in self.specs.items():
            start = self._offsets[name]
            if spec.init_std > 0:
                flat[start : start + spec.size] = rng.normal(0.0, spec.init_std, spec.size)
            else:
                flat[start : start + spec.size] = spec.init_value
        self._upload(flat, self.data)

    def _upload(self, flat: np.ndarray, target) -> None:
        target[...] = self.backend.from_host(flat.reshape(1, self.total))

    def mask(self, attribute: str):
        """(1, total) on the backend: 1.0 over the parameters whose spec has `attribute` ("decay",
        "trainable") true, 0.0 elsewhere."""
        mask = self.backend.zeros((1, self.total))  # (1, total)
        self.from_host({name: np.full(spec.shape, float(getattr(spec, attribute))) for name, spec in self.specs.items()},
                       mask)
        return mask

    @property
    def all_trainable(self) -> bool:
        return all(spec.trainable for spec in self.specs.values())

    def trainable_runs(self) -> list[tuple[int, int]]:
        """(start, stop) of each run of adjacent trainable parameters in the flat store, in order."""
        runs: list[tuple[int, int]] = []
        for name, spec in self.specs.items():
            if not spec.trainable:
                continue
            start = self._offsets[name]
            if runs and runs[-1][1] == start:
                runs[-1] = (runs[-1][0], start + spec.size)
            else:
                runs.append((start, start + spec.size))
        return runs

    def zero_grad(self) -> None:
        self.backend.zero_(self.grad)

    def adam_step(self, lr: float) -> None:
        self.step += 1
        self.backend.adam_step(self.data, self.grad, self.m, self.v, lr, self.step)

    def to_host(self, buffer=None) -> dict[str, np.ndarray]:
        """Each parameter of `buffer` (default: the values) as a host array in its checkpoint shape."""
        flat = self.backend.to_host(self.data if buffer is None else buffer).reshape(-1)
        return {
            name: flat[self._offsets[name] : self._offsets[name] + spec.size].reshape(spec.shape).copy()
            for name, spec in self.specs.items()
        }

    def from_host(self, tensors: dict[str, np.ndarray], buffer=None) -> None:
        """Set each parameter of `buffer` (default: the values) from host arrays in checkpoint shapes."""
        flat = np.empty(self.total, dtype=np.float64)
        for name, spec in self.specs.items():
            flat[self._offsets[name] : self._offsets[name] + spec.size] = np.asarray(tensors[name]).reshape(-1)
        self._upload(flat, self.data if buffer is None else buffer)


@dataclass(frozen=True)
class ParameterViews:
    """What layers bind to: the weights to read and the gradients to add into (a thread's, when a batch is
    split; `Parameters` itself has both attributes and serves for its own gradients)."""

    value: dict
    gradient: dict
