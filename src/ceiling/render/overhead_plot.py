"""The overhead section's figures: loop vs vectorized, and the GPU-vs-CPU crossover."""

from __future__ import annotations


def loop_vs_vectorized_figure(bars: list[tuple[str, float]], elements: int):
    """Horizontal bars, log scale: seconds to square `elements` floats each way."""
    from ceiling.render import plots

    fig, ax = plots.subplots(figsize=(6.4, 0.5 * len(bars) + 1.3))
    names = [b[0] for b in bars]
    secs = [b[1] for b in bars]
    colors = ["#b3261e" if "loop" in n.lower() else "#2456a6" for n in names]
    ax.barh(range(len(bars)), secs, color=colors)
    for i, s in enumerate(secs):
        ax.annotate(
            _fmt(s), (s, i), xytext=(4, 0), textcoords="offset points", va="center", fontsize=8
        )
    ax.set_yticks(range(len(bars)), names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlim(min(secs) / 3, max(secs) * 8)
    ax.set_xlabel("seconds (log scale)")
    ax.set_title(f"Square {elements:,} float32 numbers")
    ax.set_axisbelow(True)
    ax.grid(True, axis="x", which="major", alpha=0.3)
    fig.tight_layout()
    return fig


def crossover_figure(crossovers: list[dict]):
    """Time per op against size on CPU and GPU (with and without copies), one panel per op."""
    from ceiling.render import plots

    fig, axes = plots.subplots(
        1, len(crossovers), figsize=(4.2 * len(crossovers), 3.6), squeeze=False
    )
    for ax, c in zip(axes[0], crossovers, strict=True):
        ax.plot(c["sizes"], c["cpu_s"], "o-", ms=3, label="CPU")
        ax.plot(c["sizes"], c["gpu_s"], "s-", ms=3, label="GPU, data on the GPU")
        ax.plot(c["sizes"], c["gpu_with_transfer_s"], "^--", ms=3, label="GPU, copies counted")
        if c.get("crossover"):
            ax.axvline(c["crossover"], color="0.4", ls=":", lw=1)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("size n")
        ax.set_ylabel("seconds per op")
        ax.set_title(f"{c['op']}: where the GPU starts to pay")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def _fmt(s: float) -> str:
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    return f"{s * 1e6:.3g} µs"
