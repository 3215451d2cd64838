"""A recorded step against three roofs (compute, memory, per-op overhead), and the
waterfall from the dense peak to its measured time.

The memory roof is the last-level cache's bandwidth when the step's working set fits the
cache (weights, plus gradients and AdamW's two moments when training, plus the largest
op's own bytes), DRAM's otherwise. Each op's memory time includes the first touch of the
buffers it allocated (model.first_touch), as measured on this device.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ceiling.model import roofline, waterfall
from ceiling.model.first_touch import FirstTouch
from ceiling.model.forward_host import ForwardHost
from ceiling.model.roofline import Roofs
from ceiling.profile.op_flops import MODEL_CATEGORIES, UNKNOWN
from ceiling.profile.placement import FOREACH_PREFIXES

TRAINING_COPIES = 4  # weights, gradients, AdamW's first and second moments


@dataclass(frozen=True)
class StepExplanation:
    roofs: Roofs
    per_op_source: str
    working_set_bytes: float
    memory_roof_bytes_per_s: float
    memory_source: str
    prediction: roofline.StepPrediction
    waterfall: list[waterfall.Bar] | None  # None when nothing ran (meta)
    matmul_shapes_measured: int = 0  # matmuls whose compute roof is their own measured rate
    # those rates: FLOP/s by matmul (M, N, K), attention or convolution key
    matmul_rates: dict = field(default_factory=dict)
    # the model's own host time per forward op, measured on it (None: torch's modules' figure)
    forward_host: ForwardHost | None = None


def working_set_bytes(params: int, itemsize: int, train: bool, calls) -> float:
    largest = max((c.bytes for c in calls), default=0.0)
    return params * itemsize * (TRAINING_COPIES if train else 1) + largest


def local_roofs(
    ceiling, device: str, profile, cache_bytes: float | None, measure: bool, train: bool = False
):
    """Roofs of the device the step ran on; the per-op floor (with autograd for a training
    step) and cache bandwidth measured (quickly) only when the step ran here."""
    if not measure:
        roofs = Roofs(ceiling.roof_flops_per_s, ceiling.bandwidth_bytes_per_s)
        return roofs, "not measured (nothing ran)"
    from ceiling.measure.roofs import local_roofs as measured

    m = measured(device, cache_bytes, profile, train)
    roofs = Roofs(
        ceiling.roof_flops_per_s,
        ceiling.bandwidth_bytes_per_s,
        per_op_s=m.per_op_s,
        cache_bytes=m.cache_bytes,
        cache_bandwidth_bytes_per_s=m.cache_bandwidth_bytes_per_s,
        first_touch=FirstTouch(
            m.first_touch_s_per_byte, m.first_touch_from_bytes, m.first_touch_s_per_fault
        ),
        function_s_per_element=m.function_s_per_element,
        serial_dispatch=not device.startswith("cuda"),
        host_s_by_phase=m.host_s_by_phase,
        bandwidth_by_bytes=tuple(m.bandwidth_by_bytes),
    )
    return roofs, m.per_op_source


def with_forward_host(roofs: Roofs, host: ForwardHost) -> Roofs:
    """The roofs with the forward's ops (views too, and a recomputation's replay of them)
    at the model's own measured host time: the figure it replaces scaled by the model's
    host time over it for the same ops (model.forward_host), else its mean per op."""
    times = host.times
    if times is None:
        by_phase = {"forward": host.per_op_s, "forward_view": host.per_op_s}
    else:
        by_phase = {k: times * roofs.host_s(k) for k in ("forward", "forward_view")}
    return replace(roofs, host_s_by_phase={**roofs.host_s_by_phase, **by_phase})


def explain_step(
    calls,
    roofs: Roofs,
    per_op_source: str,
    working_set: float,
    *,
    ceiling,
    model_flops: float,
    step_s: float | None,
    recorded_step_s: float | None,
    data_wait_s: float = 0.0,
    matmul_rates: dict | None = None,
    compiled: bool = False,
    forward_host: ForwardHost | None = None,
) -> StepExplanation:
    """`matmul_rates`: measured FLOP/s per matmul (M, N, K) and attention shape, each such
    op's own compute roof."""
    bandwidth, source = roofs.memory_roof(working_set)
    rates = matmul_rates or {}
    prediction = roofline.predict_step(_works(calls, rates), roofs, working_set)
    bars = None
    if step_s and recorded_step_s is not None:
        bars = waterfall.bars(
            _times(
                calls,
                roofs,
                bandwidth,
                ceiling,
                model_flops,
                step_s,
                recorded_step_s,
                data_wait_s,
                compiled,
            )
        )
    return StepExplanation(
        roofs, per_op_source, working_set, bandwidth, source, prediction, bars, len(rates),
        dict(rates), forward_host,
    )  # fmt: skip


def predicted_s(calls, e: StepExplanation) -> float:
    """These recorded calls alone, predicted as `e` predicts the whole step."""
    return roofline.predict_step(_works(calls, e.matmul_rates), e.roofs, e.working_set_bytes).time_s


def _works(calls, rates: dict):
    return (_work(c, rates.get(rate_key(c))) for c in calls)


def rates_by_op(calls, rates: dict) -> dict[str, float]:
    """FLOP/s each op (by profiler name, aten::mm) ran at over its calls with a measured
    rate: the total FLOPs over their total time at those rates."""
    flops: dict[str, float] = {}
    seconds: dict[str, float] = {}
    for c in calls:
        rate = rates.get(rate_key(c))
        if rate and c.flops:
            name = c.op.replace(".", "::", 1)
            flops[name] = flops.get(name, 0.0) + c.flops
            seconds[name] = seconds.get(name, 0.0) + c.flops / rate
    return {k: flops[k] / seconds[k] for k in flops if seconds[k] > 0}


