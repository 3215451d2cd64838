"""Scaling results for people and scripts: fit a run, explain it, render the tables.

`summarize_run` turns the raw samples of a scaling run (ceiling.measure.scale) into points,
fits and plain-language notes (concurrency vs parallelism, load imbalance,
oversubscription, the known truth of the synthetic workload); `render_fit` prints a
ScalingFit's tables. The same dict is the `--json` output.
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import Any

from ceiling.model.scaling import SUPERLINEAR_EFFICIENCY, ScalingFit, fit_scaling
from ceiling.units import format_percent, format_time

PHASES = ("serial_s", "compute_s", "wait_s", "comm_s", "optimizer_s")
# Below this speedup at the largest N, threads are said to show no real speedup.
NO_SPEEDUP = 1.3


def fit_dict(fit: ScalingFit) -> dict[str, Any]:
    return {
        "amdahl": dataclasses.asdict(fit.amdahl) if fit.amdahl else None,
        "gustafson": dataclasses.asdict(fit.gustafson) if fit.gustafson else None,
        "usl": dataclasses.asdict(fit.usl) if fit.usl else None,
        "best": fit.best,
        "verdict": fit.verdict,
        "karp_flatt_trend": fit.karp_flatt_trend,
        "baseline_throughput": fit.baseline_throughput,
        "predictions": [dataclasses.asdict(p) for p in fit.predictions],
    }


def timed_quantity(raw: dict[str, Any]) -> str:
    """ "work" when the fitted time is the work's critical path (the synthetic workload, whose
    content is known, so the fit can be checked against the truth; the machine's
    synchronisation is measured apart), else "step" (what the job waits for per step)."""
    from ceiling.measure.scale_workloads import FITS_WORK_TIME

    runs = raw["runs"]
    if raw["workload"] in FITS_WORK_TIME and all(r.get("work_times_s") for r in runs):
        return "work"
    return "step"


def _fit(runs: list[dict], key: str, mode: str, predict_ns) -> ScalingFit | None:
    ns = [r["n"] for r in runs for _ in r[key]]
    times = [t for r in runs for t in r[key]]
    if len(set(ns)) < 2:  # one worker count: per-step times and phases, nothing to fit
        return None
    return fit_scaling(ns, times_s=times, mode=mode, predict_ns=predict_ns)


def summarize_run(raw: dict[str, Any], predict_ns: list[float] | None = None) -> dict[str, Any]:
    runs = raw["runs"]
    timed = timed_quantity(raw)
    key = "work_times_s" if timed == "work" else "step_times_s"
    fit = _fit(runs, key, raw["mode"], predict_ns)
    with_sync = _fit(runs, "step_times_s", raw["mode"], predict_ns) if timed == "work" else None
    by_n = {p.n: p for p in fit.points} if fit else {}
    points = []
    for r in runs:
        p = by_n.get(float(r["n"]))
        phases = r["phases_per_rank_s"]
        step_time = statistics.median(r["step_times_s"])
        row: dict[str, Any] = {
            "n": r["n"],
            "time_s": p.time_s if p else statistics.median(r[key]),
            "speedup": p.speedup if p else None,
            "efficiency": p.efficiency if p else None,
            "karp_flatt": p.karp_flatt if p else None,
            "throughput_per_s": p.throughput if p else None,
            "step_time_s": step_time,
            "step_times_s": r["step_times_s"],
        }
        if r.get("work_times_s"):
            row["work_time_s"] = statistics.median(r["work_times_s"])
            row["work_times_s"] = r["work_times_s"]
        if timed == "work":
            # what synchronising costs beyond the slowest worker's own work, per step
            row["sync_s"] = statistics.median(
                max(s - w, 0.0) for s, w in zip(r["step_times_s"], r["work_times_s"], strict=True)
            )
        for k in PHASES:
            if k in phases:
                row[k] = statistics.fmean(phases[k])
        if "wait_s" in phases and step_time:
            row["wait_s_per_rank"] = phases["wait_s"]
            row["imbalance_loss"] = statistics.fmean(phases["wait_s"]) / step_time
        row["oversubscribed"] = r["n"] in raw.get("oversubscribed_ns", [])
        _flag_noise(row, runs[0], r, key)
        points.append(row)
    notes = _notes(raw, fit, points, with_sync) + noise_notes(points)
    out = {k: v for k, v in raw.items() if k not in ("runs", "oversubscribed_ns")}
    out.update(
        timed=timed,
        timed_note=TIMED_NOTES[timed],
        points=points,
        fit=fit_dict(fit) if fit else None,
        fit_with_sync=fit_dict(with_sync) if with_sync else None,
        notes=notes,
        warnings=list(fit.warnings)
        if fit
        else ["one worker count: nothing to fit; give several, e.g. --workers 1,2,4"],
    )
    return out


def _flag_noise(row: dict[str, Any], base: dict, run: dict, key: str) -> None:
    """Mark a speedup no `n` workers can give (above n, the measurement-noise allowance of
    `model.scaling` aside) as noise, with the range of speedups the steps' spread allows:
    the slowest baseline step over the fastest step at n, and the other way round."""
    if row["speedup"] is None or run is base or base["n"] != 1:
        return
    t1, tn = base[key], run[key]
    row["speedup_range"] = [min(t1) / max(tn), max(t1) / min(tn)]
    row["noise"] = row["speedup"] > SUPERLINEAR_EFFICIENCY * run["n"]


def noise_mark(point: dict[str, Any]) -> str:
    """' (noise: 2.1–9.8× over the steps)' for a point flagged as noise, else ''."""
    if not point.get("noise"):
        return ""
    lo, hi = point["speedup_range"]
    return f" (noise: {lo:.3g}–{hi:.3g}× over the steps)"


def noise_notes(points: list[dict[str, Any]]) -> list[str]:
    """One sentence per speedup above its worker count: what it is and what to do."""
    return [
        f"N = {p['n']}: a speedup of {p['speedup']:.2f}× (efficiency "
        f"{format_percent(p['efficiency'])}) is more than {p['n']} workers can give: timing "
        f"noise, the steps spread from {p['speedup_range'][0]:.3g}× to "
        f"{p['speedup_range'][1]:.3g}×; it is kept out of the verdict — measure again on an "
        "idle machine, or with more steps"
        for p in points
        if p.get("noise")
    ]


TIMED_NOTES = {
    "work": "time_s is the work's critical path: the slowest worker's serial + parallel part "
    "per step, median over steps; the barrier and the collective that end each step are "
    "measured apart (sync_s, step_time_s) and fitted apart (fit_with_sync)",
    "step": "time_s is the step: from the common start until the collective that combines the "
    "workers' results has ended (the median worker's clock), median over steps",
}


def _notes(
    raw: dict[str, Any], fit: ScalingFit | None, points: list[dict], with_sync: ScalingFit | None
) -> list[str]:
    """What the run says beyond its figures: the backend's kind of parallelism, the cores
    oversubscribed, the load imbalance, the known truth beside the fit, DDP's all-reduce."""
    notes = [_backend_note(raw, points[-1])]
    notes += _oversubscribed_notes(raw, points) + _imbalance_notes(raw, points)
    notes += _truth_notes(raw, fit, points, with_sync)
    truth = raw.get("truth") or {}
    if raw["workload"] == "ddp" and "grad_bytes_per_step" in truth:
        notes.append(
            f"ddp: each step all-reduces {truth['grad_bytes_per_step'] / 1e6:.3g} MB of "
            "gradients after the backward pass (no overlap, so compute_s and comm_s are "
            "separate; DDP would hide part of comm_s behind the backward pass)."
        )
    return notes


