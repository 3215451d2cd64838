"""Scaling measured over torch.distributed workers here, fitted with Amdahl, USL, Karp-Flatt."""

from __future__ import annotations

import sys

from ceiling import units
from ceiling.report.compose import ReportContext, SectionOutput
from ceiling.report.sections._axes import plain_log_ticks

KEY = "scaling"
TITLE = "Scaling on this machine's cores"

# The synthetic step sleeps, so it scales meaningfully past the core count and its serial
# share is known: the fit can be checked against the truth.
SYNTHETIC_SERIAL = 0.1
SYNTHETIC_WORK_MS_QUICK, SYNTHETIC_WORK_MS_FULL = 200.0, 1000.0
SYNTHETIC_WORKERS = (1, 2, 4, 8)
PYTHON_ITERATIONS_QUICK, PYTHON_ITERATIONS_FULL = 200_000, 2_000_000
# quick mode runs the sleeping step on threads (it releases the GIL, so threads scale like
# processes without paying for starting them); full mode on processes
SYNTHETIC_BACKEND_QUICK, SYNTHETIC_BACKEND_FULL = "threads", "processes"
TIMEOUT_S = 120.0
KAPPA_NONE, N_STAR_FAR = 1e-9, 1e6  # below / beyond these the USL found no crosstalk
PARALLEL_SPEEDUP = 1.2  # below this, two workers did not measurably run at the same time


def run(ctx: ReportContext, out: SectionOutput) -> None:
    from ceiling.api.scale import cpu_cores
    from ceiling.render import scaling_plot as plot
    from ceiling.render import scaling_summary as summary_mod

    cores = cpu_cores()
    out.text(
        "A step with a known serial share on 1 … 8 workers, fitted with Amdahl, the USL and "
        "Karp–Flatt to check the method; then one Python loop on threads and on processes."
    )
    out.key("cores", cores)

    _known_serial_share(ctx, out, plot, summary_mod)
    if cores < 2:
        out.note(
            "concurrency vs parallelism and compute scaling: skipped — this machine has one "
            "core, so no two computations can run at the same instant"
        )
        return
    _threads_and_processes(ctx, out, summary_mod, cores)


def _known_serial_share(ctx, out: SectionOutput, plot, summary_mod) -> None:
    """A step with a known serial share, fitted: the method checked against the truth."""
    work_ms = SYNTHETIC_WORK_MS_QUICK if ctx.quick else SYNTHETIC_WORK_MS_FULL
    backend = SYNTHETIC_BACKEND_QUICK if ctx.quick else SYNTHETIC_BACKEND_FULL
    synthetic = _run(
        ctx,
        "synthetic",
        SYNTHETIC_WORKERS,
        {"serial": SYNTHETIC_SERIAL, "work_ms": work_ms, "comm_bytes": 0},
        steps=3,
        backend=backend,
    )
    out.key_figures["synthetic_backend"] = backend
    fit = synthetic["fit"]
    amdahl, usl = fit.get("amdahl"), fit.get("usl")
    truth = 1 - SYNTHETIC_SERIAL
    if amdahl:
        se = f" ± {amdahl['p_se']:.3f}" if amdahl.get("p_se") is not None else ""
        out.key(
            "synthetic_amdahl_p",
            amdahl["p"],
            f"fitted p (truth {truth:g})",
            f"{amdahl['p']:.3f}{se}",
        )
        out.key_figures["synthetic_amdahl_p_se"] = amdahl.get("p_se")
        out.key_figures["synthetic_amdahl_ceiling"] = amdahl.get("ceiling")
    if usl:
        out.key_figures["synthetic_usl_sigma"] = usl.get("sigma")
        out.key_figures["synthetic_usl_kappa"] = usl.get("kappa")
        out.key_figures["synthetic_usl_n_star"] = usl.get("n_star")
    out.key_figures["synthetic_truth_p"] = truth
    out.table(
        f"A step with a known serial share ({SYNTHETIC_SERIAL:g} of {work_ms:.0f} ms), "
        f"on {backend}",
        # the synthetic run is fitted on its work; barrier/all-reduce are in the notes
        [
            "N",
            "work time" if synthetic.get("timed") == "work" else "step time",
            "speedup",
            "efficiency",
            "Karp–Flatt e(N)",
        ],
        [_point_row(p, summary_mod.noise_mark(p)) for p in synthetic["points"]],
        note=_fit_line({k: v for k, v in fit.items() if k != "verdict"}),
    )
    out.key_figures["synthetic_fit_verdict"] = fit.get("verdict")
    fig = plot.scaling_figure(synthetic, title="Known serial share 0.1: measured and fitted")
    for ax in fig.axes:
        plain_log_ticks(ax)
    out.figure(fig, "Dots: measured; lines: fitted. The step sleeps, so N may pass the cores.")
    # the run's own notes (oversubscription, synchronisation measured apart) stay in the
    # JSON; the page keeps the warnings and the check against the truth
    out.key_figures["synthetic_notes"] = list(synthetic.get("notes", []))
    for line in synthetic.get("warnings", []) + summary_mod.noise_notes(synthetic["points"]):
        out.note(line)
    truth_line = next((n for n in synthetic.get("notes", []) if n.startswith("truth")), None)
    if truth_line:
        out.note(truth_line.split(". ")[0])


