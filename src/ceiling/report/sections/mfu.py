"""Model FLOPs utilisation of a built-in training step, and the serial part of the step."""

from __future__ import annotations

from ceiling.report.compose import ReportContext, SectionOutput, Skip, require

KEY = "mfu"
TITLE = "MFU of a training step"


def run(ctx: ReportContext, out: SectionOutput) -> None:
    require("ceiling.model.mfu", "the MFU model")
    raise Skip("the MFU model is present but this section does not use it yet")
