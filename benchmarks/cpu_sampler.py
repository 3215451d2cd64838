"""CPU time of a process and its children, sampled on a thread (psutil), so the CPU a
benchmark client spends *while its requests run* can be told from its start-up."""

from __future__ import annotations

import contextlib
import threading
import time

import numpy as np


class TreeCpu:
    """Samples (wall clock `time.time()`, CPU seconds of `pid` and its live descendants)
    every `every_s` until `stop()`."""

    def __init__(self, pid: int, every_s: float = 0.2):
        import psutil

        self.root = psutil.Process(pid)
        self.every_s = every_s
        self.samples: list[tuple[float, float]] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _cpu_s(self) -> float:
        import psutil

        total = 0.0
        for p in [self.root, *self.root.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                t = p.cpu_times()
                total += t.user + t.system
        return total

    def _run(self) -> None:
        import psutil

        while not self._done.is_set():
            try:
                self.samples.append((time.time(), self._cpu_s()))
            except psutil.Error:
                return
            self._done.wait(self.every_s)

    def stop(self) -> None:
        self._done.set()
        self._thread.join()

    def cores_between(self, start: float, end: float) -> float | None:
        """Mean cores busy between wall-clock times `start` and `end` (interpolated)."""
        if len(self.samples) < 2 or end <= start:
            return None
        t, cpu = np.array(self.samples).T
        return float((np.interp(end, t, cpu) - np.interp(start, t, cpu)) / (end - start))
