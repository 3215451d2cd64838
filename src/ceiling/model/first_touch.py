"""First touch of fresh memory: the cost per byte of a new buffer, and the size it starts at.

From best times of filling a newly allocated buffer (fresh) and an existing one (reused)
at several sizes (`ceiling.measure.first_touch`): the extra per byte of a fresh buffer is
(fresh − reused) / size. Allocators hand small blocks back from their own free lists and
large ones from the operating system, so the extra is about zero below some size and
about constant above it. That size is the smallest one from which every larger size pays
at least half the extra of the largest; the cost per byte is the median extra from there.
An extra below NOISE × the reused time per byte is no cost at all (a caching allocator).

Where the page faults of a fresh fill were counted, the extra over them is the cost of
one page fault; an op whose own page faults were counted (the recorder does, where the
operating system counts them per thread) is then priced by those, whatever the allocator
did with its blocks that time, rather than by the size rule.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from ceiling.errors import InvalidInput

NOISE = 0.25


@dataclass(frozen=True)
class FirstTouch:
    s_per_byte: float  # extra seconds per byte written into a new buffer of from_bytes or more
    from_bytes: float | None  # the smallest new buffer that pays it; None: none does
    s_per_fault: float = 0.0  # one page fault, where they were counted

    def seconds(self, new_buffers_bytes, page_faults: int | None = None) -> float:
        """What writing these newly allocated buffers costs beyond their bytes: the page
        faults taken, when counted and priced; else the buffers from from_bytes up."""
        if page_faults is not None and self.s_per_fault:
            return page_faults * self.s_per_fault
        if self.from_bytes is None or not self.s_per_byte:
            return 0.0
        return self.s_per_byte * sum(b for b in new_buffers_bytes if b >= self.from_bytes)


NONE = FirstTouch(0.0, None)


def fit(sizes_bytes, fresh_s, reused_s, fresh_faults=None) -> FirstTouch:
    """See the module docstring; sizes in increasing order."""
    if not (len(sizes_bytes) == len(fresh_s) == len(reused_s)) or not sizes_bytes:
        raise InvalidInput("first touch needs one fresh and one reused time per size")
    if any(s <= 0 for s in sizes_bytes) or list(sizes_bytes) != sorted(sizes_bytes):
        raise InvalidInput("first-touch sizes must be positive and increasing")
    extra = [max(f - r, 0.0) / s for s, f, r in zip(sizes_bytes, fresh_s, reused_s, strict=True)]
    largest = extra[-1]
    if largest <= NOISE * reused_s[-1] / sizes_bytes[-1]:
        return NONE
    start = len(extra) - 1
    while start > 0 and extra[start - 1] >= largest / 2:
        start -= 1
    faults = list(fresh_faults or [0] * len(sizes_bytes))[start:]
    per_fault = [
        max(f - r, 0.0) / n
        for f, r, n in zip(fresh_s[start:], reused_s[start:], faults, strict=True)
        if n and n > 0
    ]
    return FirstTouch(
        statistics.median(extra[start:]),
        float(sizes_bytes[start]),
        statistics.median(per_fault) if per_fault else 0.0,
    )
