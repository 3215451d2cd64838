"""The scaling figure: measured speedup with the fitted laws and the prediction band (left),
Karp–Flatt's measured serial fraction per N (right)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ceiling.model import scaling
from ceiling.render import plots


def _grid(lo: float, hi: float) -> list[float]:
    out, n = [], lo
    while n < hi:
        out.append(n)
        n *= 2**0.125
    out.append(hi)
    return out


def scaling_figure(summary: dict[str, Any], title: str = "Measured scaling"):
    """`summary` has `points` (n, speedup, karp_flatt) and `fit` (as summarize_run gives)."""
    fig, (ax, axk) = plots.subplots(1, 2, figsize=(10.5, 4.2), gridspec_kw={"width_ratios": [3, 2]})
    points, fit = summary["points"], summary["fit"]
    ns = [p["n"] for p in points]
    preds = fit.get("predictions") or []
    hi = max(ns + [p["n"] for p in preds])
    lo = min(ns)
    grid = _grid(lo, hi)
    base = fit["baseline_throughput"]
    ax.plot([lo, hi], [lo, hi], color="0.75", lw=1, ls=":", label="ideal (S = N)")
    a, g, u = fit.get("amdahl"), fit.get("gustafson"), fit.get("usl")
    curves = []
    if summary.get("mode", "strong") == "weak" and g:
        curves.append(
            (
                f"Gustafson α = {g['alpha']:.3f}",
                [float(scaling.gustafson_throughput(x, g["lam"], g["alpha"])) / base for x in grid],
            )
        )
    if a:
        curves.append(
            (
                f"Amdahl p = {a['p']:.3f}",
                [float(scaling.amdahl_throughput(x, a["lam"], 1 - a["p"])) / base for x in grid],
            )
        )
    if u:
        curves.append(
            (
                f"USL σ = {u['sigma']:.3g}, κ = {u['kappa']:.2g}",
                [
                    float(scaling.usl_throughput(x, u["lam"], u["sigma"], u["kappa"])) / base
                    for x in grid
                ],
            )
        )
    for label, ys in curves:
        ax.plot(grid, ys, lw=1.8, label=label)
    if preds:
        pn = [p["n"] for p in preds]
        if all(p.get("speedup_low") is not None for p in preds):
            ax.fill_between(
                pn,
                [max(p["speedup_low"], 1e-3) for p in preds],  # log axis: no zero
                [p["speedup_high"] for p in preds],
                color="C3",
                alpha=0.15,
                label=f"95 % prediction interval ({preds[0]['law']})",
            )
        ax.plot(
            pn,
            [p["speedup"] for p in preds],
            "C3x",
            label="predicted (no band: exact fit)"
            if preds[0].get("speedup_low") is None
            else "predicted",
        )
    if u and u.get("n_star") and lo <= u["n_star"] <= hi:
        ax.axvline(u["n_star"], color="0.5", ls="--", lw=1)
        ax.annotate(f"N* ≈ {u['n_star']:.3g}", (u["n_star"], lo), fontsize=8, color="0.4")
    ax.plot(ns, [p["speedup"] for p in points], "ko", ms=4, label="measured")
    plots.speedup_axes(ax, title)
    ax.legend(fontsize=7)

    kf = [(p["n"], p["karp_flatt"]) for p in points if p.get("karp_flatt") is not None]
    if kf:
        axk.plot([k for k, _ in kf], [e for _, e in kf], "ko-", ms=4, label="measured e(N)")
    if u:
        kn = [k for k, _ in kf] or ns
        axk.plot(kn, [u["sigma"] + u["kappa"] * k for k in kn], "C2--", lw=1, label="USL: σ + κN")
    axk.set_ylim(bottom=min(0.0, *(e for _, e in kf)) if kf else 0.0)
    axk.set_xscale("log", base=2)
    axk.set_xlabel("workers N")
    axk.set_ylabel("Karp–Flatt serial fraction e(N)")
    axk.set_title("flat: serial part; rising: overhead grows with N", fontsize=9)
    axk.grid(True, which="both", alpha=0.3)
    axk.legend(fontsize=7)
    fig.tight_layout()
    return fig


def save_scaling_figure(summary: dict[str, Any], path: str | Path, title: str = "Measured scaling"):
    plots.check_figure_path(path)
    return plots.save(scaling_figure(summary, title), path)
