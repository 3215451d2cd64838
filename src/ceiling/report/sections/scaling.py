"""Scaling measured over torch.distributed workers here, fitted with Amdahl, USL, Karp-Flatt."""

from __future__ import annotations

from ceiling.report.compose import ReportContext, SectionOutput, Skip, require

KEY = "scaling"
TITLE = "Scaling on this machine's cores"


def run(ctx: ReportContext, out: SectionOutput) -> None:
    require("ceiling.model.scaling", "the scaling fits")
    raise Skip("the scaling fits is present but this section does not use it yet")
