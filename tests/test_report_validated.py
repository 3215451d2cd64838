"""The validated errors the report prints beside modelled figures are the shipped
leave-one-source-out bands of the validation corpus (`ceiling validate`), recomputed here
from the shipped residuals."""

from __future__ import annotations

import statistics

import pytest

from ceiling.report import validated
from ceiling.validation import bands


@pytest.mark.parametrize(
    ("figure", "base"),
    [
        (validated.PLANNER, "training"),
        (validated.DECODE_EXPECTED, "decode expected"),
        (validated.SERVING_THROUGHPUT, "serving throughput"),
        (validated.SERVING_LATENCY, "serving latency"),
    ],
)
def test_each_printed_error_is_its_regimes_held_out_median(figure, base):
    rows = [r for r in bands.residuals() if r.base == base]
    assert figure.runs == len(rows) >= 3
    assert figure.median_abs_error == pytest.approx(
        statistics.median(abs(r.loso_error) for r in rows)
    )
    assert "leave-one-source-out" in figure.line()


def test_the_ceiling_note_counts_the_published_runs_below_it():
    ceiling = [r for r in bands.rows() if r["regime"] == "decode ceiling"]
    below = [r for r in ceiling if (r["error"] > 0) == (r["metric"] == "tokens_per_s")]
    assert f"above {len(below)} of {len(ceiling)} published" in validated.DECODE_CEILING_NOTE
