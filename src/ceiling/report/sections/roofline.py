"""The empirical roofline with three basic operations placed on it, predicted vs measured."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ceiling import units
from ceiling.errors import UnsupportedOnDevice
from ceiling.report.compose import ReportContext, SectionOutput, Skip

KEY = "roofline"
TITLE = "Compute- or memory-bound: the roofline"

# Three operations (elementwise add, matrix × vector, matrix × matrix), sized so
# that each runs from main memory, not from cache; a larger matmul in full mode.
OPS_QUICK = ("add:16777216", "matvec:4096", "matmul:1024x1024x1024")
OPS_FULL = ("add:67108864", "matvec:8192", "matmul:4096x4096x4096")
# predicted only: the same FLOPs, far fewer bytes when the scores stay on chip
ATTENTION = "attention:1,16,2048,64"
REFERENCE_GPU = "h100-sxm"


def run(ctx: ReportContext, out: SectionOutput) -> None:
    from ceiling.api.roofline import roofline

    profile = ctx.profile()
    dev = profile.device("cuda")
    dtype = "bf16" if dev.kind == "cuda" and "bf16" in dev.peak_flops_per_s else "fp32"
    if dtype not in dev.peak_flops_per_s or not dev.bandwidth_bytes_per_s:
        raise UnsupportedOnDevice(
            f"the profile of {dev.name} lacks a measured {dtype} matmul or memory bandwidth"
        )
    if ctx.profile_file is None:
        raise Skip("the machine profile measured now could not be saved, so no roofline reads it")
    specs = OPS_QUICK if ctx.quick else OPS_FULL
    # the call `ceiling roofline --op ... --dtype DTYPE --profile PROFILE` makes
    result = roofline(specs, dtype=dtype, machine_profile=ctx.profile_file)
    peak, bw = result.roofs["peak_flops_per_s"], result.roofs["bandwidth_bytes_per_s"]
    ridge = result.ridge_flops_per_byte
    out.text(
        "Left of the ridge point an op waits on memory, right of it on arithmetic; the roofs "
        "are this machine's measured ceilings."
    )
    out.key("ridge_flops_per_byte", ridge, f"ridge point ({dtype})", f"{ridge:.3g} FLOP/B")
    out.key_figures["peak_flops_per_s"] = peak
    out.key_figures["bandwidth_bytes_per_s"] = bw
    out.key_figures["dtype"] = dtype
    out.key_figures["device"] = dev.name

    placed = [_placed(row) for row in result.ops]
    measured = _measure(ctx, out, specs, dtype, dev)
    _ops_table(out, placed, measured, dev.name, dtype)
    _busy_note(out, placed, measured, peak)
    sheet = (dev.datasheet_peak_flops_per_s or {}).get(dtype)
    if sheet and peak > sheet:
        out.note(f"the measured {dtype} roof lies above the theoretical one (see the machine card)")
    _figure(out, dev, dtype, peak, bw, placed, measured)
    _attention(out)


@dataclass(frozen=True)
class _Op:
    name: str
    kind: str
    flops: float
    bytes: float


def _placed(row: dict[str, Any]) -> dict:
    """One op of `ceiling.roofline`'s result under the roofs."""
    return {
        "op": _Op(row["op"], row["kind"], row["flops"], row["bytes"]),
        "intensity": row["intensity_flops_per_byte"],
        "attainable": row["attainable_flops_per_s"],
        "predicted_s": row["predicted_s"],
        "bound": row["bound"],
    }


def _ops_table(out: SectionOutput, placed, measured, device: str, dtype: str) -> None:
    rows, figures = [], {}
    for p in placed:
        op = p["op"]
        m = measured.get(op.name)
        rows.append(
            [
                op.name,
                units.format_flops(op.flops),
                units.format_bytes(op.bytes),
                f"{p['intensity']:.3g}",
                p["bound"],
                units.format_time(p["predicted_s"]),
                units.format_time(m) if m else "—",
                units.format_percent(p["predicted_s"] / m) if m else "—",
            ]
        )
        figures[op.name] = {
            "intensity_flops_per_byte": p["intensity"],
            "bound": p["bound"],
            "predicted_s": p["predicted_s"],
            "measured_s": m,
        }
        if op.kind in ("add", "matvec", "matmul"):
            out.key_figures[f"intensity_{op.kind}"] = p["intensity"]
    out.key_figures["ops"] = figures
    out.table(
        f"Three ops on {device}, {dtype}: modelled at the roof against measured",
        ["op", "FLOPs", "bytes", "FLOP/B", "bound", "modelled", "measured", "of the roof"],
        rows,
        modelled=(4, 5),
    )
    out.note(
        "bytes: each operand read once, each result written once; modelled: "
        "max(FLOPs ÷ peak, bytes ÷ bandwidth); measured: the best of repeated runs"
    )


