"""Where each ranked plan's step goes: one horizontal bar per plan, its parts stacked in the
order of the step (compute, communication, pipeline, data-parallel, the rest), the best plan
on top. matplotlib is imported lazily through `plots.subplots()`."""

from __future__ import annotations

from ceiling.render.plots import subplots

# The parts of a plan's step (`PlanEstimate.time`, whose parts sum to the step) by kind, in
# the order they are stacked; a part not listed goes last, under its own name.
GROUPS = (
    ("matmul", ("matmul_s", "fp8_matmul_s", "fp8_cast_s"), "#4C72B0"),
    ("attention", ("attention_s",), "#6A8FCC"),
    ("memory-bound", ("elementwise_s", "eager_kernels_s"), "#8AAAD9"),
    ("host", ("host_s",), "#A9C4E6"),
    ("tensor/context/expert comm", ("tp_comm_s", "cp_comm_s", "ep_comm_s"), "#DD8452"),
    ("pipeline bubble and sends", ("bubble_s", "p2p_s"), "#C44E52"),
    ("data-parallel, optimizer", ("dp_exposed_s", "optimizer_s"), "#55A868"),
    ("straggler", ("straggler_s",), "#8C8C8C"),
)


def stacked_parts(time: dict[str, float]) -> list[tuple[str, float, str]]:
    """(group, seconds, colour) of one plan's step, every part of `time` counted once."""
    out, seen = [], set()
    for name, keys, colour in GROUPS:
        seen.update(keys)
        out.append((name, sum(time.get(k, 0.0) for k in keys), colour))
    out.extend((k.removesuffix("_s"), v, "#BBBBBB") for k, v in time.items() if k not in seen)
    return out


def plan_figure(rows: list[tuple[str, dict[str, float]]], title: str):
    """`rows`: (label, the plan's `time`) for each ranked plan, best first."""
    fig, ax = subplots(figsize=(9.0, 0.45 * len(rows) + 2.4))
    drawn: set[str] = set()
    for y, (_, time) in enumerate(rows):
        left = 0.0
        for name, seconds, colour in stacked_parts(time):
            if seconds <= 0:
                continue
            ax.barh(y, seconds, left=left, color=colour, edgecolor="white",
                    label=None if name in drawn else name)  # fmt: skip
            drawn.add(name)
            left += seconds
    ax.set_yticks(range(len(rows)), [label for label, _ in rows], fontsize=8)
    ax.invert_yaxis()  # the best plan on top
    ax.set_xlabel("step time (s)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.28), ncols=4, frameon=False)
    fig.tight_layout()
    return fig
