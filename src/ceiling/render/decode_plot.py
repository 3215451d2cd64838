"""Figure: decode tokens/s against batch size under the memory and compute roofs."""

from __future__ import annotations

from ceiling.render.plots import subplots


def decode_figure(
    curves: dict[str, list[float]],
    title: str,
    crossover_batch: int | None,
    rows: tuple[list[int], list[float]] | None = None,
    measured: tuple[list[int], list[float]] | None = None,
    memory_label: str = "memory roof (bytes / bandwidth)",
):
    """Log-log tokens/s (all sequences) vs batch: both roofs, the ceiling, the crossover.

    `curves` holds "batch", "memory", "compute", "ceiling" lists (tokens/s at each batch);
    `rows` the tabulated ceilings, `measured` measured points, both (batches, tokens/s).
    """
    fig, ax = subplots(figsize=(6.6, 4.4))
    b = curves["batch"]
    # The ceiling underneath as a wide light band, the two roofs drawn over it.
    ax.plot(b, curves["ceiling"], lw=6, color="0.8", solid_capstyle="round", label="ceiling")
    if curves.get("memory"):
        ax.plot(b, curves["memory"], ls="--", lw=1.4, color="tab:blue", label=memory_label)
    ax.plot(
        b, curves["compute"], ls="--", lw=1.4, color="tab:red", label="compute roof (FLOPs / peak)"
    )
    if crossover_batch is not None and b[0] <= crossover_batch <= b[-1]:
        ax.axvline(crossover_batch, color="0.4", ls=":", lw=1)
        ax.text(
            0.98,
            0.04,
            f"compute-bound from batch {crossover_batch}",
            transform=ax.transAxes,
            ha="right",
            fontsize=8,
            color="0.3",
        )
    elif crossover_batch is None:
        ax.text(
            0.98,
            0.04,
            "memory-bound at every batch:\nthe KV cache grows with the batch",
            transform=ax.transAxes,
            ha="right",
            fontsize=8,
            color="0.3",
        )
    if rows:
        ax.plot(rows[0], rows[1], "o", ms=4, color="black", label="ceiling at the batches asked")
    if measured:
        ax.plot(measured[0], measured[1], "s", ms=5, color="tab:green", label="measured")
    _axes(ax, title)
    ax.legend(fontsize=8, loc="upper left")
    return fig


def _axes(ax, title: str) -> None:
    """Both decode figures: log batch against log tokens/s."""
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("batch (sequences decoded together)")
    ax.set_ylabel("tokens/s, all sequences")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)


def three_roofs_figure(
    batches: list[int],
    roofs: dict[str, list[float | None]],
    expected: list[float],
    measured: list[float],
    labels: list[str],
    title: str,
):
    """Measured decode against its three roofs at the batches measured, each point labelled
    with the roof that holds it (the same classification the table shows)."""
    fig, ax = subplots(figsize=(6.6, 4.2))
    styles = {"memory": "tab:blue", "compute": "tab:red", "overhead": "tab:purple"}
    for name, values in roofs.items():
        pts = [(b, v) for b, v in zip(batches, values, strict=True) if v]
        if pts:
            color = next((c for k, c in styles.items() if name.startswith(k)), "0.4")
            ax.plot(*zip(*pts, strict=True), ls="--", lw=1.4, color=color, label=name)
    ax.plot(batches, expected, lw=5, color="0.8", solid_capstyle="round", zorder=1,
            label="expected (modelled)")  # fmt: skip
    ax.plot(batches, measured, "s", ms=6, color="tab:green", label="measured", zorder=3)
    for b, m, lab in zip(batches, measured, labels, strict=True):
        ax.annotate(lab, (b, m), textcoords="offset points", xytext=(7, 4), ha="left",
                    fontsize=8, color="tab:green")  # fmt: skip
    ax.set_xlim(min(batches) / 1.4, max(batches) * 2.2)  # room for the labels on the right
    _axes(ax, title)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    return fig
