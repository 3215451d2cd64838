"""The step explained: three roofs (compute, memory, per-op overhead) and the waterfall from
the dense peak to the measured step, as JSON, table rows and a figure."""

from __future__ import annotations

from pathlib import Path

from ceiling import units as u


def explanation_json(e) -> dict | None:
    if e is None:
        return None
    p = e.prediction
    return {
        "predicted_step_s": p.time_s,
        "predicted_by_bound_s": p.by_bound_s,
        "step_bound": p.bound,
        "per_op_s": e.roofs.per_op_s,
        "per_op_source": e.per_op_source,
        "host_s_per_op_by_phase": dict(e.roofs.host_s_by_phase),
        "forward_host": e.forward_host.row() if e.forward_host else None,
        "working_set_bytes": e.working_set_bytes,
        "cache_bytes": e.roofs.cache_bytes,
        "cache_bandwidth_bytes_per_s": e.roofs.cache_bandwidth_bytes_per_s,
        "memory_roof_bytes_per_s": e.memory_roof_bytes_per_s,
        "memory_roof_source": e.memory_source,
        "first_touch": {
            "s_per_byte": e.roofs.first_touch.s_per_byte,
            "from_bytes": e.roofs.first_touch.from_bytes,
            "s_per_fault": e.roofs.first_touch.s_per_fault,
        },
        "function_s_per_element": dict(e.roofs.function_s_per_element),
        "dispatch_adds_to_work": e.roofs.serial_dispatch,
        "matmul_shapes_measured": e.matmul_shapes_measured,
        "waterfall": (
            None
            if e.waterfall is None
            else [{"name": b.name, "seconds": b.seconds, "recover": b.recover} for b in e.waterfall]
        ),
    }


def roofs_rows(e, step_s: float | None) -> list[list[str]]:
    p = e.prediction
    vs = f" ({p.time_s / step_s * 100:.0f} % of the measured step)" if step_s else ""
    shares = ", ".join(
        f"{k} {v / p.time_s * 100:.0f} %" for k, v in p.by_bound_s.items() if p.time_s and v
    )
    return [
        ["per-op floor", f"{u.format_time(e.roofs.per_op_s)} — {e.per_op_source}"],
        *_forward_host_rows(e),
        [
            "memory roof",
            f"{u.format_bandwidth(e.memory_roof_bytes_per_s)} ({e.memory_source}; working set "
            f"{u.format_bytes(e.working_set_bytes)})",
        ],
        [
            "step at three roofs (each op at its largest)",
            u.format_time(p.time_s)
            + vs
            + (
                f"; {e.matmul_shapes_measured} matmul and attention shapes at their own "
                "measured rate"
                if e.matmul_shapes_measured
                else ""
            ),
        ],
        ["the step is", f"{p.bound}-bound ({shares})"],
    ]


def _forward_host_rows(e) -> list[list[str]]:
    host = e.forward_host
    if host is None:
        return []
    return [["host time per forward op", f"{u.format_time(host.per_op_s)} — {host.describe()}"]]


def waterfall_rows(bars, step_s: float) -> list[list[str]]:
    return [
        [b.name, u.format_time(b.seconds), f"{b.seconds / step_s * 100:+.0f} %", b.recover]
        for b in bars
    ]


def waterfall_figure(bars, path: str | Path, title: str) -> Path:
    """Each bar starts where the previous one ended; the last reaches the measured step."""
    from ceiling.render import plots

    return plots.save(waterfall_fig(bars, title), path)


def waterfall_fig(bars, title: str):
    """The waterfall as a matplotlib figure (for the report page and for files alike)."""
    from ceiling.render import plots

    fig, ax = plots.subplots(figsize=(7.2, 0.45 * len(bars) + 1.2))
    start = 0.0
    for i, b in enumerate(bars):
        color = "tab:green" if i == 0 else ("tab:red" if b.seconds >= 0 else "tab:blue")
        ax.barh(i, b.seconds * 1e3, left=start * 1e3, color=color)
        start += b.seconds
    ax.axvline(start * 1e3, color="k", lw=1, ls="--")
    ax.set_yticks(range(len(bars)), [b.name for b in bars], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(f"milliseconds (measured step {start * 1e3:.3g} ms at the dashed line)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, axis="x", alpha=0.3)
    return fig


def waterfall_path(path: str | Path) -> Path:
    """Where --plot PATH puts the waterfall beside the main figure: PATH-waterfall.png."""
    p = Path(path)
    return p.with_name(f"{p.stem}-waterfall{p.suffix}")
