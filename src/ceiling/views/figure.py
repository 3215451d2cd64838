"""A figure of ceiling's own: a matplotlib `Figure` on its own Agg canvas, never made through
pyplot, so drawing one leaves the user's backend and pyplot's figures as they were, and a
notebook shows it as an image whatever backend is active."""

from __future__ import annotations

import io
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

NOTEBOOK_DPI = 100


class CeilingFigure(Figure):
    """A Figure that shows itself as a PNG in a notebook (`_repr_png_`), so `result.figure()`
    shows the picture where pyplot was never imported."""

    def _repr_png_(self) -> bytes:
        return png_bytes(self)


def new_figure(**figure_options: Any) -> CeilingFigure:
    """A new figure (`figsize=...` and the rest as `Figure` takes them) with an Agg canvas."""
    fig = CeilingFigure(**figure_options)
    FigureCanvasAgg(fig)
    return fig


def png_bytes(fig: Figure, dpi: int = NOTEBOOK_DPI) -> bytes:
    """The figure as PNG bytes, trimmed to what is drawn."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", bbox_inches="tight", dpi=dpi)
    return buffer.getvalue()
