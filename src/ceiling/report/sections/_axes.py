"""Log axes read as plain numbers (1, 2, 4 … 4,096) rather than powers (2⁰ … 2¹²)."""

from __future__ import annotations


def plain_log_ticks(ax, axis: str = "both") -> None:
    """Label an axis's log-scale ticks with the numbers themselves; linear axes are left alone."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    fmt = FuncFormatter(_plain)
    for name in ("x", "y") if axis == "both" else (axis,):
        a = ax.xaxis if name == "x" else ax.yaxis
        if a.get_scale() != "log":
            continue
        a.set_major_formatter(fmt)
        a.set_minor_formatter(NullFormatter())


def _plain(value: float, _pos=None) -> str:
    if value >= 1:
        return f"{value:,.0f}"
    return f"{value:g}"