def _backend_note(raw: dict[str, Any], top: dict) -> str:
    """Threads or processes: concurrency or parallelism, as the workload meets the GIL."""
    workload = raw["workload"]
    if raw["backend"] != "threads" or top["speedup"] is None:
        return (
            "processes: one interpreter each (no shared GIL), combined with torch.distributed "
            f"({raw.get('backend_engine', 'gloo')}) — true parallelism, bounded by the cores "
            f"or devices ({raw.get('environment', {}).get('cpu_cores', '?')} cores here)."
        )
    s = top["speedup"]
    if workload == "python":
        return _python_threads_note(s, top["n"])
    if workload == "synthetic":
        return (
            "threads: sleeping releases the GIL, so threads overlap their waits — "
            "concurrency is enough for work that waits (I/O, sleeps); it says nothing "
            "about compute."
        )
    if s >= NO_SPEEDUP:
        return (
            "threads: torch releases the GIL inside its kernels, so threads run them in "
            f"parallel (measured {s:.2f}× at N = {top['n']}) — parallelism without "
            "processes, as long as the time is spent inside kernels."
        )
    return (
        "threads: torch releases the GIL inside its kernels, so threads can run them in "
        f"parallel, yet only {s:.2f}× was measured at N = {top['n']}: the cores are "
        "busy (shared with other work, or oversubscribed), or the steps are too short "
        "for the kernels to dominate."
    )