def _threads_and_processes(ctx, out: SectionOutput, summary_mod, cores: int) -> None:
    """Concurrency vs parallelism, and real compute on the cores."""
    ns = _powers_up_to(min(cores, 4) if ctx.quick else cores)
    iterations = PYTHON_ITERATIONS_QUICK if ctx.quick else PYTHON_ITERATIONS_FULL
    rows = []
    contrast, noisy = {}, {}
    runs = [
        ("python", "threads", {"iterations": iterations}, "pure-Python loop, threads"),
        ("python", "processes", {"iterations": iterations}, "pure-Python loop, processes"),
    ]
    if not ctx.quick:  # each process run pays for starting its workers: full mode only
        runs.append(("matmul", "processes", {"size": 2048}, "torch matmul, processes"))
    for workload, backend, options, what in runs:
        steps = 2 if ctx.quick else 3
        res = _run(ctx, workload, ns, options, steps=steps, backend=backend)
        top = res["points"][-1]
        contrast[f"{workload}_{backend}"] = top["speedup"]
        if top.get("noise"):
            noisy[f"{workload}_{backend}"] = top["speedup_range"]
            for line in summary_mod.noise_notes([top]):
                out.note(f"{what}: {line}")
        rows.append(
            [
                what,
                f"N = {top['n']}",
                f"{top['speedup']:.2f}×" + summary_mod.noise_mark(top),
                units.format_percent(top["efficiency"]),
                "timing noise: more than the workers can give"
                if top.get("noise")
                else _kind(workload, backend, top["speedup"]),
            ]
        )
    out.key_figures["speedup_at_max_n"] = contrast
    # speedups above their worker count, with the range the steps allow: noise, never a finding
    out.key_figures["speedup_noise"] = noisy
    out.key_figures["max_n"] = ns[-1]
    said = {k: "noise" if k in noisy else f"{v:.2f}×" for k, v in contrast.items()}
    out.highlight(
        f"Python on {ns[-1]} threads / processes",
        f"{said['python_threads']} / {said['python_processes']}",
    )
    cols = ["workload", "workers", "speedup", "efficiency", "shows"]
    out.table("Concurrency vs parallelism", cols, rows)


def _run(ctx, workload, ns, options, steps, backend="processes") -> dict:
    """The summary `ceiling scale WORKLOAD --workers NS --backend BACKEND --json` prints."""
    from ceiling.api.scale import scale

    ctx.step(f"{workload} on {', '.join(map(str, ns))} {backend}")
    result = scale(
        workload,
        workers=ns,
        backend=backend,
        steps=steps,
        warmup=1,
        device="cpu",
        timeout_s=TIMEOUT_S,
        on_progress=lambda m: ctx.step(f"{workload}: {m}"),
        **options,
    )
    return result.summary


def _point_row(p: dict, noise: str = "") -> list[str]:
    kf = p.get("karp_flatt")
    return [
        str(p["n"]),
        units.format_time(p["time_s"]),
        f"{p['speedup']:.2f}×{noise}",
        units.format_percent(p["efficiency"]),
        "—" if kf is None else f"{kf:.3f}",
    ]


def _fit_line(fit: dict) -> str:
    parts = []
    a, u = fit.get("amdahl"), fit.get("usl")
    if a:
        parts.append(f"Amdahl p = {a['p']:.3f}, ceiling {a['ceiling']:.3g}×")
    if u:
        n_star = u.get("n_star")
        if u["kappa"] < KAPPA_NONE or (n_star is not None and n_star > N_STAR_FAR):
            # a κ of 1e-22 and a peak at 6e10 workers are "no crosstalk measured", said plainly
            parts.append(f"USL σ = {u['sigma']:.3g}, κ ≈ 0 (no peak within reach)")
        else:
            peak = f", N* ≈ {n_star:.3g}" if n_star else ""
            parts.append(f"USL σ = {u['sigma']:.3g}, κ = {u['kappa']:.2g}{peak}")
    if fit.get("verdict"):
        parts.append(fit["verdict"])
    return "; ".join(parts)


def _kind(workload: str, backend: str, speedup: float) -> str:
    if backend == "threads" and workload == "python":
        if _gil_enabled():
            noise = " (the gain measured is timing noise)" if speedup >= PARALLEL_SPEEDUP else ""
            return f"concurrency only: one thread runs Python at a time (the GIL){noise}"
        return "no GIL: threads run in parallel"
    if speedup < PARALLEL_SPEEDUP:
        return "no parallel speedup: busy cores or too little work"
    if workload == "python":
        return "parallelism: one interpreter per process"
    return "parallelism: torch kernels on separate cores"


def _gil_enabled() -> bool:
    """Free-threaded builds (3.13t and later) can say so; every other CPython has a GIL."""
    check = getattr(sys, "_is_gil_enabled", None)
    return True if check is None else bool(check())


def _powers_up_to(n: int) -> list[int]:
    out, k = [], 1
    while k <= n:
        out.append(k)
        k *= 2
    return out
