"""`held_to(limit)`: a subprocess's `preexec_fn` that holds the child to `limit` bytes of address space, so that
work meant to be refused or read a piece at a time fails, instead of passing, where it would take more."""

from __future__ import annotations

import resource
from collections.abc import Callable

GIB = 2**30


def held_to(limit: int) -> Callable[[], None]:
    """What runs in the child before it starts: RLIMIT_AS, soft and hard, set to `limit` bytes."""

    def hold() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return hold
