"""Figure: decode tokens/s against batch size under the memory and compute roofs."""

from __future__ import annotations

from ceiling.report.plots import pyplot


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
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.6, 4.4))
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
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("batch (sequences decoded together)")
    ax.set_ylabel("tokens/s, all sequences")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    return fig
