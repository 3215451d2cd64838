"""Decode ceilings for catalog models, here and on reference GPUs; measured small-model decode."""

from __future__ import annotations

from ceiling.report.compose import ReportContext, SectionOutput, Skip, require

KEY = "decode"
TITLE = "LLM decoding: the memory-bandwidth ceiling"


def run(ctx: ReportContext, out: SectionOutput) -> None:
    require("ceiling.model.decode", "the decode model")
    raise Skip("the decode model is present but this section does not use it yet")
