"""Telling a hung rank from a busy or a waiting one.

Every worker runs a small thread that, once a second, writes a beat: the CPU time of the
process's threads (the beating thread's own left out), where the main thread is (file,
line, function) and whether it is inside a torch.distributed call (waiting for the other
ranks; importing torch.distributed is not waiting). A beat must prove progress, not that
the process lives: the beating thread, the idle loop of gloo's network thread and a
rendezvous store's polling use a little CPU time all along (under 1 % of a core), which
once added up over the stall window to look like work. So the launching process counts a
rank as progressing while its main thread's position moves or its threads keep at least
`BUSY_SHARE` of a core busy between two beats; when no rank has made progress for
`stall_s`, the job is hung, and the ranks to blame are the ones not waiting in a
collective (the others wait for them), else the ones whose beats stopped (a stopped
process), else all. A rank busy in one long C++ call still burns
CPU time, and a rank waiting at a barrier while another computes is not to blame, so
neither is mistaken for a hang. Ranks that all wait in a collective count as progressing
while their threads stay busy (data in flight; NCCL spins).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Default for how long a job may go without any rank making progress.
STALL_S = 30.0
BEAT_S = 1.0
# The share of one core a rank's threads must keep busy between two beats to count as work:
# idle communication threads and polling waits use under 1 %, computing or moving data far
# more (a quarter of a core even for a rank that shares 2 cores with 7 others).
BUSY_SHARE = 0.05
# Beats missed before a rank counts as silent (stopped, or its main thread holds the GIL).
SILENT_BEATS = 5
_TORCH_DIR = f"{os.sep}torch{os.sep}"
_COLLECTIVE_DIR = f"{os.sep}torch{os.sep}distributed{os.sep}"


def _main_thread_state() -> dict[str, Any]:
    """Where the main thread is: the innermost frame outside torch, and whether it is inside
    a torch.distributed call (importing torch.distributed is not: a rank stopped while it
    imports is to blame, not waiting for the others)."""
    frame = sys._current_frames().get(threading.main_thread().ident)
    where, pos, in_collective, importing = "", None, False, False
    while frame is not None:
        code = frame.f_code
        path = code.co_filename
        if pos is None:
            pos = [path, frame.f_lineno, frame.f_lasti]
        importing = importing or path.startswith("<frozen importlib")
        if _COLLECTIVE_DIR in path:
            in_collective = in_collective or (not importing and code.co_name != "<module>")
        elif not where and _TORCH_DIR not in path and not path.startswith(("<frozen", __file__)):
            where = f"{Path(path).name}:{frame.f_lineno} in {code.co_name}"
        frame = frame.f_back
    return {"where": where, "pos": pos, "in_collective": in_collective}


def beat() -> dict[str, Any]:
    """This worker's state now, read from the beating thread (whose own CPU time is left
    out of `cpu_s`); `t` is this process's clock, to turn CPU time into a share of a core."""
    return {
        "t": time.monotonic(),
        "cpu_s": time.process_time() - time.thread_time(),
        **_main_thread_state(),
    }


def write_beat(path: Path) -> None:
    part = path.with_suffix(".part")
    part.write_text(json.dumps(beat()))
    os.replace(part, path)


def start_beating(path: Path, interval_s: float = BEAT_S) -> None:
    """In a worker: write a beat to `path` every `interval_s` until the process ends."""

    def loop() -> None:
        while True:
            try:
                write_beat(path)
            except OSError:  # the run's folder is gone: the launcher has finished
                return
            time.sleep(interval_s)

    threading.Thread(target=loop, name="ceiling-beat", daemon=True).start()


@dataclass
class _Rank:
    t: float  # the worker's clock at its last beat
    cpu_s: float  # its threads' CPU time then, the beating thread's left out
    pos: Any
    in_collective: bool
    where: str
    changed_at: float  # when it last made progress (launcher's clock)
    beat_at: float  # when its last new beat was read (launcher's clock)


