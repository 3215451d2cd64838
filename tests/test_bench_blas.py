"""The best BLAS path beside torch's on the CPU: numpy's matmul measured at torch's shapes,
and the framework's gap to it as a table row, a machine-section figure and a finding."""

from __future__ import annotations

import dataclasses
import io
from types import SimpleNamespace

import pytest

from ceiling.measure.blas import BlasResult, framework_gap, run_numpy_matmul
from ceiling.measure.stats import summarize
from ceiling.render.bench_tables import framework_gap_sentence


def _torch_row(dtype, size, tflops):
    return {"dtype": dtype, "m": size, "n": size, "k": size, "tflops": tflops}


def _blas_row(dtype, size, tflops, library="scipy-openblas 0.3.31", rounds=None):
    rounds = [0.86, 0.88, 0.87, 0.89, 0.88] if rounds is None else rounds
    return {**_torch_row(dtype, size, tflops), "library": library,
            "torch_over_blas_rounds": rounds}  # fmt: skip


def test_the_gap_is_the_median_of_interleaved_rounds_at_the_blas_best_shape():
    # the Zen 4: torch fp32 0.22 TFLOP/s, OpenBLAS through numpy 0.25 on 2 cores
    torch_rows = [_torch_row("fp32", 1024, 0.20), _torch_row("fp32", 2048, 0.22),
                  _torch_row("fp32", 4096, 0.30), _torch_row("bf16", 1024, 0.5)]  # fmt: skip
    blas_rows = [_blas_row("fp32", 1024, 0.24, rounds=[0.5, 0.6]), _blas_row("fp32", 2048, 0.25)]
    (gap,) = framework_gap(torch_rows, blas_rows)
    # 4096 is left out: numpy did not run there; bf16: no CPU BLAS multiplies it
    assert gap["ratio"] == 0.88 and gap["ratio_range"] == [0.86, 0.89] and gap["rounds"] == 5
    assert gap["shape"] == [2048, 2048, 2048] and gap["verdict"] == "framework gap"
    assert (gap["torch_tflops"], gap["blas_tflops"]) == (0.22, 0.25)
    assert gap["library"] == "scipy-openblas 0.3.31"
    assert framework_gap(torch_rows, []) == []


@pytest.mark.parametrize(
    ("rounds", "busy", "verdict"),
    [
        # the rounds at load 11-13: 0.01× to 68×, the spread dwarfs any effect
        ([0.01, 1.10, 1.25, 68.4, 1.03], False, "inconclusive"),
        ([0.97, 1.0, 1.03], False, "inconclusive"),  # spread 0.06 > effect 0.0
        ([1.20, 1.25, 1.30], False, "torch's path is the best"),  # spread 0.10 < effect 0.25
        ([0.86, 0.88, 0.89], True, "busy"),  # tight, but other work shared the machine
        ([], False, "inconclusive"),  # one measurement each: no spread to judge by
    ],
)
def test_a_spread_wider_than_the_effect_or_a_busy_machine_gives_no_verdict(rounds, busy, verdict):
    (gap,) = framework_gap(
        [_torch_row("fp32", 256, 0.1)], [_blas_row("fp32", 256, 0.1, rounds=rounds)], busy
    )
    assert gap["verdict"] == verdict
    sentence = framework_gap_sentence(gap)
    assert ("no verdict" in sentence) == (verdict in ("inconclusive", "busy"))
    assert ("unused" in sentence or "best" in sentence) == (verdict not in ("inconclusive", "busy"))


def test_torch_and_numpy_run_in_alternating_rounds_with_the_ratio_of_each(monkeypatch):
    from ceiling.measure import suite
    from ceiling.measure.matmul import MatmulResult

    calls = []
    torch_s, numpy_s = iter([2.0, 1.0, 4.0]), iter([1.0, 1.0, 2.0])

    def torch_run(warmup_ms, budget_ms):
        calls.append(("torch", warmup_ms, budget_ms))
        t = next(torch_s)
        return MatmulResult("fp32", 8, 8, 8, "cpu", [t, t * 2], summarize([t, t * 2]), 0.0, True)

    def numpy_run(dtype, m, n, k, *, warmup_ms, budget_ms):
        calls.append(("numpy", warmup_ms, budget_ms))
        t = next(numpy_s)
        return BlasResult(dtype, m, n, k, "openblas", [t], summarize([t]), 0.0)

    monkeypatch.setattr(suite, "run_numpy_matmul", numpy_run)
    budgets = dataclasses.replace(suite.QUICK, matmul_warmup_ms=30.0, matmul_ms=300.0)
    mine, blas = suite._interleaved(torch_run, "fp32", (8, 8, 8), budgets, rounds=3)
    assert calls == [("torch", 30.0, 100.0), ("numpy", 30.0, 100.0),
                     ("torch", 0.0, 100.0), ("numpy", 0.0, 100.0),
                     ("torch", 0.0, 100.0), ("numpy", 0.0, 100.0)]  # fmt: skip
    assert blas.round_ratios == (0.5, 1.0, 0.5)  # numpy's best time over torch's, per round
    assert sorted(mine.samples) == [1.0, 2.0, 2.0, 4.0, 4.0, 8.0] and mine.stats.min == 1.0
    assert blas.stats.min == 1.0 and len(blas.samples) == 3
    assert blas.row()["torch_over_blas_rounds"] == [0.5, 1.0, 0.5]


