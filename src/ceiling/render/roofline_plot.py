"""The roofline figure: roofs (measured and datasheet) and ops placed by intensity."""

from __future__ import annotations

from dataclasses import dataclass

from ceiling.render.plots import subplots


@dataclass(frozen=True)
class Roof:
    label: str
    peak_flops_per_s: float
    bandwidth_bytes_per_s: float | None  # None: only the compute roof is known
    style: str = "-"


@dataclass(frozen=True)
class OpPoint:
    label: str
    intensity: float  # FLOP/byte
    flops_per_s: float  # attainable (predicted) or measured
    measured: bool = False


def roofline_figure(roofs: list[Roof], points: list[OpPoint], title: str = "Roofline"):
    """Log-log FLOP/s vs FLOP/byte: min(peak, I x bandwidth) per roof, ridge points marked."""
    fig, ax = subplots(figsize=(7.0, 4.6))
    intensities = [p.intensity for p in points if p.intensity > 0]
    ridges = [
        r.peak_flops_per_s / r.bandwidth_bytes_per_s for r in roofs if r.bandwidth_bytes_per_s
    ]
    lo = min([*intensities, *ridges, 1.0]) / 4
    hi = max([*intensities, *ridges, 1.0]) * 4
    grid = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    for roof in roofs:
        if roof.bandwidth_bytes_per_s:
            ys = [min(roof.peak_flops_per_s, x * roof.bandwidth_bytes_per_s) for x in grid]
            line = ax.plot(grid, ys, roof.style, lw=2, label=roof.label)[0]
            ridge = roof.peak_flops_per_s / roof.bandwidth_bytes_per_s
            ax.axvline(ridge, color=line.get_color(), ls=":", lw=0.8)
            ax.annotate(
                f"ridge {ridge:.3g} FLOP/B",
                (ridge, roof.peak_flops_per_s),
                textcoords="offset points",
                xytext=(4, -12),
                fontsize=8,
                color=line.get_color(),
            )
        else:
            ax.plot([lo, hi], [roof.peak_flops_per_s] * 2, roof.style, lw=1.5, label=roof.label)
    # measured: a hollow ring drawn first and larger, so a cross on the same spot (the
    # measurement meeting the prediction) stays visible inside it
    for p in sorted(points, key=lambda p: not p.measured):
        style = {"ms": 11, "mfc": "none", "mew": 1.5} if p.measured else {"ms": 7}
        ax.plot([p.intensity], [p.flops_per_s], "o" if p.measured else "x",
                color="k" if p.measured else "C3", **style)  # fmt: skip
    for i, p in enumerate(points):
        ax.annotate(
            p.label,
            (p.intensity, p.flops_per_s),
            textcoords="offset points",
            xytext=(5, 4 - 10 * (i % 3)),
            fontsize=8,
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("FLOP/s (multiply-add = 2)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.plot([], [], "x", color="C3", label="op, predicted")
    if any(p.measured for p in points):
        ax.plot([], [], "o", color="k", mfc="none", mew=1.5, label="op, measured")
    ax.legend(fontsize=8, loc="lower right")
    return fig
