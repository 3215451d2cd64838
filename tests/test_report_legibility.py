"""Figure legibility, from matplotlib's own artist extents: small text is raised to 10 px on
the page, a legend over plotted points moves off them, and the measurement says so."""

from __future__ import annotations

import pytest

from ceiling.render import legibility, plots


@pytest.fixture
def crowded():
    """A legend in the corner the data fill, 6 pt ticks, two filled markers on one spot."""
    fig, ax = plots.subplots(figsize=(5, 3.5))
    xs = [i / 10 for i in range(11)]
    ax.plot(xs, [1.0] * 11, "o-", label="flat along the top")
    ax.plot([0.5], [0.5], "s", ms=8, label="under")
    ax.plot([0.5], [0.5], "s", ms=8, label="over")
    ax.set_ylim(0, 1.1)
    ax.tick_params(labelsize=6)
    ax.legend(loc="upper center", fontsize=6)
    return fig


def test_measure_sees_small_text_a_legend_on_data_and_hidden_markers(crowded):
    found = legibility.measure(crowded)
    assert found["min_text_px"] == pytest.approx(6 * 96 / 72)
    assert found["legend_overlaps"] > 0
    assert found["hidden_markers"] == 1


def test_make_legible_raises_text_and_moves_the_legend(crowded):
    found = legibility.make_legible(crowded)
    assert found["min_text_px"] >= legibility.MIN_TEXT_PX
    assert found["legend_overlaps"] == 0
    assert found == legibility.measure(crowded)  # what it reports is what the figure is


def test_a_figure_wider_than_the_column_gets_larger_text():
    fig, ax = plots.subplots(figsize=(14, 3))  # shown shrunk to the page's column
    ax.plot([1, 2], [1, 2])
    ax.tick_params(labelsize=8)
    found = legibility.make_legible(fig)
    assert found["page_scale"] < 1
    assert found["min_text_px"] >= legibility.MIN_TEXT_PX  # on the page, after shrinking


def test_a_hollow_ring_around_a_cross_hides_nothing():
    fig, ax = plots.subplots()
    ax.plot([1], [1], "o", ms=11, mfc="none")
    ax.plot([1], [1], "x", ms=7)
    assert legibility.measure(fig)["hidden_markers"] == 0


@pytest.mark.parametrize(
    ("name", "short"),
    [
        ("NVIDIA H100 SXM5 80GB (datasheet, for comparison)", "H100 SXM5 80GB"),
        ("AMD EPYC (measured)", "AMD EPYC"),
        ("Intel(R) Xeon(R) Platinum 8480+ CPU @ 2.0GHz", "Intel(R) Xeon(R)…"),
    ],
)
def test_long_device_names_are_shortened(name, short):
    assert legibility.short_device_name(name) == short
