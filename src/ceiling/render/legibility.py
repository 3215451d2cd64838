"""Figures that read at 100 % zoom on the page: text never below 10 px, legends off the data.

A figure is drawn once, measured from matplotlib's own artist extents, and corrected:
text below the floor is raised to it (allowing for the page shrinking a figure wider than
its column), and a legend over a plotted point moves to an empty corner or outside the
axes. What it then measures is returned for the JSON record, where a test reads it.
"""

from __future__ import annotations

import itertools
from typing import Any

MIN_TEXT_PX = 10.0
COLUMN_PX = 885.0  # report.css: body max-width 62rem of 15 px, less 1.5rem padding each side
PX_PER_PT = 96 / 72  # CSS pixels per typographic point (an SVG in pt shown at 100 %)
PX_PER_INCH = 96
SAMPLES_PER_SEGMENT = 24  # a line is checked along its length, not only at its vertices
INSIDE = ("upper left", "upper right", "lower left", "lower right", "center left",
          "center right", "upper center", "lower center")  # fmt: skip


def make_legible(fig) -> dict[str, Any]:
    """Raise small text, move legends off the data; what the figure measures afterwards."""
    renderer = _draw(fig)
    for _ in range(2):  # raising text widens the figure a little: measure again once
        scale = _page_scale(_width_in(fig, renderer))
        floor_pt = MIN_TEXT_PX / PX_PER_PT / scale
        raised = False
        for t in _texts(fig):
            if t.get_fontsize() < floor_pt - 1e-9:
                t.set_fontsize(floor_pt)
                raised = True
        if not raised:
            break
        renderer = _draw(fig)
    for ax in fig.axes:
        if ax.get_legend() is not None and _legend_hits(ax, renderer):
            _move_legend(ax, renderer)
    # extents are computed when asked for: what moved is measured without drawing again
    return measure(fig, renderer)


def measure(fig, renderer=None) -> dict[str, Any]:
    """Width on the page, smallest text in page pixels, legends over points, hidden markers."""
    renderer = renderer or _draw(fig)
    width_in = _width_in(fig, renderer)
    scale = _page_scale(width_in)
    sizes = [t.get_fontsize() for t in _texts(fig)]
    return {
        "width_px": round(float(width_in) * PX_PER_INCH, 1),
        "page_scale": round(float(scale), 3),
        "min_text_px": round(float(min(sizes) * PX_PER_PT * scale), 2) if sizes else None,
        "legend_overlaps": sum(_legend_hits(ax, renderer) for ax in fig.axes)
        + sum(_figure_legend_hits(fig, leg, renderer) for leg in fig.legends),
        "hidden_markers": sum(_hidden_markers(ax) for ax in fig.axes),
    }


def _draw(fig):
    """Lay the figure out as a draw would (text placed, ticks made), painting nothing."""
    fig.draw_without_rendering()
    return fig.canvas.get_renderer()


def _width_in(fig, renderer) -> float:
    """Width of the saved figure: its tight box plus the padding savefig adds each side."""
    import matplotlib

    pad = matplotlib.rcParams["savefig.pad_inches"]
    return fig.get_tightbbox(renderer).width + 2 * float(pad)


def _page_scale(width_in: float) -> float:
    """How much the page shrinks a figure this wide: img max-width 100 % of the column."""
    width_px = width_in * PX_PER_INCH
    return min(1.0, COLUMN_PX / width_px) if width_px > 0 else 1.0


def _texts(fig):
    from matplotlib.text import Text

    return [
        t
        for t in fig.findobj(Text)
        if t.get_visible() and t.get_text().strip() and t.figure is not None
    ]


def _points(ax) -> list[tuple[float, float]]:
    """Display coordinates of what is plotted: line samples, markers, bar corners."""
    import numpy as np
    from matplotlib.collections import PathCollection
    from matplotlib.patches import Rectangle

    box = ax.get_window_extent()
    pts: list = []
    for line in ax.get_lines():
        if not line.get_visible() or line.get_label() == "_nolegend_hidden":
            continue
        xy = line.get_transform().transform(np.asarray(line.get_xydata(), float))
        if len(xy) > 1 and line.get_linestyle() not in ("None", "", " "):
            t = np.linspace(0, 1, SAMPLES_PER_SEGMENT)[:, None]
            seg = [a + t * (b - a) for a, b in itertools.pairwise(xy)]
            xy = np.vstack([xy, *seg])
        pts.extend(map(tuple, xy))
    for coll in ax.collections:
        if isinstance(coll, PathCollection) and coll.get_visible():
            pts.extend(map(tuple, coll.get_offset_transform().transform(coll.get_offsets())))
    for patch in ax.patches:
        if isinstance(patch, Rectangle) and patch.get_visible():
            e = patch.get_window_extent()
            pts.extend([(e.x0, e.y0), (e.x1, e.y1), (e.x0, e.y1), (e.x1, e.y0)])
    xy = np.asarray(pts, float).reshape(-1, 2)
    xy = xy[np.isfinite(xy).all(axis=1)]
    return [tuple(p) for p in xy[_within(box, xy)]]


