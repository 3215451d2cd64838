"""Figure: the latency–throughput curve of a simulated deployment over request rates."""

from __future__ import annotations

from ceiling.render.plots import subplots


def serve_figure(curve, title: str, point=None, point_label: str = "", measured=None):
    """p50 and p99 TTFT and TPOT (ms) against output tokens/s, one point per rate of
    `curve` ((rate, ServeMetrics) pairs); `point` (metrics) the simulated load itself,
    `measured` a server's measured figures, marked."""
    fig, (ax1, ax2) = subplots(1, 2, figsize=(9.0, 3.8))
    points = list(curve or [])
    for ax, key, label in ((ax1, "ttft_s", "TTFT"), (ax2, "tpot_s", "TPOT")):
        if points:
            x = [p.output_tokens_per_s for _, p in points]
            for pct, style in (("p50", "-o"), ("p99", "--s")):
                ax.plot(x, [getattr(getattr(p, key), pct) * 1e3 for _, p in points], style,
                        ms=3, lw=1.2, label=f"{label} {pct}")  # fmt: skip
        if point is not None:
            ax.plot([point.output_tokens_per_s], [getattr(point, key).p50 * 1e3], "k*", ms=9,
                    label=point_label)  # fmt: skip
        if measured is not None:
            ax.plot([measured.output_tokens_per_s], [getattr(measured, key).p50 * 1e3], "rX",
                    ms=8, label="measured server, p50")  # fmt: skip
        ax.set_xlabel("output tokens/s")
        ax.set_ylabel(f"{label} (ms)")
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig
