"""From the dense peak to the measured step time, in bars that add up.

    model FLOPs at the dense peak
    + the gap from the dense peak to the measured matmul ceiling
    + matmuls (and attention) at their achieved rate, beyond that ceiling's time
    + the other ops (elementwise, norms, copies) at their roofline time
    + the first touch of the large buffers they allocated (model.first_touch)
    + their per-op floor (dispatch or launch, `ceiling bench overhead`) × their calls
    + ops with no FLOP formula, as measured
    + waiting for data, and host time between ops (Python, autograd)
    + unexplained: the rest — other ops slower than their roofs and floor explain
    = the measured step time

Op and host times come from one recorded step (a sync around each op), which runs longer
than a plain step: they are scaled by plain / recorded so that the bars add up to the
measured (plain) step exactly. Seconds in, seconds out.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Bar:
    name: str
    seconds: float
    recover: str  # what would win this time back


@dataclass(frozen=True)
class StepTimes:
    """The measured figures a waterfall is built from, all in seconds or FLOP(/s)."""

    step_s: float  # measured step (median of plain steps)
    recorded_step_s: float  # the recorded step, less the recorder's own work
    model_flops: float
    dense_peak_flops_per_s: float
    measured_peak_flops_per_s: float | None  # the matmul ceiling `ceiling bench` measured
    model_op_s: float  # recorded time of the matmul and attention ops
    other_op_s: float  # recorded time of the other ops with a formula
    other_roof_s: float  # those ops each at its roofline (FLOPs/peak, bytes/bandwidth)
    other_calls: int  # how many calls those ops made
    per_op_s: float  # the per-op floor
    unknown_op_s: float = 0.0  # recorded time of ops with no FLOP formula
    data_wait_s: float = 0.0  # waiting for the next batch (`ceiling step`), plain time
    first_touch_s: float = 0.0  # the other ops' new buffers, first touch (model.first_touch)
    compiled: bool = False  # the model is compiled already: compiling it is no remedy
    gpu: bool = True  # the step ran on a GPU: CUDA graphs are a remedy there only

    @property
    def scale(self) -> float:
        """Recorded times to plain ones: the plain step's compute part / the recorded step."""
        if self.recorded_step_s <= 0:
            return 1.0
        return max(self.step_s - self.data_wait_s, 0.0) / self.recorded_step_s


FIRST_TOUCH = "first touch of new buffers (page faults)"
_ONLY_WHEN_PRESENT = ("ops with no FLOP formula", "waiting for data", FIRST_TOUCH)


def _host_remedy(t: StepTimes) -> str:
    if t.compiled:
        return ("CUDA graphs (mode='reduce-overhead'); " if t.gpu else "") + "less Python per step"
    return ("torch.compile or CUDA graphs" if t.gpu else "torch.compile") + "; less Python per step"


def bars(t: StepTimes) -> list[Bar]:
    """The waterfall; its bars sum to t.step_s exactly (the last one takes up the rest)."""
    k = t.scale
    at_peak = t.model_flops / t.dense_peak_flops_per_s
    at_ceiling = t.model_flops / (t.measured_peak_flops_per_s or t.dense_peak_flops_per_s)
    op_s = t.model_op_s + t.other_op_s + t.unknown_op_s
    above_roof = max(k * t.other_op_s - t.other_roof_s, 0.0)
    touch = min(t.first_touch_s, above_roof)  # what the other ops' time beyond roof shows
    out = [
        Bar("model FLOPs at the dense peak", at_peak, "nothing: the datasheet's limit"),
        Bar(
            "dense peak → measured matmul ceiling",
            at_ceiling - at_peak,
            "clocks, power and the library's best kernel; a lower precision (bf16, fp8)",
        ),
        Bar(
            "matmuls and attention below the ceiling",
            k * t.model_op_s - at_ceiling,
            "larger or aligned shapes, fused attention, batching small matmuls",
        ),
        Bar(
            "other ops at their roof (bytes / bandwidth, function cost)",
            t.other_roof_s,
            "fewer passes over the data (the compiled graph's kernels show what it fused)"
            if t.compiled
            else "fusing elementwise ops and norms (torch.compile) to move fewer bytes",
        ),
        Bar(
            FIRST_TOUCH,
            touch,
            "reuse buffers: in-place ops, preallocated outputs, an allocator that keeps its "
            "memory (jemalloc, tcmalloc)",
        ),
        Bar(
            "per-op overhead (calls × the per-op floor)",
            min(t.other_calls * t.per_op_s, above_roof - touch),
            "fewer, larger ops: fusion, foreach optimizers, "
            + ("CUDA graphs, larger batches" if t.gpu else "larger batches"),
        ),
        Bar("ops with no FLOP formula", k * t.unknown_op_s, "unknown: no roof to judge them"),
        Bar("waiting for data", t.data_wait_s, "more loader workers, pinned memory, prefetch"),
        Bar(
            "host time between ops (Python, autograd)",
            k * max(t.recorded_step_s - op_s, 0.0),
            _host_remedy(t),
        ),
    ]
    out = [b for b in out if b.seconds or b.name not in _ONLY_WHEN_PRESENT]
    explained = sum(b.seconds for b in out)
    out.append(
        Bar(
            "unexplained: other ops beyond their roof and floor",
            t.step_s - explained,
            "look at the op table: ops far below their roof (threads, small sizes, layout)",
        )
    )
    return out
