"""A deadline for work run in this process: a user's target that never returns is stopped.

`deadline(seconds, what)` arms a real-time timer (SIGALRM); when it fires, the running code
gets an exception that `except Exception` in the user's code does not swallow, and the
caller gets one `TimedOut` line saying what was stopped after how long. The timer
interrupts Python code and blocking calls such as sleep; a single C call that never
returns to Python is stopped when it does. Outside the main thread, or where there is no
SIGALRM, the work runs without a deadline (a worker process has its launcher's instead).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

from ceiling.errors import InvalidInput, TimedOut, argument

# Default deadline of commands that run a user's code in this process.
DEFAULT_TIMEOUT_S = 600.0


class _Expired(BaseException):
    """Raised inside the running code when its time is up (not an Exception on purpose)."""


def check_timeout(seconds: float | None) -> float | None:
    if seconds is None:
        return None
    if not 0 < seconds < float("inf"):
        raise InvalidInput(
            f"{argument('timeout_s')} must be a positive number of seconds, got {seconds:g}"
        )
    return seconds


@contextlib.contextmanager
def deadline(seconds: float | None, what: str) -> Iterator[None]:
    """Stop the body after `seconds` (None: no deadline) with TimedOut naming `what`."""
    seconds = check_timeout(seconds)
    usable = (
        seconds is not None
        and hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
    )
    if not usable:
        yield
        return

    def expire(_signum, _frame):
        raise _Expired

    previous = signal.signal(signal.SIGALRM, expire)
    try:
        try:
            # armed inside the try: a timer short enough to fire at once is still caught
            signal.setitimer(signal.ITIMER_REAL, seconds)
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except _Expired:  # also when it fired just as the body ended
        raise TimedOut(
            f"{what} did not finish within {seconds:g} s ({argument('timeout_s')}) and was stopped"
        ) from None
    finally:
        signal.signal(signal.SIGALRM, previous)
