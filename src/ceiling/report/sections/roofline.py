"""The empirical roofline with the seed's three operations placed on it, predicted vs measured."""

from __future__ import annotations

from ceiling.report.compose import ReportContext, SectionOutput, Skip, require

KEY = "roofline"
TITLE = "Compute- or memory-bound: the roofline"


def run(ctx: ReportContext, out: SectionOutput) -> None:
    require("ceiling.model.opcost", "the op cost model")
    raise Skip("the op cost model is present but this section does not use it yet")
