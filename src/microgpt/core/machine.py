"""What machine a figure was measured on: the processor's name, its cores and the load while it ran.

Speeds differ about 2x between the machines people run microgpt on, and a busy
machine is slower still, so every measured speed the tool prints or logs says
where it was measured (`describe()`), as the figures of docs/benchmarks.md do.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

from microgpt.core.threads import available_cores


def processor_name() -> str:
    """The processor's model name (Linux's /proc/cpuinfo, else what the platform says, else "a CPU")."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.lower().startswith("model name"):
                return " ".join(line.split(":", 1)[1].split())
    except OSError:
        pass
    return platform.processor() or "a CPU"


def load_average() -> float | None:
    """The 1-minute load average, where the system reports one."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def describe() -> str:
    """'Intel(R) Xeon(R) Processor, 2 cores, load average 1.2'."""
    cores = available_cores()
    load = load_average()
    return f"{processor_name()}, {cores} core{'s' if cores != 1 else ''}" + (
        f", load average {load:.1f}" if load is not None else "")