def _legend_hits(ax, renderer) -> int:
    """How many plotted points the axes' legend box covers."""
    leg = ax.get_legend()
    if leg is None or not leg.get_visible():
        return 0
    return _inside(leg.get_window_extent(renderer), _points(ax))


def _inside(extent, pts) -> int:
    """How many of the display points lie in the box."""
    import numpy as np

    return int(_within(extent, np.asarray(pts, float).reshape(-1, 2)).sum())


def _within(box, xy):
    x, y = xy[:, 0], xy[:, 1]
    return (x >= box.x0) & (x <= box.x1) & (y >= box.y0) & (y <= box.y1)


def _figure_legend_hits(fig, leg, renderer) -> int:
    return _inside(leg.get_window_extent(renderer), [p for ax in fig.axes for p in _points(ax)])


def short_device_name(name: str, limit: int = 18) -> str:
    """`NVIDIA H100 SXM5 80GB (datasheet, for comparison)` -> `H100 SXM5 80GB`."""
    short = name.split(" (")[0].removeprefix("NVIDIA ").removeprefix("AMD Instinct ")
    short = " ".join(short.split())
    if len(short) <= limit:
        return short
    cut = short[:limit].rsplit(" ", 1)[0]
    return (cut or short[: limit - 1]) + "…"


def _move_legend(ax, renderer) -> None:
    """First an empty corner of the axes; failing that, outside to the right (or below)."""
    leg = ax.get_legend()
    handles, labels = leg.legend_handles, [t.get_text() for t in leg.get_texts()]
    size = leg.get_texts()[0].get_fontsize() if leg.get_texts() else None
    title = leg.get_title().get_text() or None
    for loc in INSIDE:
        # a legend's box is placed when its extent is asked for: no drawing needed
        ax.legend(handles, labels, loc=loc, fontsize=size, title=title)
        if not _legend_hits(ax, renderer):
            return
    right = _is_rightmost(ax)
    kw = (
        {"loc": "upper left", "bbox_to_anchor": (1.02, 1.0)}
        if right
        else {"loc": "upper center", "bbox_to_anchor": (0.5, -0.18)}
    )
    ax.legend(handles, labels, fontsize=size, title=title, borderaxespad=0, **kw)


def _is_rightmost(ax) -> bool:
    x1 = ax.get_position().x1
    return all(other.get_position().x0 < x1 + 1e-6 for other in ax.figure.axes)


def _hidden_markers(ax) -> int:
    """Markers of different series drawn on top of each other (centres within a marker)."""
    import numpy as np

    marks = []
    lines = sorted(ax.get_lines(), key=lambda line: line.get_zorder())  # drawing order
    for i, line in enumerate(lines):
        if line.get_marker() in (None, "None", "", " ") or not line.get_visible():
            continue
        xy = line.get_transform().transform(np.asarray(line.get_xydata(), float))
        r = line.get_markersize() * PX_PER_PT / 2
        filled = str(line.get_markerfacecolor()).lower() != "none" and line.get_marker() in FILLED
        marks.extend((i, x, y, r, filled) for x, y in xy if np.isfinite(x) and np.isfinite(y))
    hidden = 0
    for a in range(len(marks)):
        for b in range(a + 1, len(marks)):
            ia, xa, ya, ra, _ = marks[a]
            ib, xb, yb, rb, covers = marks[b]  # drawn later: on top
            near = (xa - xb) ** 2 + (ya - yb) ** 2 < (0.8 * max(ra, rb)) ** 2
            if ia != ib and near and covers and rb >= 0.8 * ra:
                hidden += 1
    return hidden


FILLED = ("o", "s", "D", "d", "^", "v", "<", ">", "p", "h", "H", "8", "*", "P")
