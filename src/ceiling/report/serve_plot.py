"""Figure: the latency–throughput curve of a simulated deployment over request rates."""

from __future__ import annotations

from ceiling.report.plots import pyplot


def serve_figure(result):
    """p50 and p99 TTFT and TPOT (ms) against output tokens/s, one point per rate; the
    simulated load itself and a measured server's figures marked."""
    plt = pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9.0, 3.8))
    points = list(result.curve or [])
    m = result.metrics
    for ax, key, label in ((ax1, "ttft_s", "TTFT"), (ax2, "tpot_s", "TPOT")):
        if points:
            x = [p.output_tokens_per_s for _, p in points]
            for pct, style in (("p50", "-o"), ("p99", "--s")):
                ax.plot(x, [getattr(getattr(p, key), pct) * 1e3 for _, p in points], style,
                        ms=3, lw=1.2, label=f"{label} {pct}")  # fmt: skip
        ax.plot([m.output_tokens_per_s], [getattr(m, key).p50 * 1e3], "k*", ms=9,
                label=f"this load ({result.inputs['load']})")  # fmt: skip
        if result.measured is not None:
            meas = result.measured
            ax.plot([meas.output_tokens_per_s], [getattr(meas, key).p50 * 1e3], "rX", ms=8,
                    label="measured server, p50")  # fmt: skip
        ax.set_xlabel("output tokens/s")
        ax.set_ylabel(f"{label} (ms)")
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    lay = result.inputs["layout"]
    fig.suptitle(
        f"{result.model.name} on {lay['gpus']} × {result.device.name} "
        f"(TP {lay['tp']}, PP {lay['pp']}, {lay['replicas']} replicas): simulated",
        fontsize=9,
    )
    fig.tight_layout()
    return fig