def _progressed(old: _Rank, new: _Rank) -> bool:
    """Whether a rank moved between two beats: its main thread's position, or its threads'
    share of a core (a long call in C++, data in flight)."""
    if new.pos != old.pos:
        return True
    return new.t > old.t and (new.cpu_s - old.cpu_s) / (new.t - old.t) >= BUSY_SHARE


class StallWatch:
    """The launcher's judge: feed it each rank's latest beat, ask it which ranks hang."""

    def __init__(self, world: int, stall_s: float = STALL_S):
        self.world = world
        self.stall_s = stall_s
        self.ranks: dict[int, _Rank] = {}

    def update(self, rank: int, beat: dict[str, Any], now: float) -> None:
        old = self.ranks.get(rank)
        t = float(beat.get("t", now))
        if old is not None and t == old.t:
            return  # the same beat read again: nothing new from this rank
        new = _Rank(
            t=t,
            cpu_s=float(beat.get("cpu_s", 0.0)),
            pos=beat.get("pos"),
            in_collective=bool(beat.get("in_collective")),
            where=str(beat.get("where", "")),
            changed_at=now,
            beat_at=now,
        )
        if old is not None and not _progressed(old, new):
            new.changed_at = old.changed_at
        self.ranks[rank] = new

    def silent(self, rank: int, now: float) -> bool:
        """True when the rank's beats stopped coming (a stopped process, a held GIL)."""
        return now - self.ranks[rank].beat_at >= SILENT_BEATS * BEAT_S

    def hung(self, running: list[int], now: float) -> list[int]:
        """Ranks to blame when no rank has progressed for `stall_s`; else []."""
        if not running or any(r not in self.ranks for r in running):
            return []  # a rank still starting: the run's overall deadline covers it
        states = {r: self.ranks[r] for r in running}
        working = [r for r, s in states.items() if not s.in_collective]
        counted = working or list(states)
        last = max(states[r].changed_at for r in counted)
        if now - last < self.stall_s:
            return []
        silent = [r for r in running if self.silent(r, now)]
        return sorted(working or silent or running)

    def describe(self, culprits: list[int], now: float | None = None) -> str:
        """'worker rank 1 of 2 made no progress for 30 s (at job.py:12 in step; ...)'."""
        one = len(culprits) == 1
        places = [
            ("at " if one else f"rank {r} at ") + (self.ranks[r].where or "an unknown place")
            for r in culprits
        ]
        others = "the other ranks waited for " + ("it" if one else "them")
        silent = now is not None and all(self.silent(r, now) for r in culprits)
        if silent and len(culprits) < self.world:
            stopped = "it stopped" if one else "they stopped"
            places.append(f"{stopped} beating: a stopped process, or one holding the GIL")
            why = others
        elif all(self.ranks[r].in_collective for r in culprits):
            why = "every rank waited in a collective that never completed"
        elif len(culprits) == self.world:
            why = "none waited for another"
        else:
            why = others
        return (
            f"worker {'rank' if one else 'ranks'} {', '.join(map(str, culprits))} of "
            f"{self.world} made no progress for {self.stall_s:g} s ({'; '.join(places)}; {why})"
        )


def starting_beat(cpu_s: float, now: float) -> dict[str, Any]:
    """A beat for a rank that has written none yet, from its process's CPU time as the
    launcher reads it: importing torch keeps a core busy, a process stopped before its first
    beat does not, and is caught like any other hang."""
    return {"t": now, "cpu_s": cpu_s, "pos": None, "where": "start-up, before its first beat"}


def read_beats(tmpdir: Path, world: int) -> dict[int, dict[str, Any]]:
    out = {}
    for rank in range(world):
        try:
            out[rank] = json.loads((tmpdir / f"rank{rank}.beat").read_text())
        except (OSError, ValueError):
            continue
    return out
