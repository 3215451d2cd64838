"""Terminal tables for `ceiling bench` results."""

from __future__ import annotations

from statistics import median
from typing import Any

from ceiling.units import format_bandwidth, format_bytes, format_flops_per_s, format_time

NOISY = "(noisy): the samples' IQR exceeds 10 % of their median, so trust the figure less"


def _pct(fraction: float | None) -> str:
    return "" if fraction is None else f"{fraction * 100:.1f} %"


def shape_text(m: int, n: int, k: int) -> str:
    """'4096³' for a cube (short enough never to be cut in a narrow table), else 'MxNxK'."""
    return f"{m}³" if m == n == k else f"{m}x{n}x{k}"


def matmul_table(report, table) -> Any:
    rows = []
    for r in report.matmul:
        flag = " (noisy)" if r.stats.noisy else ""
        rows.append(
            [
                r.dtype + ("" if r.native else " (emulated)"),
                shape_text(r.m, r.n, r.k),
                format_time(r.best_s),
                format_time(r.median_s) + flag,
                format_flops_per_s(r.best_flops_per_s),
                _pct(r.peak_fraction),
                f"{r.rel_error:.1e}",
            ]
        )
    peak_word = "datasheet dense peak" if report.device.startswith("cuda") else "theoretical peak"
    above = any((r.peak_fraction or 0) > 1 for r in report.matmul)
    above_note = (
        "; above 100 %: the peak's clock is lower than the one this device runs at" if above else ""
    )
    return table(
        f"matmul on {report.device_name} ({report.device})",
        ["dtype", "MxNxK", "best", "median", "best rate", "% peak", "rel err"],
        rows,
        caption=f"FLOPs = 2·M·N·K (a multiply-add counts 2); rate from the best time; "
        f"% of the {peak_word}; each result checked against float64; {NOISY}{above_note}",
    )


def blas_table(report, table) -> Any:
    """numpy's BLAS beside torch at each shape both ran, and the framework's gap to it."""
    from ceiling.measure.blas import framework_gap

    torch_rows = {(r.dtype, r.m, r.n, r.k): r for r in report.matmul}
    rows = []
    for b in report.matmul_blas:
        mine = torch_rows.get((b.dtype, b.m, b.n, b.k))
        if mine is None:
            continue
        rows.append(
            [
                b.dtype,
                shape_text(b.m, b.n, b.k),
                format_flops_per_s(mine.best_flops_per_s),
                format_flops_per_s(b.best_flops_per_s) + (" (noisy)" if b.stats.noisy else ""),
                _ratio_text(mine.best_flops_per_s / b.best_flops_per_s, b.round_ratios),
            ]
        )
    gaps = framework_gap(
        [r.row() for r in report.matmul],
        [b.row() for b in report.matmul_blas],
        bool(getattr(report, "busy", False)),
    )
    library = report.matmul_blas[0].library if report.matmul_blas else "numpy's BLAS"
    return table(
        f"torch beside the best BLAS here ({library}, through numpy)",
        ["dtype", "MxNxK", "torch", "BLAS", "torch / BLAS"],
        rows,
        caption="best rates, 2·M·N·K FLOPs; torch / BLAS: the median of the rounds the two "
        "ran alternately, their range in brackets; "
        + "; ".join(framework_gap_sentence(g) for g in gaps)
        + "; each library with its own threads",
    )


def _ratio_text(best_ratio: float, rounds: tuple[float, ...]) -> str:
    if not rounds:
        return f"{best_ratio:.2f}×"
    return f"{median(rounds):.2f}× ({min(rounds):.2f}–{max(rounds):.2f})"


NO_VERDICT = {
    "busy": "measured while other work ran, so no verdict (run `ceiling bench matmul` again "
    "on an idle machine)",
    "inconclusive": "the rounds spread wider than the gap, so no verdict",
}


def framework_gap_sentence(gap: dict[str, Any]) -> str:
    """'torch's fp32 matmul reaches 0.87× scipy-openblas's (0.85–0.89× over 5 interleaved
    rounds): the framework leaves 13 % of this CPU unused', or why no verdict is drawn."""
    ratio, spread = gap["ratio"], gap.get("ratio_range")
    said = f"torch's {gap['dtype']} matmul reaches {ratio:.2f}× {gap['library']}'s"
    if spread:
        said += f" ({spread[0]:.2f}–{spread[1]:.2f}× over {gap['rounds']} interleaved rounds)"
    verdict = gap.get("verdict", "inconclusive")  # a record without rounds has no spread
    if verdict in NO_VERDICT:
        return f"{said}: {NO_VERDICT[verdict]}"
    if ratio < 1:
        return f"{said}: the framework leaves {(1 - ratio) * 100:.0f} % of this CPU unused"
    return f"{said}: torch's path is this CPU's best"


