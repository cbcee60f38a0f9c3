"""The NCCL communicator on GPUs: one rank always where a GPU is usable, two ranks under mpiexec where two GPUs
exist. Elsewhere these skip with the reason; the module itself must import without CuPy (checked here too)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from backend_kinds import CUDA_SKIP
from microgpt.core.errors import DistributedError
from microgpt.parallel.communicator import SingleProcess


def test_the_nccl_module_imports_without_cupy(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)
    monkeypatch.delitem(sys.modules, "microgpt.parallel.nccl", raising=False)
    import microgpt.parallel.nccl  # CuPy is imported only when a communicator is made

    with pytest.raises(DistributedError, match=r"NCCL, which CuPy cannot load .* pip install"):
        microgpt.parallel.nccl.NCCLCommunicator.from_mpi(SingleProcess())


@pytest.mark.gpu
@pytest.mark.skipif(CUDA_SKIP is not None, reason=str(CUDA_SKIP))
def test_one_rank_nccl_allreduce_mean_is_in_place_on_the_device():
    import cupy
    from cupy.cuda import nccl

    from microgpt.parallel.nccl import NCCLCommunicator

    comm = NCCLCommunicator(SingleProcess(), nccl.get_unique_id())
    buffer = cupy.arange(1000, dtype=cupy.float32).reshape(1, 1000)
    pointer = buffer.data.ptr
    comm.allreduce_mean(buffer)
    assert buffer.data.ptr == pointer
    np.testing.assert_array_equal(cupy.asnumpy(buffer), np.arange(1000, dtype=np.float32).reshape(1, 1000))


TWO_RANKS = """
import cupy, numpy as np
from microgpt.backends import get_backend
from microgpt.parallel.communicator import communicator
mpi = communicator()
mpi.use_local_gpu()
comm = mpi.for_backend(get_backend("cuda"))
buffer = cupy.arange(1000, dtype=cupy.float32).reshape(1, 1000) * (comm.rank + 1)
comm.allreduce_mean(buffer)
np.save(f"rank{comm.rank}.npy", cupy.asnumpy(buffer))
"""


@pytest.mark.gpu
@pytest.mark.skipif(CUDA_SKIP is not None, reason=str(CUDA_SKIP))
def test_two_ranks_average_over_nccl(tmp_path):
    import cupy

    pytest.importorskip("mpi4py", reason="mpi4py is not installed (pip install -e \".[cuda12]\")")
    if cupy.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("one GPU here; two ranks need two")
    from microgpt.parallel.launch import child_environment, find_mpiexec

    result = subprocess.run([find_mpiexec(), "-n", "2", sys.executable, "-c", TWO_RANKS], check=False, cwd=tmp_path,
                            env=child_environment(), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    expected = np.arange(1000, dtype=np.float32).reshape(1, 1000) * 1.5  # the mean of x and 2x
    for rank in (0, 1):
        np.testing.assert_array_equal(np.load(tmp_path / f"rank{rank}.npy"), expected)