def rate_key(c):
    """The key of a recorded call's own measured rate (measured_matmul_rates): a matmul's
    (M, N, K), (B, M, N, K) for a batch of B products in one call; a fused attention's
    shape; a replayed call's key; None for other ops."""
    if c.matmul_dims and c.matmul_batch > 1:
        return (c.matmul_batch, *c.matmul_dims)
    return c.matmul_dims or c.attention_dims or c.replay_key


def host_phase(c) -> str:
    """The phase whose host time per op a recorded call pays: a foreach (or fused)
    optimizer op runs over a whole list of tensors, at its own cost per call; a view of
    the forward or backward ("forward_view") costs its dispatch and autograd node only."""
    if c.phase == "optimizer" and c.op.startswith(FOREACH_PREFIXES):
        return "optimizer_foreach"
    if c.category == "view" and c.phase in ("forward", "backward", "recompute"):
        return f"{c.phase}_view"
    return c.phase


def _work(c, flops_per_s: float | None = None) -> roofline.OpWork:
    """One recorded call as the roofs see it."""
    return roofline.OpWork(
        c.flops, c.bytes, 1, flops_per_s, new_buffers=c.new_buffers,
        page_faults=c.page_faults, function=c.function, elements=c.elements,
        phase=host_phase(c),
    )  # fmt: skip


def _times(calls, roofs, bandwidth, ceiling, model_flops, step_s, recorded_step_s, data_wait_s,
           compiled=False):  # fmt: skip
    model_s = other_s = other_roof_s = unknown_s = first_touch_s = 0.0
    other_calls = 0
    for c in calls:
        t = c.time_s or 0.0
        if c.category in MODEL_CATEGORIES:
            model_s += t
        elif c.category == UNKNOWN:
            unknown_s += t
        else:
            other_s += t
            other_calls += 1
            # at its roofs but for first touch, a bar of its own
            w = roofline.op_time(c.flops, c.bytes, 0, roofs, bandwidth, None, (), c.function,
                                 c.elements)  # fmt: skip
            other_roof_s += w.time_s
            first_touch_s += roofs.first_touch.seconds(c.new_buffers, c.page_faults)
    return waterfall.StepTimes(
        step_s=step_s,
        recorded_step_s=recorded_step_s,
        model_flops=model_flops,
        dense_peak_flops_per_s=ceiling.peak_flops_per_s,
        measured_peak_flops_per_s=ceiling.measured_peak_flops_per_s,
        model_op_s=model_s,
        other_op_s=other_s,
        other_roof_s=other_roof_s,
        other_calls=other_calls,
        per_op_s=roofs.per_op_s,
        first_touch_s=first_touch_s,
        unknown_op_s=unknown_s,
        data_wait_s=data_wait_s,
        compiled=compiled,
        gpu=not roofs.serial_dispatch,
    )


def matmul_cold_bytes(calls, working_set: float, cache: float | None,
                      private: float | None) -> float | None:  # fmt: skip
    """The cache a matmul's operands have fallen out of when it runs (measured_matmul_rates'
    `cold_bytes`). A weight is used again a step later (and, training, a saved activation
    in the backward), after the step's other ops have moved their bytes through the caches:
    when those bytes (or the step's working set) exceed the last-level cache, the operands
    come from memory; else from the last level, the core's own cache having been refilled
    by the ops in between. The bytes moved, not the distinct bytes held, are compared: a
    last-level cache shared with other cores and processes, its prefetchers and the
    step's streaming writes evict more than an ideal least-recently-used cache of its
    size would (on a shared 32 MiB L3 measured here, a read slows from cache to memory
    speed between 12 and 16 MiB, and a step's matmuls ran 1.4-1.8× their hot time)."""
    traffic = sum(c.bytes for c in calls)
    if cache and max(working_set, traffic) > cache:
        return cache
    return private


def measured_matmul_rates(calls, device: str, cold_bytes: float | None = None) -> dict:
    """FLOP/s of each distinct matmul shape (M, N, K; B, M, N, K batched), fused attention shape
    (op_flops.attention_dims), convolution and recurrent layer call (op_flops.replay_key) of
    the step, each timed alone on the device: its own compute roof. `cold_bytes`: the cache
    matmul, convolution and recurrent operands are pushed out of (the last level when the
    step's data do not fit it, else the core's own)."""
    import torch

    from ceiling.measure.roofs import attention_times, matmul_rates, replayed_times

    shapes = {rate_key(c) for c in calls if c.matmul_dims}
    convs: dict = {}
    for c in calls:  # each replayed call's FLOPs, the largest timed first
        if c.replay_key:
            convs[c.replay_key] = c.flops
    largest = sorted(convs, key=lambda k: -convs[k])
    replayed = replayed_times(largest, device, cold_bytes=cold_bytes)
    rates = {k: convs[k] / s for k, s in replayed.items() if s > 0}
    dtypes = [c.dtype for c in calls if (c.matmul_dims or c.attention_dims) and c.dtype]
    if not dtypes:
        return rates
    dtype = getattr(torch, dtypes[0])
    if shapes:
        rates.update(matmul_rates(shapes, device, dtype, cold_bytes=cold_bytes))
    flops = {c.attention_dims: c.flops for c in calls if c.attention_dims}
    for key, seconds in attention_times(list(flops), device, dtype).items():
        rates[key] = flops[key] / seconds
    return rates
