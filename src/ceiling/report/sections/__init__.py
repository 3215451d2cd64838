"""The report's sections, in reading order. Each module has KEY, TITLE and run(ctx, out)."""

from __future__ import annotations

from ceiling.report.compose import SectionSpec
from ceiling.report.sections import (
    amdahl,
    decode,
    machine,
    mfu,
    overhead,
    planner,
    roofline,
    scaling,
    serving,
    trace,
)

# weight_s: rough quick-mode seconds, so the overall progress bar moves at a fair pace
SECTIONS = [
    SectionSpec(machine.KEY, machine.TITLE, machine.run, weight_s=60, measures=True),
    SectionSpec(amdahl.KEY, amdahl.TITLE, amdahl.run, weight_s=1),
    SectionSpec(roofline.KEY, roofline.TITLE, roofline.run, weight_s=10, measures=True),
    SectionSpec(overhead.KEY, overhead.TITLE, overhead.run, weight_s=10, measures=True),
    SectionSpec(mfu.KEY, mfu.TITLE, mfu.run, weight_s=20, measures=True),
    SectionSpec(scaling.KEY, scaling.TITLE, scaling.run, weight_s=25, measures=True),
    SectionSpec(decode.KEY, decode.TITLE, decode.run, weight_s=15, measures=True),
    SectionSpec(serving.KEY, serving.TITLE, serving.run, weight_s=10),
    SectionSpec(planner.KEY, planner.TITLE, planner.run, weight_s=5),
]


# only when the user gives a trace (`ceiling report --trace PATH`); it follows the MFU section
TRACE_SECTION = SectionSpec(trace.KEY, trace.TITLE, trace.run, weight_s=5)


def by_key(key: str) -> SectionSpec:
    for s in SECTIONS:
        if s.key == key:
            return s
    raise KeyError(key)
