"""What this machine has room for: available memory and cores, checked before work starts.

Each check takes the machine's facts as arguments (`Room`), so the arithmetic is tested
with made-up machines; `local_room()` reads the real ones (psutil). A refusal is one line
that shows the arithmetic: what the run needs, from what, against what there is.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ceiling.errors import DoesNotFit, InvalidInput
from ceiling.units import format_bytes

# Worker processes per core a local multi-worker run may start: more only queue for the
# cores (and each holds its own Python and torch in memory).
MAX_WORKERS_PER_CORE = 8
# Memory of one worker process with torch imported and a process group up (its own pages,
# shared libraries not counted): about 150 MiB measured on Linux x86-64, rounded up.
WORKER_BYTES = 200 * 2**20


@dataclass(frozen=True)
class Room:
    """A machine's facts the checks need."""

    available_bytes: float  # memory that can be allocated without swapping
    cores: int  # cores this process may run on


def local_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def local_room() -> Room:
    import psutil

    return Room(float(psutil.virtual_memory().available), local_cores())


def _gib(n: float) -> str:
    return format_bytes(n, binary=True)


def check_bytes(need_bytes: float, arithmetic: str, room: Room, hint: str = "") -> None:
    """Refuse when `need_bytes` (described by `arithmetic`) exceeds the available memory."""
    if need_bytes > room.available_bytes:
        raise DoesNotFit(
            f"{arithmetic} = {_gib(need_bytes)} needed, {_gib(room.available_bytes)} of memory "
            f"available" + (f"; {hint}" if hint else "")
        )


def check_workers(workers: int, room: Room, per_worker_bytes: float = 0.0) -> None:
    """Refuse more local worker processes than MAX_WORKERS_PER_CORE per core, or than fit
    in memory at WORKER_BYTES + `per_worker_bytes` each."""
    cap = MAX_WORKERS_PER_CORE * room.cores
    if workers > cap:
        raise InvalidInput(
            f"{workers} worker processes on {room.cores} core(s) is more than "
            f"{MAX_WORKERS_PER_CORE} per core ({cap}); use at most {cap} here, or run across "
            "machines under torchrun"
        )
    each = WORKER_BYTES + per_worker_bytes
    check_bytes(
        workers * each,
        f"{workers} workers × {_gib(each)} each",
        room,
        "use fewer workers or smaller messages",
    )
