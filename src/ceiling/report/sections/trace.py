"""The user's own run, from its torch.profiler trace (`ceiling report --trace PATH`)."""

from __future__ import annotations

from ceiling import units
from ceiling.render.trace_tables import (
    cross_rows,
    device_line,
    gpu_lines,
    kernel_table,
    op_rows,
    step_rows,
)
from ceiling.report.compose import ReportContext, SectionOutput, Skip

KEY = "trace"
TITLE = "Your run, from its trace"
TOP_OPS = 10


def run(ctx: ReportContext, out: SectionOutput) -> None:
    path = ctx.trace_path
    if path is None:
        raise Skip("no trace given (ceiling report --trace PATH)")
    from ceiling.api.trace import trace

    ctx.step(f"reading {path}")
    # the call `ceiling trace PATH --spec/--profile` makes, with the report's device
    r = trace(path, spec=ctx.work.spec, machine_profile=ctx.work.profile)
    ranks = f"{len(r.ranks)} rank{'s' if len(r.ranks) > 1 else ''}"
    out.about(f"Yours: the trace {path} ({ranks}).", False)
    out.key_figures["trace"] = str(path)
    out.key_figures["ranks"] = len(r.ranks)
    out.note(device_line(r))
    rank = r.ranks[0]
    _largest_loss(out, rank)
    out.key_figures["rank"] = rank.rank
    out.key("step_s", rank.step_s, f"step time (rank {rank.rank})", units.format_time(rank.step_s))
    out.key(
        "mfu",
        rank.mfu,
        f"MFU (rank {rank.rank})",
        "unknown" if rank.mfu is None else units.format_percent(rank.mfu),
    )
    out.key_figures["model_flops_per_step"] = rank.model_flops_per_step
    out.table(f"Rank {rank.rank}: the mean step", ["", "time", "share"], step_rows(rank))
    for line in [*rank.notes, *gpu_lines(rank)]:
        out.note(line)
    if rank.kernels:
        title = f"Rank {rank.rank}: top kernels by device time"
        out.table(title, *kernel_table(rank, TOP_OPS))
    cols = ["op × calls", "shapes", "FLOPs", "time", "roof time", "lost", "bound"]
    title = f"Rank {rank.rank}: ops losing most time against their roof"
    out.table(title, cols, op_rows(rank, TOP_OPS), modelled=(4, 6))
    c = r.cross
    if c is not None:
        out.table("Ranks", ["rank", "step time", "busy (less waiting)"], cross_rows(r))
        if c.straggler is not None:
            out.key("straggler", c.straggler, "straggler", f"rank {c.straggler}")
            out.key(
                "straggler_delay_s",
                c.straggler_delay_s,
                "its delay per step",
                units.format_time(c.straggler_delay_s),
            )
    for note in r.notes:
        out.note(note)
    ctx.step("drawing the time lines, the roofline and the waterfall")
    out.figure(
        r.figure(),
        "Left: each rank's first step on a time line; middle: the top ops on the device's "
        "roofline; right: from the dense peak to the achieved MFU (where the step's time goes "
        "when no peak is known).",
    )


def _largest_loss(out: SectionOutput, rank) -> None:
    """The part of the step, other than compute, that costs most: the verdict's number."""
    from ceiling.api.trace import COMPUTE, IDLE, ORDER

    wall = rank.step_s
    parts = {cat: rank.mean(cat) for cat in ORDER if cat != COMPUTE}
    out.key_figures["breakdown_s"] = {cat: rank.mean(cat) for cat in ORDER}
    if not wall or not parts:
        return
    name, seconds = max(parts.items(), key=lambda kv: kv[1])
    if seconds > 0:
        out.key_figures["largest_loss"] = {
            "name": name,
            "seconds": seconds,
            "share": seconds / wall,
            # what the host did while the device idled: the advice follows it
            "idle_reasons_s": _mean_idle_reasons(rank) if name == IDLE else None,
        }


def _mean_idle_reasons(rank) -> dict[str, float]:
    """Seconds of device idle per host reason (data, sync, launch, other), per mean step."""
    steps = rank.steps or []
    keys = {k for s in steps for k in (s.idle_reasons or {})}
    return {k: sum((s.idle_reasons or {}).get(k, 0.0) for s in steps) / len(steps) for k in keys}
