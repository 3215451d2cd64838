"""Event simulations as results: `ceiling.simulate.pipeline(stages=4, micro_batches=8)` (one
step of a pipeline schedule) and `ceiling.simulate.straggler(workers=64)` (a data-parallel
step that waits for its slowest worker).

A time is seconds, or a string with its unit ("10ms"); per-stage times are one time for
every stage or a sequence (or comma list) with one per stage.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ceiling.api.arguments import BadArgument, checked
from ceiling.api.result import Result
from ceiling.units import parse_time

Time = float | str
Times = Time | Sequence[Time]

# Straggler workers a simulation takes: one time each, so memory and time grow with it.
MAX_WORKERS = 1_000_000


def _times(value: Times, argument: str) -> list[float]:
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, Sequence):
        items = [items]
    parts = [x.strip() if isinstance(x, str) else x for x in items]
    parts = [x for x in parts if x != ""]
    if not parts:
        raise BadArgument(argument, "needs at least one time")
    return [parse_time(x) for x in parts]


def _per_stage(value: Times, stages: int, argument: str) -> list[float]:
    values = _times(value, argument)
    if len(values) == 1:
        return values * stages
    if len(values) != stages:
        raise BadArgument(
            argument, f"needs one time or one per stage ({stages}), got {len(values)}"
        )
    return values


@dataclass(frozen=True)
class PipelineSimulation(Result):
    """One simulated step (`sim`: the model's `PipelineResult`, every pass timed) with the
    times it was given, the bubble formula, the same work spread evenly over the stages
    (`balanced_makespan_s`) and the planner's closed form (None for gpipe)."""

    sim: Any  # model.pipeline_sim.PipelineResult
    forward_s: list[float]
    backward_s: list[float]
    p2p_s: float
    bubble_formula: float
    balanced_makespan_s: float
    makespan_closed_form_s: float | None
    title = "Pipeline simulation"

    @property
    def uneven(self) -> bool:
        return len(set(self.forward_s)) > 1 or len(set(self.backward_s)) > 1

    @property
    def uniform(self) -> bool:
        """Equal stages and no sends: where (p-1)/(v·m) is the bubble."""
        return not self.uneven and self.p2p_s == 0

    def record(self) -> dict[str, Any]:
        r = self.sim
        return {
            "schedule": r.schedule,
            "stages": r.stages,
            "micro_batches": r.micro_batches,
            "chunks": r.chunks,
            "forward_s": self.forward_s,
            "backward_s": self.backward_s,
            "p2p_s": self.p2p_s,
            "makespan_s": r.makespan_s,
            "ideal_s": r.ideal_s,
            "bubble_fraction": r.bubble_fraction,
            "bubble_formula": self.bubble_formula,
            "balanced_makespan_s": self.balanced_makespan_s,
            "makespan_closed_form_s": self.makespan_closed_form_s,
            "idle_fraction": r.idle_fraction,
            "utilisation": list(r.utilisation),
            "peak_in_flight": list(r.peak_in_flight),
        }

    def heading(self) -> str:
        r = self.sim
        return (
            f"{r.schedule}: p = {r.stages}, m = {r.micro_batches}"
            + (f", v = {r.chunks}" if r.chunks > 1 else "")
            + f": bubble {r.bubble_fraction:.2%}"
        )

    def figure(self):
        from ceiling.render.pipeline_plot import pipeline_figure

        return pipeline_figure(self.sim)


@checked
def pipeline(
    stages: int = 4,
    micro_batches: int = 8,
    schedule: str = "1f1b",
    chunks: int = 1,
    forward: Times = 1.0,
    backward: Times | None = None,
    p2p: Time = 0.0,
) -> PipelineSimulation:
    """Simulate one step of a pipeline schedule (gpipe, 1f1b or interleaved), event by event:
    `stages` devices, `micro_batches` per step, `chunks` per device (interleaved); `forward`
    and `backward` (default 2× forward) are each stage's time for one micro-batch."""
    from ceiling.model.pipeline_sim import (
        SCHEDULES,
        bubble_formula,
        check_schedule,
        simulate_pipeline,
    )
    from ceiling.model.plan.pipeline import step_closed_form

    if schedule not in SCHEDULES:
        raise BadArgument("schedule", f"must be one of {', '.join(SCHEDULES)}, got {schedule!r}")
    for argument, value in (("stages", stages), ("micro_batches", micro_batches)):
        if value < 1:
            raise BadArgument(argument, f"must be ≥ 1, got {value}")
    if chunks < 1:
        raise BadArgument("chunks", f"must be ≥ 1, got {chunks}")
    check_schedule(schedule, stages, micro_batches, chunks)  # before a time per stage is made
    fwd = _per_stage(forward, stages, "forward")
    # a stage without forward work is no pipeline stage: its 0 s would show a 0 % bubble
    if min(fwd) <= 0:
        raise BadArgument("forward", f"each stage's time must be > 0, got {forward}")
    bwd = [2.0 * x for x in fwd] if backward is None else _per_stage(backward, stages, "backward")
    p2p_s = parse_time(p2p)
    r = simulate_pipeline(schedule, stages, micro_batches, fwd, bwd, chunks, p2p_s)
    closed = (
        None
        if schedule == "gpipe"
        else step_closed_form([f + b for f, b in zip(fwd, bwd, strict=True)], micro_batches, chunks)
    )
    # The same total work spread evenly over the stages: what the imbalance costs.
    even = len(set(fwd)) == 1 and len(set(bwd)) == 1
    balanced = (
        r.makespan_s
        if even
        else simulate_pipeline(
            schedule,
            stages,
            micro_batches,
            [sum(fwd) / stages] * stages,
            [sum(bwd) / stages] * stages,
            chunks,
            p2p_s,
        ).makespan_s
    )
    formula = bubble_formula(stages, micro_batches, chunks)
    return PipelineSimulation(r, fwd, bwd, p2p_s, formula, balanced, closed)


def bubble_formula(stages: int, micro_batches: int, chunks: int = 1) -> float:
    """The closed-form bubble of a pipeline step, (p − 1) / (v · m): what `pipeline` shows
    beside its simulation, for a shape too large to simulate."""
    from ceiling.model.pipeline_sim import bubble_formula as formula

    return formula(stages, micro_batches, chunks)


@dataclass(frozen=True)
class StragglerSimulation(Result):
    """A synchronous data-parallel step (`sim`: the model's `StragglerResult`, per-worker
    compute and waits) and, with jitter, `jitter_scan`: the step at 1, 4, 16, ... workers
    from the jitter alone."""

    sim: Any  # model.pipeline_sim.StragglerResult
    slow: float
    jitter: float
    jitter_scan: list[dict[str, float]]
    title = "Straggler simulation"

    @property
    def no_straggler(self) -> bool:
        return self.slow == 1.0 and self.jitter == 0.0

    def record(self) -> dict[str, Any]:
        r = self.sim
        return {
            "workers": r.workers,
            "step_s": r.step_s,
            "slowest_compute_s": max(r.compute_s),
            "mean_wait_s": r.mean_wait_s,
            "efficiency": r.efficiency,
            "slowdown": r.slowdown,
            "allreduce_s": r.allreduce_s,
            "jitter_scan": self.jitter_scan,
        }

    def heading(self) -> str:
        r = self.sim
        return f"{r.workers} workers: efficiency {r.efficiency:.1%}, {r.slowdown:.3f}× slower"

    def figure(self):
        from ceiling.render.pipeline_plot import straggler_figure

        return straggler_figure(self.sim)


@checked
def straggler(
    workers: int = 64,
    step: Time = 1.0,
    slow: float = 1.5,
    slow_count: int = 1,
    jitter: float = 0.0,
    allreduce: Time = 0.0,
    seed: int = 0,
) -> StragglerSimulation:
    """Simulate a synchronous data-parallel step where `slow_count` of `workers` are `slow`×
    slower, with optional random variation `jitter` (relative standard deviation, drawn from
    `seed`): the all-reduce (`allreduce` long) starts when the slowest finishes."""
    from ceiling.model.pipeline_sim import simulate_straggler, straggler_workers

    if workers > MAX_WORKERS:
        raise BadArgument("workers", f"must be at most {MAX_WORKERS}, got {workers}")
    if seed < 0:
        raise BadArgument("seed", f"must be ≥ 0, got {seed}")
    step_s, allreduce_s = parse_time(step), parse_time(allreduce)
    r = simulate_straggler(
        straggler_workers(workers, step_s, slow, slow_count, jitter, seed), allreduce_s
    )
    scan = []
    if jitter > 0:
        n = 1
        while n <= max(workers, 8):
            s = simulate_straggler(straggler_workers(n, step_s, 1.0, 0, jitter, seed), allreduce_s)
            scan.append({"workers": n, "step_s": s.step_s, "efficiency": s.efficiency})
            n *= 4
    return StragglerSimulation(r, slow, jitter, scan)
