"""The NCCL communicator: data-parallel on GPUs, the gradient averaged on the device.

With the CUDA backend each rank drives one GPU (`MPICommunicator.use_local_gpu`)
and the flat gradient buffer, a CuPy array, is all-reduced by NCCL on the
current stream, the one every kernel of the step runs on: no copy to the host.
MPI still starts the processes, hands NCCL its unique id (rank 0 makes it and
broadcasts it) and carries the two-number loss/stop agreement and failures.
CuPy is imported only when an instance is made, so this module imports
without it.
"""

from __future__ import annotations

from microgpt.core.errors import DistributedError
from microgpt.core.version import install_hint


def _nccl():
    """CuPy's NCCL module, or a clear error: several GPU processes need it."""
    try:
        from cupy.cuda import nccl
    except ImportError as exc:
        raise DistributedError(f"several processes on the GPU average gradients with NCCL, which CuPy cannot load "
                               f"({exc}); {install_hint('cuda12')} (or [cuda13]) brings it") from None
    return nccl


class NCCLCommunicator:
    def __init__(self, host, unique_id):
        """`host` is the communicator of the processes (MPI, or `SingleProcess` for one rank);
        `unique_id` is NCCL's id, the same on every rank."""
        import cupy

        nccl = _nccl()
        self.host, self._cupy, self._nccl = host, cupy, nccl
        self.rank, self.size, self.local_rank, self.is_writer = host.rank, host.size, host.local_rank, host.is_writer
        self.comm = nccl.NcclCommunicator(host.size, unique_id, host.rank)

    @classmethod
    def from_mpi(cls, mpi) -> NCCLCommunicator:
        unique_id = _nccl().get_unique_id() if mpi.is_writer else None
        return cls(mpi, mpi.comm.bcast(unique_id, root=0))

    def allreduce_mean(self, buffer) -> None:
        """Replace `buffer` (a contiguous CuPy array of float32 or float64) by its mean over the ranks, in place."""
        nccl = self._nccl
        kinds = {"float32": nccl.NCCL_FLOAT32, "float64": nccl.NCCL_FLOAT64}
        stream = self._cupy.cuda.get_current_stream().ptr
        self.comm.allReduce(buffer.data.ptr, buffer.data.ptr, buffer.size, kinds[buffer.dtype.name],
                            nccl.NCCL_SUM, stream)
        buffer *= buffer.dtype.type(1.0 / self.size)

    def agree(self, loss: float, stop: bool, save: bool = False) -> tuple[float, bool, bool]:
        return self.host.agree(loss, stop, save)

    def time_out_after(self, seconds: float | None) -> None:
        self.host.time_out_after(seconds)  # the loss agreement is watched; NCCL's all-reduce is not

    def use_local_gpu(self) -> None:
        self.host.use_local_gpu()

    def for_backend(self, backend) -> NCCLCommunicator:
        return self

    def failing_together(self, command: str = "microgpt"):
        return self.host.failing_together(command)

    def placement(self) -> str:
        return self.host.placement()

    def describe(self) -> str:
        return f"{self.size} processes (MPI, gradients over NCCL)"
