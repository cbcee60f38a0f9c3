"""CUDA checks that need no GPU: the kernels compile, and the cuda backend degrades cleanly without CuPy.

- every kernels/*.cu, as the backend hands it to NVRTC, compiles with `nvcc -c` (skipped without nvcc);
- the exact text the backend hands NVRTC (includes pasted in) compiles with NVRTC, where
  CuPy can load the NVRTC library (no device is needed for that);
- every kernel the backend launches is defined, by that name, in the file it names;
- the backend's Python runs on the CPU (tests/cuda_emulator: NumPy standing in for CuPy,
  a column-major cuBLAS on NumPy, the kernels on the CPU emulator): its row-major
  GEMM/geam calls give NumPy's products, every kernel is launched with the argument
  count and types it declares, and launches stay within CUDA's grid limits
  (tests/backends/test_cuda_emulated.py holds the kernels' results against NumPy;
  tests/backends/test_cuda_backend.py runs them on a GPU);
- the module imports without CuPy, and making a backend there raises BackendUnavailable
  with the install hint.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cuda_emulator import launch as emulator_launch
from cuda_emulator.signatures import kernel_parameters
from microgpt.backends import BackendUnavailable, cuda, resolve_auto
from microgpt.backends.cuda import CuBLASBackend
from microgpt.backends.cuda import kernel_launch as launch
from microgpt.backends.cuda.loader import INCLUDE_LINE, kernel_files, kernel_source

NVCC = shutil.which("nvcc")
NVRTC_ARCH = "--gpu-architecture=compute_90"  # the H100/H200 generation; any supported arch would do


def _nvrtc():
    """CuPy's NVRTC bindings, or None where CuPy or the NVRTC library is missing."""
    try:
        from cupy_backends.cuda.libs import nvrtc

        nvrtc.getVersion()
    except Exception:  # noqa: BLE001 - any failure to load NVRTC means "skip"
        return None
    return nvrtc


def test_there_are_kernel_files():
    assert "softmax.cu" in kernel_files() and "block_reduce.cu" in kernel_files()


@pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH")
@pytest.mark.parametrize("file_name", kernel_files())
def test_kernel_compiles_with_nvcc(file_name, tmp_path):
    source = tmp_path / file_name  # exactly the text NVRTC gets: the shared #defines, includes pasted in
    source.write_text(kernel_source(file_name), encoding="utf-8")
    result = subprocess.run(
        [NVCC, "-c", str(source), "-o", str(tmp_path / "kernel.o")],
        check=False, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, f"nvcc failed on {file_name}:\n{result.stderr}"


@pytest.mark.skipif(_nvrtc() is None, reason="CuPy with the NVRTC library is not installed")
@pytest.mark.parametrize("file_name", kernel_files())
def test_backend_source_compiles_with_nvrtc(file_name):
    nvrtc = _nvrtc()
    source = kernel_source(file_name)
    assert not INCLUDE_LINE.search(source), "the loader must paste every include in"
    program = nvrtc.createProgram(source, file_name, (), ())
    try:
        nvrtc.compileProgram(program, (NVRTC_ARCH, "-std=c++17"))
    except Exception as exc:  # noqa: BLE001 - show NVRTC's log, whatever it raised
        pytest.fail(f"NVRTC failed on {file_name}: {exc}\n{nvrtc.getProgramLog(program)}")
    finally:
        nvrtc.destroyProgram(program)


def _launched_kernels() -> set[tuple[str, str]]:
    """(file, kernel) pairs named in the backend's launch calls, in any module of the package."""
    modules = Path(cuda.__file__).parent.glob("*.py")
    return {pair for path in modules for pair in re.findall(r'"(\w+\.cu)", "(\w+)"', path.read_text(encoding="utf-8"))}


def test_every_launched_kernel_is_defined_in_its_file():
    launched = _launched_kernels()
    assert len(launched) >= 15, f"the launch-call pattern found too few kernels: {sorted(launched)}"
    for file_name, kernel in launched:
        assert re.search(rf'extern "C" __global__ void {kernel}\(', kernel_source(file_name)), (
            f"{kernel} is launched from {file_name} but not defined there"
        )


def test_every_abstract_method_is_implemented():
    assert not CuBLASBackend.__abstractmethods__


def test_module_imports_and_reports_missing_cupy():
    """Where `import cupy` fails (a fresh interpreter), the module imports and the backend names the fix."""
    script = (
        "import sys; sys.modules['cupy'] = None\n"
        "from microgpt.backends import BackendUnavailable, resolve_auto\n"
        "from microgpt.backends.cuda import CuBLASBackend\n"
        "assert CuBLASBackend.is_usable() is False\n"
        "assert resolve_auto() == 'cpu'\n"
        "try:\n"
        "    CuBLASBackend()\n"
        "except BackendUnavailable as exc:\n"
        "    print(exc)\n"
        "else:\n"
        "    raise SystemExit('no BackendUnavailable')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "CuPy is not installed" in result.stdout
    assert 'pip install "microgpt-kit[cuda13]" (in a checkout: pip install -e ".[cuda13]")' in result.stdout


@pytest.mark.skipif(CuBLASBackend.is_usable(), reason="CuPy and a GPU are usable here")
def test_backend_unavailable_here_names_the_fix():
    with pytest.raises(BackendUnavailable, match=r"pip install|GPU|cuBLAS"):
        CuBLASBackend()
    assert resolve_auto() == "cpu"


# ---- the backend's Python on the CPU: NumPy as CuPy, an emulated cuBLAS, emulated kernels --------


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (1, 33, 65), (127, 1, 33), (5, 0, 3)])
@pytest.mark.parametrize("transpose_a", [False, True])
@pytest.mark.parametrize("transpose_b", [False, True])
def test_cublas_calls_compute_row_major_products(emulated, m, k, n, transpose_a, transpose_b):
    be, _ = emulated
    rng = np.random.default_rng(0)
    a = rng.normal(size=(k, m) if transpose_a else (m, k)).astype(np.float32)
    b = rng.normal(size=(n, k) if transpose_b else (k, n)).astype(np.float32)
    want = (a.T if transpose_a else a).astype(np.float64) @ (b.T if transpose_b else b)
    got = be.to_host(be.matmul(be.from_host(a), be.from_host(b), transpose_a, transpose_b))
    np.testing.assert_allclose(got, want, atol=1e-5)
    storage = be.zeros((2, m * n + 3))  # dst is a view at an offset, as parameter gradients are
    dst = storage[1, 2 : 2 + m * n].reshape(m, n)
    for _ in range(2):
        be.matmul_into(be.from_host(a), be.from_host(b), dst, transpose_a, transpose_b, accumulate=True)
    np.testing.assert_allclose(be.to_host(storage)[1, 2 : 2 + m * n].reshape(m, n), 2 * want, atol=1e-5)
    assert not be.to_host(storage)[0].any() and not be.to_host(storage)[1, [0, 1, -1]].any()
    stacked_a, stacked_b = np.stack([a, -a, 2 * a]), np.stack([b, b, b])
    got = be.to_host(be.bmm(be.from_host(stacked_a), be.from_host(stacked_b), transpose_a, transpose_b))
    np.testing.assert_allclose(got, np.stack([want, -want, 2 * want]), atol=1e-5)
    np.testing.assert_array_equal(be.to_host(be.transpose(be.from_host(a))), a.T)


