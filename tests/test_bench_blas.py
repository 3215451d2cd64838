"""The best BLAS path beside torch's on the CPU: numpy's matmul measured at torch's shapes,
and the framework's gap to it as a table row, a machine-section figure and a finding."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest

from ceiling.measure.blas import BlasResult, framework_gap, run_numpy_matmul
from ceiling.measure.stats import summarize


def _torch_row(dtype, size, tflops):
    return {"dtype": dtype, "m": size, "n": size, "k": size, "tflops": tflops}


def _blas_row(dtype, size, tflops, library="scipy-openblas 0.3.31"):
    return {**_torch_row(dtype, size, tflops), "library": library}


def test_the_gap_is_best_against_best_over_the_shapes_both_ran():
    # the Zen 4: torch fp32 0.22 TFLOP/s, OpenBLAS through numpy 0.25 on 2 cores
    torch_rows = [_torch_row("fp32", 1024, 0.20), _torch_row("fp32", 2048, 0.22),
                  _torch_row("fp32", 4096, 0.30), _torch_row("bf16", 1024, 0.5)]  # fmt: skip
    blas_rows = [_blas_row("fp32", 1024, 0.24), _blas_row("fp32", 2048, 0.25)]
    (gap,) = framework_gap(torch_rows, blas_rows)
    # 4096 is left out: numpy did not run there; bf16: no CPU BLAS multiplies it
    assert gap["ratio"] == pytest.approx(0.22 / 0.25) == pytest.approx(0.88)
    assert gap["torch_shape"] == gap["blas_shape"] == [2048, 2048, 2048]
    assert gap["library"] == "scipy-openblas 0.3.31"
    assert framework_gap(torch_rows, []) == []


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
                      summarize(samples), 1e-7)  # fmt: skip


def test_bench_prints_torch_beside_the_blas_with_the_gap():
    from rich.console import Console

    from ceiling.report.bench_tables import blas_table
    from ceiling.report.terminal import table

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
    assert "0.88×" in text and "220 GFLOP/s" in text and "250 GFLOP/s" in text
    assert "reaches 0.88× scipy-openblas 0.3.31's: the framework leaves 12 % of this CPU" in text


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
    assert verdict({**out.key_figures, "measured_busy": True}) == []  # noise, not a finding
    near = framework_gap([_torch_row("fp32", 2048, 0.24)], [_blas_row("fp32", 2048, 0.25)])
    assert verdict({"framework_gap": {"fp32": near[0]}}) == []


def test_two_dtypes_are_one_sentence_with_the_largest_gap():
    from ceiling.report.compose import SectionOutput
    from ceiling.report.sections.machine import _framework_gap

    gap = framework_gap(
        [_torch_row("fp32", 2048, 0.20), _torch_row("fp64", 2048, 0.115)],
        [_blas_row("fp32", 2048, 0.25), _blas_row("fp64", 2048, 0.125)],
    )
    profile = SimpleNamespace(devices=[SimpleNamespace(extra={"matmul_blas_gap": gap})])
    out = SectionOutput()
    _framework_gap(out, profile)
    (note,) = out.notes
    assert "0.80× (fp32), 0.92× (fp64)" in note and "up to 20 % of this CPU unused" in note
