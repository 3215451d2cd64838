"""`ceiling simulate pipeline` and `ceiling simulate straggler`: event simulations."""

from __future__ import annotations

from typing import Annotated

import typer

from ceiling.cli.app import app
from ceiling.cli.output import (
    LIST_HELP,
    JsonOption,
    PlotOption,
    console,
    figure_and_json,
    joined,
    table,
)
from ceiling.units import format_time

simulate_app = typer.Typer(
    help="Simulate a pipeline-parallel step or a data-parallel step with stragglers.",
    no_args_is_help=True,
)
app.add_typer(simulate_app, name="simulate")


PIPELINE_HELP = """Simulate one step of a pipeline schedule, event by event.

p stages (devices), m micro-batches, v chunks per device for the interleaved schedule.
--forward/--backward give each stage's time for one micro-batch (one value for all stages or a
comma list, one per stage: uneven stages allowed; units like 10ms; a bare number is seconds).
The bubble is idle time over the busiest stage's compute; with uniform stages and no
point-to-point time it equals (p-1)/(v·m)."""

STRAGGLER_HELP = """Simulate a synchronous data-parallel step where some workers are slower.

Each worker computes its gradients; the all-reduce starts when the slowest finishes, so
everyone else waits. --slow makes --slow-count workers that many times slower; --jitter adds
random per-worker variation (relative standard deviation), which alone makes the expected
wait grow with the number of workers. By default one worker of 64 is 1.5× slower; --slow 1
and no --jitter simulate no straggler at all."""


# Stage rows a terminal table shows; more would scroll the findings away.
MAX_STAGE_ROWS = 24


def _shown_stages(utilisation: tuple[float, ...]) -> list[int]:
    """Every stage when few; else the first and last few and the busiest, in stage order."""
    p = len(utilisation)
    if p <= MAX_STAGE_ROWS:
        return list(range(p))
    ends = MAX_STAGE_ROWS // 3
    busiest = sorted(range(p), key=lambda k: -utilisation[k])[:ends]
    return sorted({*range(ends), *range(p - ends, p), *busiest})


@simulate_app.command("pipeline", help=PIPELINE_HELP)
def pipeline(
    stages: Annotated[int, typer.Option("--stages", "-p", help="Pipeline stages p.")] = 4,
    micro_batches: Annotated[
        int, typer.Option("--micro-batches", "-m", help="Micro-batches per step m.")
    ] = 8,
    schedule: Annotated[
        str, typer.Option("--schedule", help="gpipe, 1f1b or interleaved.")
    ] = "1f1b",
    chunks: Annotated[
        int, typer.Option("--chunks", "-v", help="Model chunks per device (interleaved).")
    ] = 1,
    forward: Annotated[
        list[str] | None,
        typer.Option(
            "--forward", help=f"Forward time per stage: one value, or one per stage {LIST_HELP}."
        ),
    ] = None,
    backward: Annotated[
        list[str] | None,
        typer.Option(
            "--backward", help=f"Backward time per stage, {LIST_HELP} (default 2× forward)."
        ),
    ] = None,
    p2p: Annotated[str, typer.Option("--p2p", help="Point-to-point time between stages.")] = "0",
    json_out: JsonOption = False,
    plot: PlotOption = None,
) -> None:
    from ceiling.api.simulate import pipeline as simulate_pipeline

    result = simulate_pipeline(
        stages,
        micro_batches,
        schedule,
        chunks,
        joined(forward) or "1",
        joined(backward),
        p2p,
    )
    if figure_and_json(result, plot, json_out):
        return
    title = f"{schedule}: p = {stages}, m = {micro_batches}" + (
        f", v = {chunks}" if chunks > 1 else ""
    )
    _show_pipeline(result, title)
    if result.uneven:
        _show_uneven_stages(result)
    if plot:
        console().print(f"figure: {plot}")