def _busy_note(out: SectionOutput, placed, measured, peak: float) -> None:
    """Say why a measured op sits far from its roof, instead of leaving the reader to guess."""
    above = [
        p["op"].name
        for p in placed
        if measured.get(p["op"].name, 0) > 0 and p["predicted_s"] > measured[p["op"].name]
    ]
    if above:
        out.note(
            f"{', '.join(above)} ran faster than its roof: the load changed since the "
            "benchmarks, or an operand partly fits the last-level cache"
        )
    for p in placed:
        op, m = p["op"], measured.get(p["op"].name)
        if op.kind != "matmul" or not m:
            continue
        rate = op.flops / m
        if rate < 0.5 * peak:
            out.note(
                f"{op.name} reached {units.format_flops_per_s(rate)}, under half the matmul "
                "benchmark's best: other work shared the cores, or this size is less efficient"
            )


def _attention(out: SectionOutput) -> None:
    """The memory wall on a GPU's datasheet roofline: naive vs fused attention."""
    from ceiling.api.roofline import roofline

    # the call `ceiling roofline --op ATTENTION --spec REFERENCE_GPU` makes
    result = roofline(ATTENTION, dtype="bf16", spec=REFERENCE_GPU)
    peak, bw = result.roofs["peak_flops_per_s"], result.roofs["bandwidth_bytes_per_s"]
    rows, times, points = [], {}, []
    for row in result.ops:
        op, intensity, b = row["kind"], row["intensity_flops_per_byte"], row["bound"]
        times[op] = row["predicted_s"]
        points.append((op.removeprefix("attention-"), intensity, row["attainable_flops_per_s"]))
        rows.append(
            [
                row["op"],
                units.format_flops(row["flops"]),
                units.format_bytes(row["bytes"]),
                f"{intensity:.3g}",
                b,
                units.format_time(row["predicted_s"]),
            ]
        )
        out.key_figures[f"{op}_intensity_flops_per_byte"] = intensity
        out.key_figures[f"{op}_bound_on_{REFERENCE_GPU}"] = b
    ratio = times["attention-naive"] / times["attention-fused"]
    out.key_figures["attention_naive_over_fused_time"] = ratio
    out.key_figures["attention_rows"] = rows
    from ceiling.render import roofline_plot as plot

    short = result.roofs["device"].removeprefix("NVIDIA ")
    fig = plot.roofline_figure(
        [plot.Roof(f"{short} datasheet roof, bf16", peak, bw)],
        [plot.OpPoint(f"{form} attention", i, a) for form, i, a in points],
        title=f"The memory wall: attention on the {short}",
    )
    out.figure(
        fig,
        f"Modelled on the datasheet: the same attention naive (scores through memory) and "
        f"fused (kept on chip, {ratio:.1f}× faster).",
    )


def _measure(ctx: ReportContext, out: SectionOutput, specs, dtype: str, dev) -> dict[str, float]:
    """Each op timed here (`ceiling roofline --measure`): its best time by name."""
    from ceiling.api.roofline import roofline

    device = "cuda" if dev.kind == "cuda" else "cpu"
    if device == "cuda" and not _cuda_here():
        out.note(f"measured op times: {dev.name} from the profile is not attached to this machine")
        return {}
    ctx.step(f"timing {', '.join(specs)} on {device}")
    timed = roofline(specs, dtype=dtype, machine_profile=ctx.profile_file, measure=True)
    return {row["op"]: row["measured_s"] for row in timed.ops}


def _cuda_here() -> bool:
    import torch

    return torch.cuda.is_available()


def _figure(out, dev, dtype, peak, bw, placed, measured) -> None:
    from ceiling.render import roofline_plot as plot

    roofs = [plot.Roof(f"measured roof, {dev.name}", peak, bw)]
    sheet_peak = (dev.datasheet_peak_flops_per_s or {}).get(dtype)
    if sheet_peak:
        label = "datasheet" if dev.kind == "cuda" else "theoretical"
        roofs.append(
            plot.Roof(f"{label} roof", sheet_peak, dev.datasheet_bandwidth_bytes_per_s, style="--")
        )
    points = [
        plot.OpPoint(_short(p["op"]), p["intensity"], p["attainable"])
        for p in placed
        if p["op"].kind in ("add", "matvec", "matmul")
    ]
    # a measured dot sits at the same intensity as its labelled cross: one label per op, so
    # the two never print on top of each other when the measurement meets the prediction
    points += [
        plot.OpPoint("", p["intensity"], p["op"].flops / measured[p["op"].name], True)
        for p in placed
        if p["op"].name in measured
    ]
    fig = plot.roofline_figure(roofs, points, title=f"Roofline of {dev.name} ({dtype})")
    out.figure(fig, "Crosses: modelled; dots: measured here.")


def _short(op) -> str:
    return op.kind