def test_every_kernel_is_launched_with_its_signature(emulated):
    """Each launch is checked against the C signature by the emulator; every kernel defined is launched."""
    be, _ = emulated
    rng = np.random.default_rng(0)

    def dev(*shape):
        return be.from_host(rng.normal(size=shape))

    x, grad, row = dev(7, 33), dev(7, 33), dev(1, 33)
    be.softmax_rows(x)
    be.softmax_backward(x, grad)
    be.fused_attn_softmax(dev(66, 33), 0.25)
    be.fused_attn_softmax_backward(x, grad, 0.25)
    be.causal_mask(dev(5, 5))
    be.causal_mask_batched(dev(10, 5), 5)
    be.bias_add(x, row)
    be.relu_backward(grad, be.relu_forward(x)[1])
    be.fused_bias_relu(x, row)
    _, norm, std_inv = be.layer_norm_forward(x, row, row)
    be.layer_norm_backward(grad, norm, std_inv, row)
    be.sum_rows(dev(1000, 65))
    be.adam_step(dev(1, 50), dev(1, 50), dev(1, 50), dev(1, 50), 1e-3, 1)
    be.adamw_step(dev(1, 50), dev(1, 50), dev(1, 50), dev(1, 50), dev(1, 50), dev(1, 50), 1e-3, 1, 0.9, 0.99, 0.1,
                  0.5)
    be.rope_apply(dev(66, 33), dev(33, 33), dev(33, 33))
    be.rope_apply_inverse(dev(66, 33), dev(33, 33), dev(33, 33))
    ids = be.ids(np.array([[1, 2, 3, 3], [0, 0, 1, 2]]))  # (2, 4) int32 on the "device"
    rows = be.embedding_gather(dev(10, 8), ids.reshape(-1), 8, 8)
    be.embedding_scatter_add(rows, ids.reshape(-1), dev(10, 8), 8, 8)
    loss, _ = be.fused_softmax_ce_grad(dev(8, 65), ids.reshape(-1))
    assert isinstance(loss, float)
    _, saved = be.causal_attention(dev(2, 9, 5), dev(2, 9, 5), dev(2, 9, 5), 0.5)
    be.causal_attention_backward(dev(2, 9, 5), saved, 0.5)
    be.use_precision("bf16")
    be.matmul(x, grad, transpose_b=True)  # round_bf16 on each input, then GemmEx
    be.fused_attn_softmax(dev(66, 33), 0.25)  # each kernel's _bf16 twin, which writes its output's bits beside it
    be.fused_attn_softmax_backward(x, grad, 0.25)
    be.relu_backward(grad, be.relu_forward(x)[1])
    be.fused_bias_relu(x, row)
    be.layer_norm_forward(x, row, row)
    launched = {key for key, kernel in be._kernels.items() if kernel.launches}
    defined = {(f, k) for f in kernel_files() for k in kernel_parameters(kernel_source(f))}
    assert launched == defined


def test_transfers_are_counted_where_they_happen(emulated):
    be, _ = emulated
    host = np.arange(6, dtype=np.float32)
    be.transfers.update(to_device=0, to_host=0)
    back = be.to_host(be.from_host(host))
    np.testing.assert_array_equal(back, host)
    be.ids(be.ids(np.arange(4)))  # ids already on the device are not uploaded again
    be.gpu_download(back, be.from_host(host).data.ptr, host.nbytes)
    assert be.transfers == {"to_device": 3, "to_host": 2}


def test_column_sums_of_very_tall_arrays_stay_within_the_grid_limits(emulated, monkeypatch):
    """More than MAX_GRID_Y * 128 rows: the chunks (grid.y) would pass the limit unless each takes more rows.

    CUDA's limit is 65535; here both the backend's and the emulator's limit are 4, so the same
    arithmetic runs on 4 * 128 + 1 rows instead of 8 million."""
    be, _ = emulated
    monkeypatch.setattr(launch, "MAX_GRID_Y", 4)
    monkeypatch.setattr(emulator_launch, "MAX_GRID", (2**31 - 1, 4, 4))
    rows = 4 * 128 + 1
    a = np.arange(rows * 3, dtype=np.float32).reshape(rows, 3) % 7  # small integers: the sums are exact
    np.testing.assert_array_equal(be.to_host(be.sum_rows(be.from_host(a))), a.sum(0, keepdims=True))
    _, dgamma, _ = be.layer_norm_backward(be.from_host(a), be.from_host(a), be.zeros((rows, 1)), be.zeros((1, 3)))
    np.testing.assert_array_equal(be.to_host(dgamma), (a * a).sum(0, keepdims=True))
    assert be._kernels[("reduce_columns.cu", "column_sums")].launches >= 2


def test_release_of_an_empty_array(emulated):
    be, _ = emulated
    be.release(be.zeros((0, 3)))  # CuPy's Memory(0) has no free(): nothing to return to the pool
    be.release(be.zeros((2, 3)))
    with pytest.raises(ValueError, match="view"):
        be.release(be.zeros((4, 4))[1:])
