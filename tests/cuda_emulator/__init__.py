"""Running the CUDA backend's kernels on the CPU, for tests without a GPU.

- `cuda_emu.h`: the CUDA execution model as a C++ header (blocks one at a time, a block's
  threads as fibers, barriers and warp shuffles that report a deadlock instead of hanging,
  per-block NaN-filled shared memory);
- `signatures.py`: the `extern "C" __global__` parameter lists, and checking launch arguments
  against them;
- `build.py`: one shared library per kernel source, compiled by g++ and cached by hash;
- `launch.py`: a launchable kernel on NumPy buffers (guard regions catch writes out of bounds);
- `fake_cupy.py`: NumPy standing in for CuPy (its `RawModule` runs kernels through `launch.py`)
  and a column-major cuBLAS on NumPy, so `CuBLASBackend`'s own Python runs unchanged;
- the `emulated` fixture of tests/conftest.py: a `CuBLASBackend` on all of the above;
- `broken_kernels.cu`: kernels with deliberate bugs, for the emulator's self-test.
"""