def _show_pipeline(result, title: str) -> None:
    """The stages' table, the step against the busiest stage's compute, and the bubble."""
    r, fwd, bwd = result.sim, result.forward_s, result.backward_s
    formula, stages = result.bubble_formula, len(fwd)
    c = console()
    rows = [
        [
            k,
            format_time(fwd[k]),
            format_time(bwd[k]),
            f"{r.utilisation[k]:.1%}",
            r.peak_in_flight[k],
        ]
        for k in _shown_stages(r.utilisation)
    ]
    c.print(
        table(
            title,
            ["stage", "forward", "backward", "busy", "held (chunk passes)"],
            rows,
            caption=None
            if len(rows) == stages
            else f"{len(rows)} of {stages} stages shown: the first, the last and the busiest "
            "(--json lists every stage)",
        )
    )
    c.print(
        f"step {format_time(r.makespan_s)} against {format_time(r.ideal_s)} of compute on the "
        f"busiest stage: bubble {r.bubble_fraction:.2%}"
        + (
            f" (formula (p-1)/(v·m) = {formula:.2%})"
            if result.uniform
            else f"; (p-1)/(v·m) = {formula:.2%} holds only for uniform stages without sends"
        )
    )
    c.print(f"idle share of all device time: {r.idle_fraction:.1%}")


def _show_uneven_stages(result) -> None:
    """The slowest stage, what the imbalance costs, and the planner's closed form."""
    r, fwd, bwd = result.sim, result.forward_s, result.backward_s
    c = console()
    balanced, closed = result.balanced_makespan_s, result.makespan_closed_form_s
    slowest = max(range(len(fwd)), key=lambda k: fwd[k] + bwd[k])
    c.print(
        f"uneven stages: stage {slowest} ({format_time(fwd[slowest] + bwd[slowest])} per "
        f"micro-batch) sets the pace; the same work spread evenly would take "
        f"{format_time(balanced)}, so the imbalance costs "
        f"{r.makespan_s / balanced - 1:.1%} of the step"
    )
    if closed is not None:
        exact = (
            "exact: the last stage is the slowest"
            if fwd[-1] + bwd[-1] == max(f + b for f, b in zip(fwd, bwd, strict=True))
            else "an upper bound: stages after the slowest idle in its shadow"
        )
        c.print(
            f"closed form m·max(t) + (Σt − max t)/v = {format_time(closed)} ({exact}; "
            "the planner's step for unequal stages)"
        )


@simulate_app.command("straggler", help=STRAGGLER_HELP)
def straggler(
    workers: Annotated[int, typer.Option("--workers", "-n", help="Data-parallel workers.")] = 64,
    step: Annotated[str, typer.Option("--step", help="Compute time of a normal worker.")] = "1s",
    slow: Annotated[
        float, typer.Option("--slow", help="How many times slower the slow workers are.")
    ] = 1.5,
    slow_count: Annotated[int, typer.Option("--slow-count", help="How many workers are slow.")] = 1,
    jitter: Annotated[
        float, typer.Option("--jitter", help="Random variation, relative std. deviation.")
    ] = 0.0,
    allreduce: Annotated[
        str, typer.Option("--allreduce", help="All-reduce time after the slowest finishes.")
    ] = "0",
    seed: Annotated[
        int, typer.Option("--seed", min=0, help="Random seed for --jitter (0 or more).")
    ] = 0,
    json_out: JsonOption = False,
    plot: PlotOption = None,
) -> None:
    from ceiling.api.simulate import straggler as simulate_straggler

    result = simulate_straggler(workers, step, slow, slow_count, jitter, allreduce, seed)
    if figure_and_json(result, plot, json_out):
        return
    r, scan = result.sim, result.jitter_scan
    c = console()
    if result.no_straggler:
        c.print("no straggler asked for (--slow 1, no --jitter): every worker finishes together")
    c.print(
        f"{r.workers} workers: step {format_time(r.step_s)} (slowest compute "
        f"{format_time(max(r.compute_s))} + all-reduce {format_time(r.allreduce_s)})"
    )
    c.print(
        f"mean wait for the slowest {format_time(r.mean_wait_s)}; efficiency "
        f"{r.efficiency:.1%}; {r.slowdown:.3f}× the step with every worker at the median"
    )
    if scan:
        c.print(
            table(
                f"jitter {jitter:.1%} alone: the expected slowest grows with the worker count",
                ["workers", "step", "efficiency"],
                [[x["workers"], format_time(x["step_s"]), f"{x['efficiency']:.1%}"] for x in scan],
            )
        )
    if plot:
        c.print(f"figure: {plot}")
