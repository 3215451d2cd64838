"""The MFU section's figure: where a training step's time goes against where its FLOPs are."""

from __future__ import annotations


def time_vs_flops_figure(categories: list[tuple[str, float, float]], title: str):
    """Horizontal bars per op category: share of op time beside share of FLOPs.

    categories: (name, time_s, flops). A category with a large time share and a small FLOP
    share is where the step waits on memory or on dispatch, not on arithmetic.
    """
    from ceiling.report import plots

    total_t = sum(t for _, t, _ in categories) or 1.0
    total_f = sum(f for _, _, f in categories) or 1.0
    rows = sorted(categories, key=lambda c: c[1])
    names = [c[0] for c in rows]
    t_share = [100 * c[1] / total_t for c in rows]
    f_share = [100 * c[2] / total_f for c in rows]
    plt = plots.pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 0.45 * len(rows) + 1.4))
    ys = range(len(rows))
    h = 0.38
    ax.barh([y + h / 2 for y in ys], t_share, h, label="share of op time", color="#2456a6")
    ax.barh([y - h / 2 for y in ys], f_share, h, label="share of FLOPs", color="#e69f00")
    for y, t, f in zip(ys, t_share, f_share, strict=True):
        ax.annotate(
            f"{t:.0f} %",
            (t, y + h / 2),
            xytext=(3, 0),
            textcoords="offset points",
            va="center",
            fontsize=7,
        )
        ax.annotate(
            f"{f:.0f} %",
            (f, y - h / 2),
            xytext=(3, 0),
            textcoords="offset points",
            va="center",
            fontsize=7,
        )
    ax.set_yticks(list(ys), names)
    ax.set_xlim(0, 110)
    ax.set_xlabel("% of the step")
    ax.set_title(title)
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig
