"""Telling a hung rank from a busy or a waiting one.

Every worker runs a small thread that, once a second, writes a beat: the process's CPU
time, where its main thread is (file, line, function) and whether it is inside a
torch.distributed call (waiting for the other ranks). The launching process reads the
beats: a rank outside a collective whose CPU time and position both stand still makes no
progress; when no rank has made progress for `stall_s`, the job is hung, and the ranks to
blame are the ones not waiting in a collective (the others wait for them). A rank busy in
one long C++ call still burns CPU time, and a rank waiting at a barrier while another
computes is not to blame, so neither is mistaken for a hang. Ranks that all wait in a
collective count as progressing while their CPU time moves (data in flight; NCCL spins).
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
# CPU seconds that count as work between two beats (idle threads use far less).
CPU_PROGRESS_S = 0.02
_TORCH_DIR = f"{os.sep}torch{os.sep}"
_COLLECTIVE_DIR = f"{os.sep}torch{os.sep}distributed{os.sep}"


def _main_thread_state() -> dict[str, Any]:
    """Where the main thread is: the innermost frame outside torch, and whether any frame on
    its stack is a torch.distributed call."""
    frame = sys._current_frames().get(threading.main_thread().ident)
    where, pos, in_collective = "", None, False
    while frame is not None:
        path = frame.f_code.co_filename
        if pos is None:
            pos = [path, frame.f_lineno, frame.f_lasti]
        if _COLLECTIVE_DIR in path:
            in_collective = True
        elif not where and _TORCH_DIR not in path and path != __file__:
            where = f"{Path(path).name}:{frame.f_lineno} in {frame.f_code.co_name}"
        frame = frame.f_back
    return {"where": where, "pos": pos, "in_collective": in_collective}


def write_beat(path: Path) -> None:
    beat = {"cpu_s": time.process_time(), **_main_thread_state()}
    part = path.with_suffix(".part")
    part.write_text(json.dumps(beat))
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
    cpu_s: float
    pos: Any
    in_collective: bool
    where: str
    changed_at: float


class StallWatch:
    """The launcher's judge: feed it each rank's latest beat, ask it which ranks hang."""

    def __init__(self, world: int, stall_s: float = STALL_S):
        self.world = world
        self.stall_s = stall_s
        self.ranks: dict[int, _Rank] = {}

    def update(self, rank: int, beat: dict[str, Any], now: float) -> None:
        old = self.ranks.get(rank)
        cpu = float(beat.get("cpu_s", 0.0))
        state = _Rank(cpu, beat.get("pos"), bool(beat.get("in_collective")), "", now)
        state.where = str(beat.get("where", ""))
        if old is not None and cpu - old.cpu_s < CPU_PROGRESS_S and state.pos == old.pos:
            state.changed_at, state.cpu_s = old.changed_at, old.cpu_s
        self.ranks[rank] = state

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
        return sorted(working or running)

    def describe(self, culprits: list[int]) -> str:
        """'worker rank 1 of 2 made no progress for 30 s (at job.py:12 in step; ...)'."""
        one = len(culprits) == 1
        places = [
            ("at " if one else f"rank {r} at ") + (self.ranks[r].where or "an unknown place")
            for r in culprits
        ]
        if all(self.ranks[r].in_collective for r in culprits):
            why = "every rank waited in a collective that never completed"
        elif len(culprits) == self.world:
            why = "none waited for another"
        else:
            why = f"the other ranks waited for {'it' if one else 'them'}"
        return (
            f"worker {'rank' if one else 'ranks'} {', '.join(map(str, culprits))} of "
            f"{self.world} made no progress for {self.stall_s:g} s ({'; '.join(places)}; {why})"
        )


def read_beats(tmpdir: Path, world: int) -> dict[int, dict[str, Any]]:
    out = {}
    for rank in range(world):
        try:
            out[rank] = json.loads((tmpdir / f"rank{rank}.beat").read_text())
        except (OSError, ValueError):
            continue
    return out
