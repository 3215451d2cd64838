"""Overheads: per-op dispatch or launch cost, Python loop vs vectorized, the GPU crossover."""

from __future__ import annotations

from ceiling.report.compose import ReportContext, SectionOutput, Skip, require

KEY = "overhead"
TITLE = "Overheads: dispatch, Python loops, and when a GPU pays"


def run(ctx: ReportContext, out: SectionOutput) -> None:
    require("ceiling.measure.overhead", "the overhead benchmark")
    raise Skip("the overhead benchmark is present but this section does not use it yet")