def test_numpy_matmul_returns_checked_raw_samples():
    r = run_numpy_matmul("fp64", 48, 32, 16, warmup_ms=1, budget_ms=5)
    assert r.flops == 2 * 48 * 32 * 16
    assert r.samples and all(s > 0 for s in r.samples) and r.stats.min == min(r.samples)
    assert r.rel_error <= 1e-10
    row = r.row()
    assert row["tflops"] == pytest.approx(r.flops / min(r.samples) / 1e12)
    assert row["library"] and row["samples"] == len(r.samples)


def _blas_result(dtype, size, seconds):
    samples = [seconds, seconds * 1.01, seconds * 1.02]
    return BlasResult(dtype, size, size, size, "scipy-openblas 0.3.31", samples,
                      summarize(samples), 1e-7, (0.86, 0.88, 0.87, 0.89, 0.88))  # fmt: skip


def test_bench_prints_torch_beside_the_blas_with_the_gap():
    from rich.console import Console

    from ceiling.render.bench_tables import blas_table
    from ceiling.render.terminal import table

    size, flops = 1024, 2 * 1024**3
    # torch at 0.22 TFLOP/s, numpy at 0.25 TFLOP/s (fake samples: best times)
    mine = SimpleNamespace(dtype="fp32", m=size, n=size, k=size,
                           best_flops_per_s=0.22e12,
                           row=lambda: _torch_row("fp32", size, 0.22))  # fmt: skip
    blas = [_blas_result("fp32", size, flops / 0.25e12)]
    report = SimpleNamespace(matmul=[mine], matmul_blas=blas)
    printed = io.StringIO()
    Console(file=printed, width=80).print(blas_table(report, table))
    text = " ".join(printed.getvalue().split())
    assert "0.88× (0.86–0.89)" in text and "220 GFLOP/s" in text and "250 GFLOP/s" in text
    assert (
        "reaches 0.88× scipy-openblas 0.3.31's (0.86–0.89× over 5 interleaved rounds): the "
        "framework leaves 12 % of this CPU unused" in text
    )
    report.busy = True  # the same figures measured beside other work: no verdict
    printed = io.StringIO()
    Console(file=printed, width=80).print(blas_table(report, table))
    text = " ".join(printed.getvalue().split())
    assert "measured while other work ran, so no verdict" in text and "unused" not in text


def test_the_machine_section_and_the_verdict_state_the_gap():
    from ceiling.report.compose import SectionOutput, SectionResult
    from ceiling.report.sections.machine import _framework_gap
    from ceiling.report.verdict import findings, lookup

    gap = framework_gap([_torch_row("fp32", 2048, 0.22)], [_blas_row("fp32", 2048, 0.25)])
    profile = SimpleNamespace(devices=[SimpleNamespace(extra={"matmul_blas_gap": gap})])
    out = SectionOutput()
    _framework_gap(out, profile)
    assert out.key_figures["framework_gap"]["fp32"]["ratio"] == pytest.approx(0.88)
    assert any("leaves 12 % of this CPU unused" in n for n in out.notes)

    def verdict(figures):
        return findings([SectionResult("machine", "machine", "ok", None, 0.0,
                                       SectionOutput(key_figures=figures))])  # fmt: skip

    (f,) = verdict(out.key_figures)
    assert f.text.startswith(
        "torch's fp32 matmul reaches 0.88× of scipy-openblas 0.3.31 (numpy) on the same cores: "
        "the framework, not the machine, leaves 12.0 % unused"
    )
    assert lookup(out.key_figures, f.key) == f.value == pytest.approx(0.88)
    busy = {**out.key_figures, "measured_busy": True, "busy_reasons": ["the load average was 11"]}
    (only,) = verdict(busy)  # noise, not a finding: only that the machine was busy
    assert only.text.startswith("The machine was busy") and "numpy" not in only.text
    near = framework_gap(
        [_torch_row("fp32", 2048, 0.24)], [_blas_row("fp32", 2048, 0.25, rounds=[0.95, 0.96])]
    )
    assert verdict({"framework_gap": {"fp32": near[0]}}) == []
    wide = framework_gap(
        [_torch_row("fp32", 2048, 0.1)], [_blas_row("fp32", 2048, 0.25, rounds=[0.01, 1.1])]
    )
    assert wide[0]["ratio"] < 0.9 and verdict({"framework_gap": {"fp32": wide[0]}}) == []


def test_two_dtypes_are_one_sentence_with_the_largest_gap():
    from ceiling.report.compose import SectionOutput
    from ceiling.report.sections.machine import _framework_gap

    gap = framework_gap(
        [_torch_row("fp32", 2048, 0.20), _torch_row("fp64", 2048, 0.115)],
        [_blas_row("fp32", 2048, 0.25, rounds=[0.79, 0.80, 0.81]),
         _blas_row("fp64", 2048, 0.125, rounds=[0.91, 0.92, 0.93])],
    )  # fmt: skip
    profile = SimpleNamespace(devices=[SimpleNamespace(extra={"matmul_blas_gap": gap})])
    out = SectionOutput()
    _framework_gap(out, profile)
    (note,) = out.notes
    assert "0.80× (fp32), 0.92× (fp64)" in note and "up to 20 % of this CPU unused" in note
