"""The machine card's figure: measured ceilings beside the theoretical or datasheet ones."""

from __future__ import annotations

from ceiling.render.legibility import short_device_name
from ceiling.vocabulary import DTYPES


def ceilings_figure(devices: list[dict]):
    """Two panels: matmul FLOP/s per dtype, and memory bandwidth; None when there is nothing.

    Each device dict has name, measured / reference (dtype -> FLOP/s), bandwidth and
    reference_bandwidth (bytes/s or None).
    """
    import matplotlib

    from ceiling.render import plots

    dtypes = [
        d for d in DTYPES if any(d in dev["measured"] or d in dev["reference"] for dev in devices)
    ]
    if not dtypes:
        return None
    has_bw = any(dev["bandwidth"] or dev["reference_bandwidth"] for dev in devices)
    fig, axes = plots.subplots(
        1,
        2 if has_bw else 1,
        figsize=(8.4 if has_bw else 6.0, 3.6),
        gridspec_kw={"width_ratios": [3, 1]} if has_bw else None,
    )
    ax = axes[0] if has_bw else axes
    colors = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    _compute_panel(ax, devices, dtypes, colors)
    # below the axes: inside, the legend would cover the tallest bars
    fig.legend(
        *ax.get_legend_handles_labels(), fontsize=8, loc="lower center", ncol=2, frameon=False
    )
    if has_bw:
        _bandwidth_panel(axes[1], devices, colors)
    fig.tight_layout(rect=(0, 0.1 + 0.04 * (len(devices) // 3), 1, 1))
    return fig


def _compute_panel(ax, devices: list[dict], dtypes: list[str], colors: list[str]) -> None:
    """Per dtype, each device's measured rate (filled) beside its reference (hatched)."""
    width = 0.8 / (2 * len(devices))
    for i, dev in enumerate(devices):
        color = colors[i % len(colors)]
        for j, (kind, values) in enumerate(
            (("measured", dev["measured"]), ("reference", dev["reference"]))
        ):
            xs, ys = [], []
            for k, dt in enumerate(dtypes):
                if values.get(dt):
                    xs.append(k - 0.4 + width * (2 * i + j + 0.5))
                    ys.append(values[dt] / 1e12)
            if not xs:
                continue
            label = _label(short_device_name(dev["name"]), kind, dev.get("kind"))
            ax.bar(
                xs,
                ys,
                width,
                color=color if kind == "measured" else "white",
                edgecolor=color,
                hatch=None if kind == "measured" else "///",
                label=label,
            )
    ax.set_xticks(range(len(dtypes)), dtypes)
    ax.set_yscale("log")
    ax.set_axisbelow(True)  # grid lines behind the bars, not across them
    ax.set_ylabel("matmul TFLOP/s (dense)")
    ax.set_title("Compute ceiling per dtype")
    ax.grid(True, axis="y", which="both", alpha=0.3)


def _bandwidth_panel(bx, devices: list[dict], colors: list[str]) -> None:
    """Each device's measured memory bandwidth (filled) beside its reference (hatched)."""
    for i, dev in enumerate(devices):
        color = colors[i % len(colors)]
        if dev["bandwidth"]:
            bx.bar(2 * i, dev["bandwidth"] / 1e9, 0.8, color=color)
        if dev["reference_bandwidth"]:
            bx.bar(
                2 * i + 1,
                dev["reference_bandwidth"] / 1e9,
                0.8,
                color="white",
                edgecolor=color,
                hatch="///",
            )
    bx.set_xticks(
        [2 * i + 0.5 for i in range(len(devices))],
        [short_device_name(d["name"], 10) for d in devices],
        fontsize=8,
        rotation=20,
        ha="right",
    )
    bx.set_yscale("log")
    bx.set_axisbelow(True)
    bx.set_ylabel("GB/s (10⁹ bytes/s)")
    bx.set_title("Memory bandwidth")
    bx.grid(True, axis="y", which="both", alpha=0.3)


def _label(name: str, kind: str, device_kind: str | None = None) -> str:
    if kind == "measured":
        return f"{name}: measured"
    if device_kind == "cpu":
        return f"{name}: theoretical"
    if device_kind == "cuda":
        return f"{name}: datasheet"
    return f"{name}: theoretical / datasheet"
