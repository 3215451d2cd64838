"""Pipeline stage layouts: how many layers each stage holds, how many micro-batches' worth of
activations it keeps, and how long a step of stages with different times takes.

A layout is (first, last): the layers on the first and on the last pipeline stage (all their
interleaved chunks together), the rest spread over the p-2 middle stages as evenly as whole
layers allow — Megatron-Core's ``--decoder-first-pipeline-num-layers`` and
``--decoder-last-pipeline-num-layers``. (0, 0) is the even split: ⌈l/(p·v)⌉ layers per chunk
everywhere, the fullest setting the pace. Every function takes numpy arrays.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from ceiling.errors import InvalidInput, argument
from ceiling.model.plan import recompute

if TYPE_CHECKING:
    from ceiling.model.plan.communication import ModelParallelComm
    from ceiling.model.plan.compute import Compute
    from ceiling.model.plan.layout import Layout

_FIXED = argument("fixed")  # the plan's `fixed`, the command's --fixed


def balanced_layout(layers: int, p: int) -> tuple[int, int]:
    """(first, last) with the embedding and the loss each counted as one layer, so that the
    first stage (which also holds the most micro-batches in flight) and the last (which also
    computes the output layer and the loss) get one layer fewer than the others — the rule of
    Megatron-Core's ``--account-for-embedding-in-pipeline-split`` and
    ``--account-for-loss-in-pipeline-split``; Llama 3 405B ran 126 layers on 16 stages as
    7, 8 × 14, 7 (Llama Team 2024, section 3.3.2). (0, 0) where that is the even split."""
    if p < 2:
        return (0, 0)
    per = math.ceil((layers + 2) / p)
    # Two stages split the odd layer to the first: the loss costs more than the lookup.
    last = (layers + 2) // 2 - 1 if p == 2 else per - 1
    first = layers - last if p == 2 else per - 1
    if first < 1 or last < 1 or (p > 2 and layers - first - last < p - 2):
        return (0, 0)
    even = math.ceil(layers / p)
    mid = math.ceil((layers - first - last) / (p - 2)) if p > 2 else even
    if first == last == mid == even:
        return (0, 0)
    return (first, last)


def whole_chunk_layout(layers: int, p: int, v: int) -> list[tuple[int, int]]:
    """Where neither the even split nor the balanced rule gives v > 1 equal chunks (61 layers
    on 16 stages): the middle stages at the least multiple of v layers that holds them, the
    rest split between the ends, the first the lighter (DeepSeek-V3's 61 as 2, 4 × 14, 3:
    Megatron-Core's --decoder-first/last-pipeline-num-layers), each end at least a layer a
    chunk and at most a middle stage's layers; [] where none does."""
    if p < 3 or v < 2:
        return []
    mid = v * math.ceil(layers / p / v)
    rest = layers - (p - 2) * mid
    first, last = rest // 2, rest - rest // 2
    return [(first, last)] if v <= first and last <= mid else []


def parse_stages(text: str) -> dict:
    """`--fixed stages=...`: 'even', 'balanced' or the layers of every stage ('31,32,32,31';
    the middle stages equal). Returns the pins it implies (p, first, last) or the rule."""
    text = text.strip().lower()
    if text == "even":
        return {"first": 0, "last": 0}
    if text == "balanced":
        return {"stages": "balanced"}
    parts = [x.strip() for x in text.replace(";", ",").split(",") if x.strip()]
    if not parts or not all(x.isdigit() and int(x) >= 1 for x in parts):
        raise InvalidInput(
            f"{_FIXED}: stages must be even, balanced or the layers of each stage as whole "
            f"numbers ≥ 1 (31,32,32,31), got {text!r}"
        )
    counts = [int(x) for x in parts]
    if len(counts) == 1:
        raise InvalidInput(f"{_FIXED}: stages lists the layers of each of p ≥ 2 stages")
    middle = set(counts[1:-1])
    if len(middle) > 1:
        raise InvalidInput(
            f"{_FIXED}: stages {text}: the middle stages must hold the same number of layers "
            f"(only the first and the last may differ), got {sorted(middle)}"
        )
    return {"p": len(counts), "first": counts[0], "last": counts[-1], "stage_total": sum(counts)}


def stage_layers(layers: int, p, v, first, last):
    """Layers on the first, a middle and the last device (all chunks): arrays."""
    p, v = np.asarray(p, dtype=float), np.asarray(v, dtype=float)
    first, last = np.asarray(first, dtype=float), np.asarray(last, dtype=float)
    even = np.ceil(layers / (p * v) - 1e-9) * v
    uneven = (first > 0) & (p > 1)
    rest = layers - first - last
    mid = np.where(p > 2, np.ceil(rest / np.maximum(p - 2.0, 1.0) - 1e-9), 0.0)
    return (
        np.where(uneven, first, even),
        np.where(uneven, mid, np.where(p > 2, even, 0.0)),
        np.where(uneven, last, even),
    )


def held_per_layer(p, v, m, layers=None):
    """Micro-batches' worth of each of its layers' activations the first, the most loaded
    middle (second) and the last device hold at their peak, averaged over the device's layers.

    1F1B: device k holds min(p-k, m). Interleaved: its warm-up of W = 2(p-k-1) + (v-1)·p chunk
    passes and the one in progress, at most m·v, run in groups of p per chunk (chunk 0 for p
    micro-batches, then chunk 1, ...; Megatron-Core's interleaved schedule). With equal chunks
    each pass holds a 1/v share of the layers: W/v, for the first device p·(1 + (p-1)/(p·v))
    (Korthikanti et al. 2022, section 4.2.3). Given the devices' `layers` (first, middle,
    last), each chunk's passes are weighed by its layers (`chunk_layers`: the first device's
    lighter chunk first, the last device's last), which the warm-up holds unequally — the
    first device's chunk 0 about twice as many micro-batches as its others; the last device
    warms up on its v-1 first chunks, p passes each, and peaks at the next forward, of its
    first chunk when m > p (its last chunk otherwise). A chunk holding only the embedding or
    only the loss (`ends`) holds none of the layers' activations. Both match the schedule's
    pass order (`pipeline_sim`) pass for pass."""
    p, v, m = (np.asarray(x, dtype=float) for x in (p, v, m))

    def warm(k):
        return np.minimum(2.0 * (p - k - 1.0) + (v - 1.0) * p + 1.0, m * v)

    def held(k):
        plain = np.minimum(p - k, m)
        return np.maximum(np.where(v > 1, warm(k) / v, plain), 1.0)

    out = held(0.0), held(np.minimum(1.0, p - 1.0)), held(p - 1.0)
    if layers is None:
        return out
    first, _, last = (np.asarray(x, dtype=float) for x in layers)
    w0 = warm(0.0)
    # Passes of the first device's chunk 0 among its first W: full rounds of p·v, then the
    # partial round's share.
    n0 = np.floor(w0 / (p * v)) * p + np.minimum(w0 % (p * v), p)
    light0, light_end = np.floor(first / v + 1e-9), np.floor(last / v + 1e-9)
    other0 = (first - light0) / np.maximum(v - 1.0, 1.0)
    other_end = (last - light_end) / np.maximum(v - 1.0, 1.0)
    held_first = (n0 * light0 + (w0 - n0) * other0) / np.maximum(first, 1.0)
    held_last = (
        np.minimum((v - 1.0) * p, m * v) * other_end + np.where(m > p, other_end, light_end)
    ) / np.maximum(last, 1.0)
    interleaved = v > 1
    return (
        np.where(interleaved, np.maximum(held_first, 1.0), out[0]),
        out[1],
        np.where(interleaved, np.maximum(held_last, 1.0), out[2]),
    )


def chunk_layers(first, mid, last, v):
    """Layers in the first chunk of the first, a middle and the last device when each device
    splits its layers over its v chunks as evenly as whole layers allow: the first device's
    lighter chunk comes first (beside the embedding), the last device's last (beside the loss).

    Megatron-Core builds that split with ``--account-for-embedding-in-pipeline-split`` and
    ``--account-for-loss-in-pipeline-split`` under a virtual pipeline: (l + 2)/p per device,
    that over v per chunk, one layer fewer in the first virtual stage and in the last
    (``transformer_block.get_num_layers_to_build``; Llama 3 405B's 7, 8 × 14, 7 with chunks
    of 4 is 3+4, 4+4, ..., 4+3); ``--pipeline-model-parallel-layout`` writes any split out.
    ``--decoder-first/last-pipeline-num-layers`` instead needs every device's layers divisible
    by v (equal chunks on each device)."""
    v = np.asarray(v, dtype=float)
    first, mid, last = (np.asarray(x, dtype=float) for x in (first, mid, last))
    return np.floor(first / v + 1e-9), np.ceil(mid / v - 1e-9), np.ceil(last / v - 1e-9)


def pipeline_time(t_first, t_mid, t_last, p, v, m, chunk0=None):
    """(time of one step's pipeline, of it the idle time of the last stage) for per-micro-batch
    stage times (forward + backward) of the first, every middle and the last device, and the
    time of each one's first chunk (`chunk0`; default a 1/v share: equal chunks).

    The step is set by the slowest stage: m·max(t) plus the fill and drain, which pass every
    other stage's first chunk once each way: m·max(t) + Σ chunk0 − the slowest's chunk0.
    Equal chunks give m·max(t) + (Σ t − max t)/v, and equal stages (m + (p-1)/v)·t, Narayanan
    et al. 2021's (p-1)/(v·m) bubble. Exact (against `pipeline_sim`) when the last stage is the
    slowest, as with the output layer and the loss on it; an upper bound otherwise (stages
    after a slower one partly idle in its shadow)."""
    p, v, m = (np.asarray(x, dtype=float) for x in (p, v, m))
    if chunk0 is None:
        chunk0 = (t_first / v, t_mid / v, t_last / v)
    c_first, c_mid, c_last = chunk0
    middle = np.maximum(p - 2.0, 0.0)
    slowest = np.maximum(np.maximum(t_first, t_last), np.where(p > 2, t_mid, 0.0))
    slowest = np.where(p > 1, slowest, t_last)
    # The slowest stage's own first chunk is not in the fill: the last of equals is taken.
    slowest_chunk = np.where(
        t_last >= slowest, c_last, np.where((p > 2) & (t_mid >= slowest), c_mid, c_first)
    )
    chunks = np.where(p > 1, c_first + middle * c_mid + c_last - slowest_chunk, 0.0)
    pipeline = m * slowest + chunks
    return pipeline, pipeline - m * t_last


def step_closed_form(stage_times, m: int, v: int = 1, chunk0=None) -> float:
    """`pipeline_time` for any list of per-stage times (forward + backward per micro-batch)
    and, for uneven chunks, each stage's first chunk's time: m·max(t) + Σ chunk0 − the
    slowest's — exact for 1F1B and interleaved 1F1B when the last stage is the slowest, an
    upper bound otherwise."""
    times = [float(x) for x in stage_times]
    firsts = [x / v for x in times] if chunk0 is None else [float(x) for x in chunk0]
    slowest = max(times)
    at = len(times) - 1 - times[::-1].index(slowest)
    return m * slowest + sum(firsts) - firsts[at]


def pipeline_step(x: Layout, comp: Compute, mp: ModelParallelComm, stage_mb):
    """(the pipeline's time for a step, of it the last stage's idle time, the time a
    micro-batch spends rebuilding activations on the last stage).

    The other stages run their layers at the last stage's time per layer, without the output
    layer and the loss, and rebuild their own share of layers (recompute=layers:N rebuilds N
    of each stage, however many it holds); the slowest stage sets the pace
    (`pipeline_time`)."""
    rebuild_mb = comp.recompute_mb + mp.tp_mb * x.rc_collectives / (4.0 + x.rc_collectives)
    per_layer_mb = (stage_mb - comp.head_mb - rebuild_mb) / np.maximum(x.layers_dev, 1.0)
    last_rebuilt = recompute.layers_rebuilt(x.plan.recompute, x.layers_dev)

    def stage_mb_of(layers):
        by_layers = recompute.layers_rebuilt(x.plan.recompute, layers) / np.maximum(
            last_rebuilt, 1.0
        )
        share = np.where(
            x.plan.recompute >= recompute.LAYERS_BASE, by_layers, layers / x.layers_dev
        )
        return layers * per_layer_mb + rebuild_mb * share

    first_l, mid_l, _ = x.stage_layers
    times = (stage_mb_of(first_l), stage_mb_of(mid_l), stage_mb)
    # A device's first chunk: its share of the device's time by layers. The output layer and
    # the loss run in the last device's last chunk, so with v > 1 its first chunk has only
    # layers (with ends=on the loss may fill that last chunk alone).
    head = np.where(x.plan.v > 1, comp.head_mb, 0.0)
    chunk0 = tuple(
        t * c / np.maximum(n, 1.0)
        for t, c, n in zip(
            (times[0], times[1], stage_mb - head),
            chunk_layers(*x.stage_layers, x.plan.v),
            x.stage_layers,
            strict=True,
        )
    )
    pipeline_s, bubble_s = pipeline_time(*times, x.plan.p, x.plan.v, x.m, chunk0)
    dual_s = dualpipe_bubble(x.plan.p, stage_mb, rebuild_mb)
    pipeline_s = np.where(x.plan.dualpipe, x.m * stage_mb + dual_s, pipeline_s)
    bubble_s = np.where(x.plan.dualpipe, dual_s, bubble_s)
    return pipeline_s, bubble_s, rebuild_mb


def dualpipe_bubble(p, stage_mb, rebuild_mb=0.0):
    """DualPipe's bubble, (p/2 - 1)(F&B + B - 3W) (DeepSeek-V3 technical report, Table 2),
    for a stage whose forward and backward of one micro-batch take `stage_mb`, of it
    `rebuild_mb` rebuilding activations. F&B is a forward and a backward chunk run together
    (their communication hidden behind each other's compute, not their compute): F + B. A
    GEMM's backward is two GEMMs of its forward's size, the input gradient (in B before the
    weight gradient W) and the weight gradient, so F = W = (stage − rebuild)/3 and B the rest:
    the bubble is (p/2 - 1)(2·stage - 4F), (p/2 - 1)·2/3 of a stage without rebuilding
    against 1F1B's (p - 1) stages. Every device is priced as the one with the output layer
    and the loss for every micro-batch (DualPipe splits them between the two end devices:
    an upper bound by half the head a micro-batch)."""
    p = np.asarray(p, dtype=float)
    f = (stage_mb - rebuild_mb) / 3.0
    return np.maximum(p / 2.0 - 1.0, 0.0) * (2.0 * stage_mb - 4.0 * f)
