"""Figures for `ceiling trace`: a strip per rank with the step's categories, the top ops
on the device's roofline, and a waterfall from the dense peak down to the achieved MFU."""

from __future__ import annotations

from pathlib import Path

from ceiling.render import plots
from ceiling.trace.breakdown import COMPUTE, ORDER
from ceiling.trace.results import RankResult, TraceAnalysis

COLOURS = {
    "compute": "#2b8cbe",
    "memory-bound": "#7bccc4",
    "bound unknown": "#bae4bc",
    "communication (exposed)": "#e34a33",
    "memcpy/memset": "#fdbb84",
    "idle": "#d9d9d9",
}


def waterfall_steps(rank: RankResult) -> list[tuple[str, float]]:
    """(label, fraction of the dense peak lost) from 1 down to MFU: each non-compute share
    of the step, then the compute time spent below peak."""
    wall = rank.step_s or 1.0
    out = [(cat, rank.mean(cat) / wall) for cat in ORDER if cat != COMPUTE]
    compute_share = rank.mean(COMPUTE) / wall
    if rank.mfu is not None:
        out.append(("compute below peak", max(compute_share - rank.mfu, 0.0)))
    return out


def _strips(ax, r: TraceAnalysis) -> None:
    """The first analysed step of each rank as a time line, one row per rank."""
    seen = set()
    for y, rank in enumerate(r.ranks):
        if not rank.steps:
            continue
        step = rank.steps[0]
        ax.broken_barh(
            [(0, step.wall_s * 1e3)],
            (y - 0.35, 0.7),
            color=COLOURS["idle"],
            label=None if "idle" in seen else "idle",
        )
        seen.add("idle")
        for cat, spans in step.timeline.items():
            bars = [((a - step.start_s) * 1e3, (b - a) * 1e3) for a, b in spans]
            if bars:
                ax.broken_barh(
                    bars, (y - 0.35, 0.7), color=COLOURS[cat], label=None if cat in seen else cat
                )
                seen.add(cat)
    ax.set_yticks(range(len(r.ranks)), [f"rank {x.rank}" for x in r.ranks])
    ax.set_xlabel("time in the first analysed step (ms)")
    ax.set_title("what each rank's device (or host) does")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3)


def _roofline(ax, r: TraceAnalysis, top: int) -> None:
    d = r.device
    ax.set_title(f"top ops on {d.name or 'no device'}'s roofline")
    pts = [o for o in r.ranks[0].ops[:top] if o.intensity and o.achieved_flops_per_s]
    if d.peak_flops_per_s is None or not pts:
        ax.text(
            0.5, 0.5, "no roofline: device or shapes unknown", ha="center", transform=ax.transAxes
        )
        return
    peak, bw = d.peak_flops_per_s, d.bandwidth_bytes_per_s
    lo = min([o.intensity for o in pts] + [peak / bw / 100])
    hi = max([o.intensity for o in pts] + [peak / bw * 100])
    xs = [lo * (hi / lo) ** (i / 100) for i in range(101)]
    ax.plot(xs, [min(peak, x * bw) for x in xs], color="k", lw=1.5)
    for o in pts:
        ax.plot(o.intensity, o.achieved_flops_per_s, "o", ms=4)
        ax.annotate(
            o.name.removeprefix("aten::")[:18],
            (o.intensity, o.achieved_flops_per_s),
            fontsize=6,
            xytext=(3, 2),
            textcoords="offset points",
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("FLOP/byte")
    ax.set_ylabel("achieved FLOP/s")


def _waterfall(ax, rank: RankResult) -> None:
    if rank.mfu is None:  # no peak (or no FLOPs): where the step's time goes, not a waterfall
        _time_split(ax, rank)
        return
    ax.set_title(f"rank {rank.rank}: dense peak to MFU")
    level = 1.0
    labels, idx = ["dense peak"], 0
    ax.bar(idx, 1.0, color="#2b8cbe")
    for label, lost in waterfall_steps(rank):
        idx += 1
        ax.bar(idx, lost, bottom=level - lost, color=COLOURS.get(label, "#969696"))
        level -= lost
        labels.append(label)
    if rank.mfu is not None:
        idx += 1
        ax.bar(idx, rank.mfu, color="#31a354")
        labels.append(f"MFU {rank.mfu * 100:.2g} %")
    ax.set_xticks(range(len(labels)), labels, rotation=40, ha="right", fontsize=7)
    ax.set_ylabel("fraction of the dense peak")


def _time_split(ax, rank: RankResult) -> None:
    ax.set_title(f"rank {rank.rank}: where the step's time goes (no MFU: peak or FLOPs unknown)")
    wall = rank.step_s or 1.0
    shares = [(cat, rank.mean(cat) / wall) for cat in ORDER]
    ax.bar(range(len(shares)), [v for _, v in shares], color=[COLOURS[c] for c, _ in shares])
    ax.set_xticks(range(len(shares)), [c for c, _ in shares], rotation=40, ha="right", fontsize=7)
    ax.set_ylabel("share of the step")


def trace_figure(r: TraceAnalysis, path: str | Path, top: int = 12) -> Path:
    return plots.save(build_figure(r, top), path)


def build_figure(r: TraceAnalysis, top: int = 12):
    """The three panels side by side; the caller saves or embeds the figure."""
    fig, axes = plots.subplots(1, 3, figsize=(15, 4.2))
    _strips(axes[0], r)
    _roofline(axes[1], r, top)
    _waterfall(axes[2], r.ranks[0])
    fig.tight_layout()
    return fig
