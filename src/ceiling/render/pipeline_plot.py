"""Gantt-style figures of a simulated pipeline step and of a data-parallel step with
stragglers. matplotlib is imported lazily through `plots.subplots()`."""

from __future__ import annotations

from ceiling.render.plots import subplots

FORWARD_COLOURS = ("#4C72B0", "#6A8FCC", "#8AAAD9", "#A9C4E6")
BACKWARD_COLOURS = ("#DD8452", "#E69D74", "#EEB596", "#F5CDB8")
LABEL_LIMIT = 400  # beyond this many passes, micro-batch numbers would only clutter


def pipeline_figure(result, time_unit: float = 1.0, unit_label: str = "s"):
    """One row per device; forward passes blue, backward orange, lighter for later chunks."""
    p = result.stages
    fig, ax = subplots(figsize=(9.0, 0.55 * p + 1.6))
    label = len(result.passes) <= LABEL_LIMIT
    # One broken_barh per (device, colour): fast even for tens of thousands of passes.
    groups: dict[tuple[int, str], list[tuple[float, float]]] = {}
    for x in result.passes:
        colours = FORWARD_COLOURS if x.kind == "F" else BACKWARD_COLOURS
        colour = colours[x.chunk % len(colours)]
        span = (x.start_s / time_unit, (x.end_s - x.start_s) / time_unit)
        groups.setdefault((x.device, colour), []).append(span)
    for (device, colour), spans in groups.items():
        ax.broken_barh(
            spans, (device - 0.4, 0.8), facecolors=colour, edgecolor="white", linewidth=0.5
        )
    if label:
        for x in result.passes:
            if x.end_s > x.start_s:
                ax.text(
                    (x.start_s + x.end_s) / 2 / time_unit,
                    x.device,
                    str(x.micro_batch + 1),
                    ha="center",
                    va="center",
                    fontsize=6,
                    color="white",
                )
    ax.set_yticks(range(p))
    ax.set_yticklabels([f"stage {k}" for k in range(p)])
    ax.invert_yaxis()
    ax.set_xlabel(f"time ({unit_label})")
    v = f", v = {result.chunks}" if result.chunks > 1 else ""
    ax.set_title(
        f"{result.schedule}: p = {result.stages}, m = {result.micro_batches}{v}; "
        f"bubble {result.bubble_fraction:.1%} of compute",
        loc="left",
    )
    from matplotlib.patches import Patch

    handles = [
        Patch(color=FORWARD_COLOURS[0], label="forward"),
        Patch(color=BACKWARD_COLOURS[0], label="backward"),
    ]
    if result.chunks > 1:  # chunk k is drawn in the k-th shade of each colour
        handles = [
            Patch(color=colours[k % len(colours)], label=f"{kind} chunk {k}")
            for kind, colours in (("F", FORWARD_COLOURS), ("B", BACKWARD_COLOURS))
            for k in range(min(result.chunks, len(colours)))
        ]
    # Two entries fit beside the title; the shades of interleaved chunks go under the axis.
    many = result.chunks > 1
    ax.legend(
        handles=handles,
        loc="upper center" if many else "lower right",
        bbox_to_anchor=(0.5, -0.14) if many else (1.0, 1.0),
        ncol=len(handles) if many else 2,
        fontsize=8,
        frameon=False,
    )
    ax.set_xlim(0, result.makespan_s / time_unit * 1.01)
    ax.grid(True, axis="x", alpha=0.3)
    return fig


def straggler_figure(result, max_rows: int = 64):
    """Per worker: compute, waiting for the slowest, then the all-reduce. Many workers are
    shown as a histogram of compute times against the slowest."""
    n = result.workers
    if n <= max_rows:
        fig, ax = subplots(figsize=(8.0, 0.25 * n + 1.6))
        ys = range(n)
        ax.barh(ys, result.compute_s, color="#4C72B0", label="compute")
        ax.barh(ys, result.wait_s, left=result.compute_s, color="#C44E52", label="waiting")
        slowest = max(result.compute_s)
        ax.barh(
            ys, [result.allreduce_s] * n, left=[slowest] * n, color="#55A868", label="all-reduce"
        )
        ax.set_yticks(list(ys))
        ax.set_yticklabels([f"worker {i}" for i in ys], fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel("time (s)")
        # under the axis: inside, the legend would cover the last workers' bars
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=3, fontsize=8)
    else:
        fig, ax = subplots(figsize=(8.0, 4.2))
        ax.hist(result.compute_s, bins=50, color="#4C72B0")
        ax.axvline(max(result.compute_s), color="#C44E52", ls="--", label="slowest: everyone waits")
        ax.axvline(sum(result.compute_s) / n, color="0.3", ls=":", label="mean")
        ax.set_xlabel("compute time per worker (s)")
        ax.set_ylabel("workers")
        ax.legend(fontsize=8)
    ax.set_title(
        f"{n} workers: step {result.step_s:.3g} s, mean wait {result.mean_wait_s:.3g} s, "
        f"efficiency {result.efficiency:.1%}"
    )
    return fig
