"""Figures. matplotlib is imported lazily; every figure is drawn on a `Figure` object of its
own (`ceiling.views.figure`), never through pyplot, so the user's backend and pyplot figures
are left as they were."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from ceiling.records import check_writable

FIGURE_SUFFIXES = (".png", ".svg")


def check_figure_path(path: str | Path) -> Path:
    """One line now, before any work, if a figure could not be written at `path` later."""
    return check_writable(path, FIGURE_SUFFIXES, create_folders=False)


# Figures that could not be written although their path was checked before the run (the
# disk filled up, the folder went away). The result they illustrate is still shown; the
# command line reports these afterwards and exits 2.
_UNWRITTEN: list[str] = []


def take_unwritten() -> list[str]:
    """Messages for figures not written since the last call, and forget them."""
    messages = list(_UNWRITTEN)
    _UNWRITTEN.clear()
    return messages


def subplots(
    nrows: int = 1, ncols: int = 1, *, figsize: tuple[float, float] | None = None, **grid: Any
):
    """(figure, axes) as `plt.subplots` gives them, on a new figure of ceiling's own."""
    from ceiling.views.figure import new_figure

    fig = new_figure(figsize=figsize)
    return fig, fig.subplots(nrows, ncols, **grid)


def save(fig, path: str | Path) -> Path:
    """Save a figure; the format follows the file's extension."""
    from ceiling.records import replace_whole

    p = Path(path)
    # drawn in memory, then written whole: a full disk leaves no empty or half figure
    buffer = io.BytesIO()
    kind = p.suffix.lstrip(".").lower() or None
    try:
        fig.savefig(buffer, format=kind, bbox_inches="tight", dpi=120)
        replace_whole(buffer.getvalue(), p)
    except OSError as exc:
        _UNWRITTEN.append(f"figure not written to {p}: {exc.strerror or exc}")
    return p


def speedup_figure(
    curves: dict[str, tuple[list[float], list[float]]],
    ceilings: dict[str, float] | None = None,
    title: str = "Speedup",
    points: tuple[list[float], list[float]] | None = None,
):
    """Speedup vs N on log axes, one curve per label, dashed horizontal ceilings, ideal S = N."""
    fig, ax = subplots(figsize=(6.4, 4.2))
    all_n = [n for ns, _ in curves.values() for n in ns]
    lo, hi = min(all_n), max(all_n)
    ax.plot([lo, hi], [lo, hi], color="0.75", lw=1, ls=":", label="ideal (S = N)")
    for label, (ns, ss) in curves.items():
        line = ax.plot(ns, ss, lw=2, label=label)[0]
        if ceilings and label in ceilings and ceilings[label] != float("inf"):
            ax.axhline(ceilings[label], color=line.get_color(), ls="--", lw=1)
            ax.annotate(
                f"ceiling {ceilings[label]:.3g}×",
                (lo, ceilings[label]),
                textcoords="offset points",
                xytext=(2, 3),
                color=line.get_color(),
                fontsize=8,
            )
    if points:
        ax.plot(points[0], points[1], "ko", ms=4, label="measured")
    speedup_axes(ax, title)
    ax.legend(fontsize=8)
    return fig


def speedup_axes(ax, title: str) -> None:
    """Speedup against workers, both on log₂ scales: the axes every scaling figure shares."""
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("workers N")
    ax.set_ylabel("speedup S(N) (×)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
