"""Physics every prediction keeps, over catalog models × devices × dtypes (hypothesis): the
expected decode never above its ceiling; more bandwidth or more peak never slower; fewer
weight bytes never slower while decode is memory-bound; at batch 1 a dense decode is
memory-bound in both tables; a free overlap never makes a plan slower; a plan's step never
beats its FLOPs at the peak."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ceiling.errors import CeilingError
from ceiling.hardware.catalog import get_spec
from ceiling.model import decode_expected as ex
from ceiling.model.decode import DecodeSetup, decode_ceiling
from ceiling.model.transformer import get_model

DENSE = ["llama-2-7b", "llama-2-13b", "llama-3-8b", "llama-3-70b", "mistral-7b", "qwen3-14b",
         "gemma-3-12b", "gpt2-xl", "opt-13b"]  # fmt: skip
MOE = ["mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v2-lite", "gpt-oss-20b"]
DEVICES = ["a100-80gb", "a100-40gb", "h100-sxm", "h200-sxm", "b200", "l4", "l40s", "rtx-4090",
           "mi250x", "mi300x", "t4", "v100", "h20", "gaudi2"]  # fmt: skip
WEIGHTS = ["bf16", "fp16", "int8", "int4", "fp8"]
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _decode(model, device, weights, batch, tp=1, spec=None, context=512):
    """(ceiling row, expected row) as `ceiling.decode` computes them, or None when the device
    cannot run it or the batch does not fit."""
    cfg, spec = get_model(model), spec or get_spec(device)
    try:
        c = decode_ceiling(cfg, spec, [batch], DecodeSetup(weights_dtype=weights, tp=tp,
                                                           context=context))  # fmt: skip
        costs = ex.costs_for(spec, weights=weights, compute=c.dtypes.compute)
        rows = ex.expected_rows(c, cfg.layers, costs, cfg=cfg, sms=getattr(spec, "sms", None))
    except CeilingError:
        return None
    return (c.rows[0], rows[0]) if rows else None


decode_cases = st.tuples(
    st.sampled_from(DENSE + MOE),
    st.sampled_from(DEVICES),
    st.sampled_from(WEIGHTS),
    st.sampled_from([1, 2, 8, 32, 128, 512]),
    st.sampled_from([1, 2, 8]),
)


@FAST
@given(decode_cases)
def test_expected_decode_is_never_above_its_ceiling(case):
    got = _decode(*case)
    assume(got is not None)
    ceiling, expected = got
    assert expected.tokens_per_s <= ceiling.tokens_per_s * (1 + 1e-9)


@FAST
@given(decode_cases, st.sampled_from([1.25, 2.0, 4.0]), st.sampled_from(["bandwidth", "peak"]))
def test_more_bandwidth_or_peak_is_never_slower(case, factor, what):
    model, device, weights, batch, tp = case
    spec = get_spec(device)
    if what == "bandwidth":
        faster = dataclasses.replace(
            spec, memory_bandwidth_bytes_per_s=spec.memory_bandwidth_bytes_per_s * factor
        )
    else:
        faster = dataclasses.replace(
            spec, peak_flops_per_s={k: v * factor for k, v in spec.peak_flops_per_s.items()}
        )
    before, after = _decode(*case), _decode(model, device, weights, batch, tp, spec=faster)
    assume(before is not None and after is not None)
    assert after[1].tokens_per_s >= before[1].tokens_per_s * (1 - 1e-9)
    assert after[0].tokens_per_s >= before[0].tokens_per_s * (1 - 1e-9)


@FAST
@given(st.sampled_from(DENSE + MOE), st.sampled_from(DEVICES), st.sampled_from([1, 2, 8]),
       st.sampled_from([1, 2, 4]))  # fmt: skip
def test_fewer_weight_bytes_are_never_slower_while_memory_bound(model, device, batch, tp):
    by = {w: _decode(model, device, w, batch, tp) for w in ("bf16", "int8", "int4")}
    order = [w for w in ("bf16", "int8", "int4") if by[w] is not None]
    for more, fewer in itertools.pairwise(order):
        (_, a), (_, b) = by[more], by[fewer]
        if _memory_bound(a) and _memory_bound(b):
            assert b.tokens_per_s >= a.tokens_per_s * (1 - 1e-9), (more, fewer)


def _memory_bound(row) -> bool:
    """The weight stream sets the step: memory its largest term, and the dequantisation (which
    adds to the stream at small batches: the held-out decode runs favour adding it, 11.5 %
    median against 13.1 % overlapped) small beside it. A model whose experts are already 4-bit
    (gpt-oss) gains few bytes from int4 over int8 on the rest and pays twice the unpacking:
    that step is not memory-bound."""
    return row.limited_by == "memory" and row.dequant_s <= 0.2 * row.memory_s


@FAST
@given(st.sampled_from(DENSE), st.sampled_from(DEVICES), st.sampled_from(WEIGHTS),
       st.sampled_from([1, 2]))  # fmt: skip
def test_a_dense_decode_at_batch_one_is_memory_bound_in_both_tables(model, device, weights, tp):
    got = _decode(model, device, weights, 1, tp)
    assume(got is not None)
    ceiling, expected = got
    assert ceiling.bound == "memory"
    assert expected.limited_by != "compute"


def test_int8_and_int4_are_faster_than_bf16_at_batch_one_where_gpt_fast_measured_it():
    # gpt-fast README, Llama-2-7B on one A100-80GB: 104.9 / 155.58 / 196.80 tokens/s
    got = [_decode("llama-2-7b", "a100-80gb", w, 1, context=100)[1].tokens_per_s
           for w in ("bf16", "int8", "int4")]  # fmt: skip
    assert got[0] < got[1] < got[2]


# ---- training plans ---------------------------------------------------------------------

plan_cases = st.tuples(
    st.sampled_from(["llama-3-8b", "llama-3-70b", "gpt3-175b", "mixtral-8x7b"]),
    st.sampled_from(["a100-80gb", "h100-sxm", "mi300x"]),
    st.sampled_from([64, 256]),
)


def _plan(model, device, gpus, fixed, **kw):
    import ceiling

    try:
        return ceiling.plan(model, gpus, spec=device, fixed=fixed, top=1, headroom=0.0, **kw)
    except CeilingError:
        return None


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan_cases, st.sampled_from([2, 4, 8]))
def test_a_free_overlap_never_makes_a_plan_slower(case, t):
    model, device, gpus = case
    base = f"t={t},recompute=full,sp=true"
    off = _plan(model, device, gpus, base + ",tp_overlap=false", dp_overlap=False)
    on = _plan(model, device, gpus, base + ",tp_overlap=true", dp_overlap=True)
    assume(off is not None and on is not None)
    assert on.best.step_time_s <= off.best.step_time_s * (1 + 1e-9)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan_cases)
def test_a_plans_step_never_beats_its_flops_at_the_peak(case):
    model, device, gpus = case
    r = _plan(model, device, gpus, None)
    assume(r is not None)
    best = r.best
    assert 0 < best.mfu <= 1.0
    floor = best.mfu * best.step_time_s  # model FLOPs at the peak, in seconds
    assert best.step_time_s >= floor
    assert best.hw_tflops_per_device * 1e12 <= r.cluster.peak_flops_per_s * (1 + 1e-9)


@pytest.mark.parametrize("weights", ["int8", "int4"])
def test_quantised_llama3_70b_tp8_is_not_slower_than_16_bit(weights):
    # the Llama-3-70B TP8 case: int4 was predicted slower than int8
    bf16 = _decode("llama-3-70b", "h100-sxm", "bf16", 1, 8)[1].tokens_per_s
    int8 = _decode("llama-3-70b", "h100-sxm", "int8", 1, 8)[1].tokens_per_s
    q = _decode("llama-3-70b", "h100-sxm", weights, 1, 8)[1].tokens_per_s
    assert q >= bf16 and (weights == "int8" or q >= int8 * 0.999)
