"""Several processes as one: the communicator a run uses (communicator.py: one process, or MPI in mpi.py with
NCCL on GPUs in nccl.py), `--procs` relaunching under mpiexec (launch.py), and how long a rank waits for the
others (watchdog.py).

It imports only core/ and itself; the settings (the collective timeout's default) and training use it.
Nothing here knows a model, a backend or a setting.
"""
