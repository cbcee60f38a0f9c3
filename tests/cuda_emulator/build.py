"""Compiling a kernel source for the CPU: g++, the emulator header, one shared library per source.

The library's translation unit includes `cuda_emu.h`, then the source text exactly as given
(what NVRTC compiles), then one `emu_launch_<kernel>` entry point per kernel that unpacks an
argument array into the kernel's C parameters. Libraries are cached in a directory keyed by
the hash of the source, the header, the entry points and the compiler flags, so a session
compiles each source once and later sessions not at all. MICROGPT_EMULATOR_ASAN=1 builds
with AddressSanitizer (the Python process then needs libasan preloaded; see docs/cuda.md).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from cuda_emulator.signatures import kernel_parameters

HEADER = Path(__file__).with_name("cuda_emu.h")
GXX = shutil.which("g++")
ASAN = os.environ.get("MICROGPT_EMULATOR_ASAN") == "1"
FLAGS = [
    "-std=c++17",
    "-O1",
    "-g",
    "-shared",
    "-fPIC",
    "-fvisibility=hidden",
    "-Wall",
    "-Wno-unused-function",
]
FLAGS += ["-fsanitize=address", "-fno-omit-frame-pointer"] if ASAN else []
CACHE = Path(
    os.environ.get(
        "MICROGPT_EMULATOR_CACHE", Path(tempfile.gettempdir()) / f"microgpt-cuda-emulator-{os.getuid()}"
    )
)


def entry_points(source: str) -> str:
    """C++ for `extern "C" int emu_launch_<kernel>(grid, block, order, seconds, args, message, size)` per kernel."""
    out = []
    for name, params in kernel_parameters(source).items():
        unpacked = ", ".join(f"*({p.c_type}*)args[{i}]" for i, p in enumerate(params))
        out.append(
            f'extern "C" __attribute__((visibility("default"))) int emu_launch_{name}('
            "const unsigned* grid, const unsigned* block, int order, double seconds, void** args, char* message, "
            "int size) {\n"
            f"    return emu::launch(grid, block, order, seconds, [=] {{ {name}({unpacked}); }}, message, size);\n}}\n"
        )
    return "".join(out)


def build(source: str, name: str) -> Path:
    """The path of the shared library for `source` (named `name` in messages), compiling it if needed."""
    if GXX is None:
        raise RuntimeError("g++ is not on PATH; the CUDA emulator needs it")
    entries = entry_points(source)
    key = hashlib.sha256("\0".join([source, HEADER.read_text(), entries, *FLAGS]).encode()).hexdigest()[:20]
    library = CACHE / f"{Path(name).stem}-{key}.so"
    if library.exists():
        return library
    sources = library.with_suffix(".src")  # kept beside the library: ASan and gdb point into them
    sources.mkdir(parents=True, exist_ok=True)
    (sources / name).write_text(source, encoding="utf-8")
    (sources / "unit.cpp").write_text(f'#include "{HEADER}"\n#include "{name}"\n{entries}', encoding="utf-8")
    partial = library.with_name(f"{library.name}.{os.getpid()}.partial")
    result = subprocess.run(
        [GXX, *FLAGS, str(sources / "unit.cpp"), "-o", str(partial)],
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    if result.returncode != 0:
        raise RuntimeError(f"g++ could not build the emulated {name}:\n{result.stderr}")
    os.replace(partial, library)  # atomic: a concurrent session sees the whole file or none
    return library
