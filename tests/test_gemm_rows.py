"""A CPU's GEMM rate by rows: the knots from raw samples, the rate between them, and a
serving iteration whose GEMMs run at their rows' rate (fake machine facts throughout)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from ceiling.errors import InvalidInput
from ceiling.hardware.catalog import DeviceSpec
from ceiling.model.decode import DecodeSetup
from ceiling.model.decode_expected import EngineCosts
from ceiling.model.gemm_rows import PEAK_ROWS, profile_rows_rates, rate_at, rows_rates
from ceiling.model.serve.engine import Engine
from ceiling.model.serve.iteration import Iteration
from ceiling.model.transformer import get_model

PEAK = 100e9  # a fake CPU's fp32 peak, FLOP/s
K = N = 1000


def _flat(knots) -> list[float]:
    return [x for knot in knots for x in knot]


def _seconds(rows: int, rate: float) -> float:
    return 2.0 * rows * K * N / rate


def test_each_sample_is_a_knot_and_the_peak_closes_them():
    knots = rows_rates([1, 4], K, N, [_seconds(1, 10e9), _seconds(4, 40e9)], PEAK)
    assert _flat(knots) == pytest.approx([1.0, 10e9, 4.0, 40e9, PEAK_ROWS, PEAK])


def test_a_sample_above_the_peak_is_held_to_it():
    knots = rows_rates([1, 2048], K, N, [_seconds(1, 10e9), _seconds(2048, 2 * PEAK)], PEAK)
    assert _flat(knots) == pytest.approx([1.0, 10e9, 2048.0, PEAK])


def test_the_rate_is_interpolated_in_log_rows_and_held_past_the_ends():
    knots = ((1.0, 10e9), (4.0, 40e9), (16.0, 100e9))
    assert rate_at(knots, 2) == pytest.approx(25e9)  # halfway in log rows from 1 to 4
    assert rate_at(knots, 8) == pytest.approx(70e9)
    assert rate_at(knots, 0.5) == 10e9 and rate_at(knots, 1e6) == 100e9


@pytest.mark.parametrize(
    ("rows", "best_s", "peak"),
    [([1, 2], [1e-3], PEAK), ([2, 1], [1e-3, 1e-3], PEAK), ([0, 1], [1e-3, 1e-3], PEAK),
     ([1], [0.0], PEAK), ([1], [math.inf], PEAK), ([1], [1e-3], 0.0), ([], [], PEAK)],
)  # fmt: skip
def test_bad_samples_are_refused(rows, best_s, peak):
    with pytest.raises(InvalidInput):
        rows_rates(rows, K, N, best_s, peak)


def _measured(kind="cpu", samples=None, peak=PEAK):
    overhead = {} if samples is None else {"gemm_rows": samples}
    return SimpleNamespace(kind=kind, peak_flops_per_s={"fp32": peak},
                           extra={"overhead": overhead})  # fmt: skip


def test_a_cpu_profile_gives_its_knots_and_anything_else_none():
    samples = {"rows": [1, 2], "k": K, "n": N, "best_s": [_seconds(1, 5e9), _seconds(2, 8e9)]}
    knots = profile_rows_rates(_measured(samples=samples))
    assert _flat(knots) == pytest.approx([1.0, 5e9, 2.0, 8e9, PEAK_ROWS, PEAK])
    assert profile_rows_rates(_measured(kind="cuda", samples=samples)) is None
    assert profile_rows_rates(_measured()) is None  # measured before the samples were kept
    assert profile_rows_rates(_measured(samples={"rows": [1]})) is None  # malformed
    assert profile_rows_rates(None) is None


def _cpu() -> DeviceSpec:
    return DeviceSpec(key="measured-fake", name="fake CPU", vendor="", kind="cpu",
                      driver_names=(), peak_flops_per_s={"fp32": PEAK, "fp64": PEAK / 2},
                      memory_bytes=64e9, memory_bandwidth_bytes_per_s=1e12)  # fmt: skip


def _costs(knots=None) -> EngineCosts:
    return EngineCosts(bandwidth_share=1.0, per_kernel_s=0.0, gemm_rows_rates=knots)


# a quarter of the peak up to 16 rows, the peak from 1024
QUARTER = ((1.0, PEAK / 4), (16.0, PEAK / 4), (1024.0, PEAK))


def test_an_iterations_gemms_run_at_their_rows_rate():
    cfg, spec = get_model("llama-3-8b"), _cpu()
    setup = DecodeSetup(weights_dtype="fp32")
    head = cfg.vocab * cfg.hidden
    body = cfg.params_matmul - head
    it = Iteration(cfg, spec, setup, _costs(QUARTER))
    # 4 decoding sequences: every GEMM of 4 rows at a quarter of the peak
    assert it.terms(4, 0.0).gemm_s == pytest.approx(2.0 * 4 * (body + head) / (PEAK / 4))
    # 128 prompt tokens, one sampled: the layers at 128 rows' rate (log-interpolated: 16 to
    # 1024 is 6 doublings, 16 to 128 three of them: halfway), the head at one row's
    at_128 = PEAK / 4 + 0.5 * (PEAK - PEAK / 4)
    t = it.terms(0, 0.0, 128, 0.0, 0.0, sampled=1)
    assert t.gemm_s == pytest.approx(2.0 * 128 * body / at_128 + 2.0 * head / (PEAK / 4))
    # without measured rates by rows, the same GEMMs at the peak
    plain = Iteration(cfg, spec, setup, _costs()).terms(4, 0.0)
    assert plain.gemm_s == pytest.approx(2.0 * 4 * (body + head) / PEAK)


def test_one_more_sequence_costs_its_rows_flops_at_the_small_rows_rate():
    """With the weights' bytes negligible (a fast memory), an iteration of a dense model is
    its GEMMs: one more decoding sequence adds 2 × params at a quarter of the peak, beside
    its 101 query-key pairs (100 cached, itself) and its activations."""
    cfg, spec = get_model("llama-3-8b"), _cpu()
    setup = DecodeSetup(weights_dtype="fp32")
    engine = Engine(cfg, spec, setup, _costs(QUARTER), sequence_s=0.0)
    one = engine.time_fn(1, 100.0, 0, 0.0, 0.0, 1, 1)[0]
    two = engine.time_fn(2, 200.0, 0, 0.0, 0.0, 2, 1)[0]
    attention = engine.iteration.attn_decode * 101 / engine.iteration.attention_rate
    kv = 101 * engine.iteration.kv_tok / engine.iteration.bandwidth
    assert two - one == pytest.approx(
        2.0 * cfg.params_matmul / (PEAK / 4) + max(attention, kv)
        + engine.iteration.act_tok / engine.iteration.bandwidth, rel=1e-9
    )  # fmt: skip


def test_the_measurement_gives_a_best_time_for_each_row_count():
    from ceiling.measure.gemm_rows import time_gemm_rows

    s = time_gemm_rows(rows=(1, 3), width=32, budget_ms=1.0)
    assert (s.rows, s.k, s.n, len(s.best_s)) == ([1, 3], 32, 32, 2)
    assert all(0 < t < math.inf for t in s.best_s)