def _python_threads_note(s: float, n: int) -> str:
    if not _gil_enabled():
        return (
            f"threads: this Python runs without a GIL, so its threads can run Python "
            f"code in parallel (measured {s:.2f}× at N = {n})."
        )
    seen = (
        "no real speedup, as expected"
        if s < NO_SPEEDUP
        else "the gain is timing noise: with a GIL two threads cannot run Python "
        "at the same instant"
    )
    return (
        f"threads: {n} Python threads in one process share one interpreter "
        "lock (GIL), so pure-Python work runs one thread at a time — concurrency, "
        f"not parallelism. Measured speedup at N = {n}: {s:.2f}× ({seen}). "
        "Run it with --backend processes to see parallelism."
    )


def _oversubscribed_notes(raw: dict[str, Any], points: list[dict]) -> list[str]:
    over = [p["n"] for p in points if p.get("oversubscribed")]
    if not over:
        return []
    cores = raw.get("environment", {}).get("cpu_cores", "?")
    tpw = raw.get("threads_per_worker", 1)
    sleeps = " (the synthetic workload sleeps, so this does not distort it)" * (
        raw["workload"] == "synthetic"
    )
    return [
        f"oversubscribed at N = {', '.join(str(n) for n in over)}: workers × "
        f"{tpw} thread(s) exceed the {cores} cores, so workers take turns on the cores"
        f"{sleeps}."
    ]


def _imbalance_notes(raw: dict[str, Any], points: list[dict]) -> list[str]:
    if not raw.get("imbalance"):
        return []
    losses = [
        f"N = {p['n']}: others wait {format_time(_others_wait(p))} per step, "
        f"{format_percent(p.get('imbalance_loss', 0.0))} of the step"
        for p in points
        if p["n"] > 1
    ]
    return [
        f"load imbalance: the last worker gets {1 + raw['imbalance']:g}× the share; "
        + "; ".join(losses)
        + ". This waiting is efficiency lost to imbalance, separate from the Amdahl share "
        "(the serial part, serial_s)."
    ]


def _truth_notes(
    raw: dict[str, Any], fit: ScalingFit | None, points: list[dict], with_sync: ScalingFit | None
) -> list[str]:
    """The synthetic workload's known serial share beside what the fit found."""
    truth = raw.get("truth") or {}
    if raw["workload"] != "synthetic" or "serial_fraction" not in truth or fit is None:
        return []
    if raw["mode"] == "strong" and fit.amdahl is not None:
        se = f" ± {fit.amdahl.p_se:.3f}" if fit.amdahl.p_se is not None else ""
        text = (
            f"truth: parallel fraction p = {truth['parallel_fraction']:g}; fitted Amdahl "
            f"p = {fit.amdahl.p:.3f}{se} on the work (the slowest worker's sleeps"
            + (", the straggler included" if raw.get("imbalance") else "")
            + ")."
        )
        return [text + _sync_sentence(truth, points, with_sync)]
    if raw["mode"] == "weak" and fit.gustafson is not None:
        a, top_n = truth["serial_fraction"], points[-1]["n"]
        return [
            "truth (weak): every worker repeats the whole N = 1 step, its serial part "
            "included, so the scaled speedup N·T(1)/T(N) should stay N: Gustafson α = 0 "
            f"expected, fitted α = {fit.gustafson.alpha:.3f}. Counted once instead of N "
            f"times, the serial part {a:g} is Gustafson's α = {a:g}: scaled speedup "
            f"N − α(N − 1) = {top_n - a * (top_n - 1):.3g}× at N = {top_n}."
        ]
    return []


def _sync_sentence(truth: dict, points: list[dict], with_sync: ScalingFit | None) -> str:
    """What this machine's synchronisation adds to the known work, in one sentence."""
    top = points[-1]
    if "sync_s" not in top or not top.get("step_time_s"):
        return ""
    what = "barrier"
    if truth.get("comm_bytes_per_step"):
        what += f" and {truth['comm_bytes_per_step'] / 1e6:.3g} MB all-reduce"
    text = (
        f" Synchronisation ({what}) is measured apart: {format_time(top['sync_s'])} per step "
        f"at N = {top['n']} ({format_percent(top['sync_s'] / top['step_time_s'])} of the step)"
    )
    if with_sync is not None and with_sync.amdahl is not None:
        text += f"; with it counted, Amdahl p = {with_sync.amdahl.p:.3f}"
        if with_sync.usl is not None:
            text += f" and USL κ = {with_sync.usl.kappa:.3g}"
    return text + " (fit_with_sync)."


def _gil_enabled() -> bool:
    """Free-threaded builds (3.13t and later) can say so; every other CPython has a GIL."""
    import sys

    check = getattr(sys, "_is_gil_enabled", None)
    return True if check is None else bool(check())


