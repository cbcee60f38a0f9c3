"""Work held to a memory limit: `held_to(limit)`, a subprocess's `preexec_fn` that holds the child to `limit`
bytes of address space, so that work meant to be refused or read a piece at a time fails, instead of passing,
where it would take more; `run_held` runs Python code so held and reports its peak, which `peak_mb` reads."""

from __future__ import annotations

import resource
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

GIB = 2**30
THE_CLI = "from microgpt.cli import main\ncode = main(sys.argv[1:])"  # run_held's code for `microgpt ARGS`


def held_to(limit: int) -> Callable[[], None]:
    """What runs in the child before it starts: RLIMIT_AS, soft and hard, set to `limit` bytes."""

    def hold() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return hold


def run_held(code: str, *args: str, cwd: Path, limit: int, timeout: float) -> subprocess.CompletedProcess:
    """`code` (which sets `code`, the exit status; sys is imported) in its own interpreter held to `limit`, with
    `args` as sys.argv[1:]; it prints its peak resident MB last on stderr. The peak is VmHWM, this program's
    own: Linux carries ru_maxrss across exec, so a child forked from a large pytest worker would report the
    worker's peak (482 MB seen in CI)."""
    wrapped = (f"import sys\n{code}\nhwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0]"
               "\nprint(int(hwm.split()[1]) // 1024, file=sys.stderr)\nsys.exit(code)")
    return subprocess.run([sys.executable, "-c", wrapped, *args], cwd=cwd, capture_output=True, text=True,
                          check=False, timeout=timeout, preexec_fn=held_to(limit))


def peak_mb(done: subprocess.CompletedProcess) -> int:
    """The peak resident MB that run_held's child printed last."""
    return int(done.stderr.split()[-1])