def matmul_notes(report) -> list[str]:
    """Each distinct note of the matmul rows once (e.g. the clock a rate above peak implies)."""
    seen: dict[str, None] = {}
    # Of the rows above the peak, only the one that bounds the clock highest is worth a line.
    above = [r for r in report.matmul if any("above the peak" in n for n in r.notes)]
    top = max(above, key=lambda r: r.implied_clock_hz or 0.0, default=None)
    for r in report.matmul:
        for note in r.notes:
            if "not native" in note:  # said on its own line already
                continue
            if "above the peak" in note and r is not top:
                continue
            seen.setdefault(f"matmul {r.dtype} {shape_text(r.m, r.n, r.k)}: {note}", None)
    return list(seen)


def memory_table(report, table) -> Any:
    results = list(report.memory)
    if report.naive_triad is not None:
        results.append(report.naive_triad)
    rows = [
        [
            r.kernel,
            format_bytes(r.bytes),
            f"{r.best_gbps:.3g}",
            f"{r.median_gbps:.3g}" + (" (noisy)" if r.stats.noisy else ""),
        ]
        for r in results
    ]
    n = results[0].elements if results else 0
    return table(
        f"memory bandwidth (STREAM, float64, {n:,} elements = "
        f"{format_bytes(n * 8, binary=True)} per array)",
        ["kernel", "bytes per pass", "best GB/s", "median GB/s"],
        rows,
        caption="GB = 1e9 bytes; STREAM byte counts; best time with the first iteration "
        f"discarded; every result validated; {NOISY}",
    )


def overhead_lines(o) -> list[str]:
    what = "launch + sync share" if o.device.startswith("cuda") else "dispatch"
    lines = [
        f"one tiny op (1-element add, {what}): {format_time(o.tiny_op_s)} median, "
        f"{format_time(o.tiny_op_best_s)} best",
        f"square 1,000,000 float32: Python loop {format_time(o.loop_s)}, numpy vectorized "
        f"{format_time(o.vectorized_s)} -> loop is {o.loop_vs_vectorized:,.0f}x slower; torch "
        f"on {o.device}: {format_time(o.device_vectorized_s)}",
    ]
    for c in o.crossovers:
        what = "x*x over n elements" if c.op == "elementwise" else "an n x n matmul"

        def where(size, c=c) -> str:
            if size is None:
                return f"never up to n = {max(c.sizes):,}"
            return f"from n = {size:,}"

        lines.append(
            f"GPU beats CPU for {what}: {where(c.crossover)} with the data already on "
            f"the GPU, {where(c.crossover_with_transfer)} with the copies counted (time until "
            "the result is ready, launch included)"
        )
    lines.extend(f"note: {n}" for n in o.notes)
    return lines


def transfer_table(report, table) -> Any:
    rows = [
        [
            r.direction,
            r.host_memory,
            format_bytes(r.bytes, binary=True),
            format_bandwidth(r.bytes / r.stats.min),
            format_bandwidth(r.bytes / r.stats.median),
            format_bandwidth(r.traffic_bytes / r.stats.min) if r.direction == "d2d" else "",
        ]
        for r in report.transfer
    ]
    return table(
        "transfers",
        ["direction", "host memory", "size", "best", "median", "best, read+write"],
        rows,
        caption="GB = 1e9 bytes; rate = bytes copied / time (as nvbandwidth); a copy on the "
        "device also reads every byte, so its memory traffic is twice that (last column, "
        "comparable with STREAM copy and the HBM datasheet figure)",
    )


def telemetry_lines(summary: dict[str, Any]) -> list[str]:
    """Burst vs sustained clocks, power and temperature over a run, then any flags."""
    if not summary.get("source"):
        why = summary.get("unavailable")
        return [f"telemetry: not readable ({why})"] if why else []
    parts = []
    for key, label, scale, unit in (
        ("sm_clock_hz", "SM clock", 1e9, "GHz"),
        ("memory_clock_hz", "memory clock", 1e9, "GHz"),
        ("cpu_clock_hz", "CPU clock", 1e9, "GHz"),
        ("power_w", "power", 1.0, "W"),
        ("temperature_c", "temperature", 1.0, "°C"),
    ):
        q = summary.get(key)
        if q:
            parts.append(
                f"{label} {q['burst'] / scale:.3g} {unit} burst, "
                f"{q['sustained'] / scale:.3g} {unit} sustained"
            )
    if not parts:
        return []
    lines = [f"telemetry ({summary['source']}, after each case): " + "; ".join(parts)]
    lines += [f"note: {n}" for n in summary.get("notes", ())]
    return lines