def _others_wait(point: dict) -> float:
    waits = point.get("wait_s_per_rank") or [0.0]
    return statistics.fmean(waits[:-1]) if len(waits) > 1 else waits[0]


# ---------------------------------------------------------------------------- rendering


def table(title: str, columns: list[str], rows: list[list[str]], caption: str | None = None):
    from rich.table import Table

    t = Table(title=title, caption=caption, title_justify="left", caption_justify="left")
    for i, col in enumerate(columns):
        t.add_column(col, justify="left" if i == 0 else "right")
    for r in rows:
        t.add_row(*r)
    return t


def _fmt(v: float | None, spec: str = ".3g") -> str:
    return "—" if v is None else format(v, spec)


def _pm(v: float | None, se: float | None, spec: str = ".4g") -> str:
    if v is None:
        return "—"
    return f"{v:{spec}} ± {se:{spec}}" if se is not None else f"{v:{spec}}"


def fit_tables(fit: dict[str, Any], unit: str = "s", unit_s: float = 1.0) -> list:
    """The laws' parameters and the predictions, as rich tables; rates (λ, λ/σ: runs of the
    N = 1 problem per time) per `unit`, which lasts `unit_s` seconds."""
    rows = []
    a, g, u = fit["amdahl"], fit["gustafson"], fit["usl"]
    if a:
        rows.append(["Amdahl", "p", _pm(a["p"], a["p_se"]), f"ceiling {_fmt(a['ceiling'])}×"])
        rows.append(["", "R²", f"{a['r2']:.4f}", ""])
    if g:
        rows.append(["Gustafson", "α", _pm(g["alpha"], g["alpha_se"]), "efficiency → 1 − α"])
        rows.append(["", "R²", f"{g['r2']:.4f}", ""])
    if u:
        peak = f"peak at N* = {_fmt(u['n_star'])}" if u["n_star"] else "no peak (κ = 0)"
        rate = u["limit_throughput"]
        limit = f"limit λ/σ = {_fmt(rate * unit_s)}/{unit}" if rate else ""
        rows.append(["USL", "σ", _pm(u["sigma"], u["sigma_se"]), peak])
        rows.append(["", "κ", _pm(u["kappa"], u["kappa_se"]), limit])
        lam_se = u["lam_se"] * unit_s if u["lam_se"] is not None else None
        rows.append(["", "λ", _pm(u["lam"] * unit_s, lam_se), f"runs/{unit} at N = 1"])
        rows.append(["", "R²", f"{u['r2']:.4f}", ""])
    out = [table("Fitted laws (± one standard error)", ["law", "", "value", "implies"], rows)]
    preds = fit["predictions"]
    if preds:
        banded = preds[0].get("speedup_low") is not None
        out.append(
            table(
                f"Predicted beyond the data ({preds[0]['law']}"
                + (", 95 % prediction interval)" if banded else ", no band)"),
                ["N", "speedup", "band"],
                [
                    [
                        f"{p['n']:g}",
                        f"{p['speedup']:.3g}×",
                        f"{p['speedup_low']:.3g} – {p['speedup_high']:.3g}×"
                        if p.get("speedup_low") is not None
                        else "unknown",
                    ]
                    for p in preds
                ],
                caption=preds[0].get("band") or None,
            )
        )
    return out


def points_table(points: list[dict[str, Any]], title: str):
    phase_cols = [k for k in (*PHASES, "sync_s") if any(k in p for p in points)]
    has_time = any(p.get("time_s") for p in points)
    cols = ["N", "time", "speedup", "efficiency", "Karp–Flatt e"] + [
        k[:-2].replace("_", " ") for k in phase_cols
    ]
    rows = []
    for p in points:
        kf = p.get("karp_flatt")
        row = [
            f"{p['n']:g}" + (" *" if p.get("oversubscribed") else ""),
            format_time(p["time_s"]) if p.get("time_s") else "—",
            "—" if p.get("speedup") is None else f"{p['speedup']:.3g}×" + noise_mark(p),
            "—" if p.get("efficiency") is None else format_percent(p["efficiency"]),
            "—" if kf is None else f"{kf:.3f}",
        ]
        row += [format_time(p[k]) if k in p else "—" for k in phase_cols]
        if not has_time:
            del row[1]
        rows.append(row)
    if not has_time:
        del cols[1]
    caption = "* oversubscribed: more worker threads than cores" * any(
        p.get("oversubscribed") for p in points
    )
    return table(title, cols, rows, caption=caption or None)
