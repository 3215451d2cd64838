"""A parallelism plan for a large model and the pipeline bubble."""

from __future__ import annotations

from ceiling.report.compose import ReportContext, SectionOutput, Skip, require

KEY = "planner"
TITLE = "Planning a large training run"


def run(ctx: ReportContext, out: SectionOutput) -> None:
    require("ceiling.model.plan_search", "the parallelism planner")
    raise Skip("the parallelism planner is present but this section does not use it yet")
