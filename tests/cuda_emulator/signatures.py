"""The parameter lists of the `extern "C" __global__` kernels in a CUDA source, and argument checks.

A launch argument must be what the C parameter expects: a C-contiguous NumPy array of the
pointee's dtype for a pointer, a NumPy scalar of exactly the C type otherwise (CuPy would pass
a Python int as a 64-bit value, so a wrong width is a real bug on the GPU).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

C_TYPES = {"float": np.float32, "int": np.int32, "long long": np.int64, "unsigned int": np.uint32,
           "unsigned short": np.uint16}
KERNEL = re.compile(r'extern "C" __global__ void (\w+)\(([^)]*)\)')


@dataclass(frozen=True)
class Parameter:
    c_type: str  # as written, e.g. "const float*" or "int"
    name: str

    @property
    def is_pointer(self) -> bool:
        return self.c_type.endswith("*")

    @property
    def dtype(self):
        """The NumPy type of the value, or of the pointee for a pointer."""
        return C_TYPES[self.c_type.replace("const ", "").rstrip("*").strip()]


def kernel_parameters(source: str) -> dict[str, list[Parameter]]:
    """kernel name -> its parameters, for every `extern "C" __global__` kernel in source."""
    found = {}
    for match in KERNEL.finditer(source):
        params = []
        for declaration in match.group(2).split(","):
            c_type, name = re.fullmatch(r"\s*(.*?)\s*(\w+)\s*", declaration).groups()
            params.append(Parameter(re.sub(r"\s*\*", "*", c_type), name))
        found[match.group(1)] = params
    return found


def check_arguments(kernel: str, params: list[Parameter], args) -> None:
    """Raise TypeError unless args match params in count and type."""
    if len(args) != len(params):
        raise TypeError(f"{kernel}: {len(args)} arguments for {len(params)} parameters")
    for param, arg in zip(params, args):
        if param.is_pointer:
            if not (isinstance(arg, np.ndarray) and arg.flags.c_contiguous and arg.dtype == param.dtype):
                got = f"{arg.dtype} array" if isinstance(arg, np.ndarray) else type(arg).__name__
                raise TypeError(
                    f"{kernel}: {param.c_type} {param.name} needs a contiguous {param.dtype.__name__} array, got {got}"
                )
        elif type(arg) is not param.dtype:
            raise TypeError(f"{kernel}: {param.c_type} {param.name} got {type(arg).__name__}")
