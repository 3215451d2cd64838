"""The validated errors the report prints beside modelled figures, recomputed from the
validation tests' own published cases: a model change that moves them fails here."""

from __future__ import annotations

import statistics

import pytest

from ceiling.model.cluster import make_cluster
from ceiling.model.plan.search import search
from ceiling.model.plan.step import Job
from ceiling.report import validated
from test_decode_expected import PUBLISHED, _one
from test_parallel import A100, NARAYANAN, NARAYANAN_OTHER_ROWS, gpt
from test_plan_validation_v2 import validation_rows

# the figure is printed as a whole percent: it must match the recomputed one to that
PRINTED = 0.005


def _planner_errors() -> list[float]:
    cases = [(layers, h, a, t, p, d * t * p, B, rep) for layers, h, a, t, p, d, B, rep in NARAYANAN]
    cases += [
        (layers, h, a, t, p, g, B, rep) for a, h, layers, t, p, g, B, rep in NARAYANAN_OTHER_ROWS
    ]
    errors = []
    for layers, h, a, t, p, gpus, batch, reported in cases:
        fixed = dict(d=gpus // (t * p), t=t, p=p, recompute="full")
        best = search(
            Job(gpt(layers, h, a), batch, 2048, attention="unfused"),
            make_cluster(A100, gpus),
            fixed,
            top=1,
        )
        errors.append(best.plans[0].hw_tflops_per_device / reported - 1)
    return errors + [error for *_, error in validation_rows()]


@pytest.mark.slow
def test_planner_error_is_the_one_the_validation_cases_give():
    errors = _planner_errors()
    assert validated.PLANNER.runs == len(errors)
    median = statistics.median(abs(e) for e in errors)
    assert validated.PLANNER.median_abs_error == pytest.approx(median, abs=PRINTED), median


def test_expected_decode_error_is_the_one_the_published_runs_give():
    errors = [
        _one(model, device, setup)[1].tokens_per_s / published - 1
        for model, device, setup, published in PUBLISHED
    ]
    assert validated.DECODE_EXPECTED.runs == len(errors)
    median = statistics.median(abs(e) for e in errors)
    assert validated.DECODE_EXPECTED.median_abs_error == pytest.approx(median, abs=PRINTED)


def test_the_ceiling_note_counts_the_published_runs():
    assert f"all {len(PUBLISHED)} published" in validated.DECODE_CEILING_NOTE
    for model, device, setup, published in PUBLISHED:
        assert _one(model, device, setup)[0].tokens_per_s > published


@pytest.mark.slow
def test_serving_errors_are_the_ones_the_published_runs_give():
    from serving_cases import THROUGHPUT, medians, rows

    table = rows()
    m = medians(table)
    assert validated.SERVING_THROUGHPUT.runs == sum(k in THROUGHPUT for _, k, *_ in table)
    assert validated.SERVING_LATENCY.runs == sum(k not in THROUGHPUT for _, k, *_ in table)
    assert validated.SERVING_THROUGHPUT.median_abs_error == pytest.approx(
        m["throughput"], abs=PRINTED
    )
    assert validated.SERVING_LATENCY.median_abs_error == pytest.approx(m["latency"], abs=PRINTED)
