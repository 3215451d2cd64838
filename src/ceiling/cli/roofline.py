"""`ceiling roofline`: ridge point, ops placed under the roofs, optionally measured."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from ceiling.cli.app import app
from ceiling.cli.device_options import ProfileOption, SpecOption
from ceiling.cli.output import (
    LIST_HELP,
    JsonOption,
    PlotOption,
    comma_list,
    console,
    emit_json,
    table,
)
from ceiling.errors import InvalidInput, UnsupportedOnDevice
from ceiling.units import (
    format_bandwidth,
    format_bytes,
    format_flops,
    format_flops_per_s,
    format_time,
)

# --measure refuses ops whose predicted call is longer than this (it times at least 6 calls).
MEASURE_MAX_CALL_S = 20.0


def _roofs(spec_name: str | None, profile: Path | None, dtype: str) -> dict[str, Any]:
    """The roof predictions use (measured from the profile, else the datasheet) and the
    datasheet roof beside it where the profile records one."""
    from ceiling.hardware.resolve import resolve

    resolved = resolve(spec_name, profile, prefer="cuda")
    spec = resolved.spec
    out: dict[str, Any] = {
        "device": spec.name,
        "kind": spec.kind,
        "source": "datasheet" if spec_name else "profile",
        "peak_flops_per_s": spec.peak(dtype),
        "bandwidth_bytes_per_s": spec.memory_bandwidth_bytes_per_s,
        "datasheet_peak_flops_per_s": None,
        "datasheet_bandwidth_bytes_per_s": None,
        "profile": None,
    }
    if spec_name is not None:
        # --measure times the ops on the local device of the spec's kind; comparing an
        # H100's prediction with a CPU's timing would be a silently wrong figure.
        out["measure_device"] = {"gpu": "cuda", "cpu": "cpu"}.get(spec.kind)
    else:
        dev = resolved.measured
        out["profile"] = str(resolved.profile_path)
        out["datasheet_peak_flops_per_s"] = dev.datasheet_peak_flops_per_s.get(dtype)
        out["datasheet_bandwidth_bytes_per_s"] = dev.datasheet_bandwidth_bytes_per_s
        out["measure_device"] = "cuda" if dev.kind == "cuda" else "cpu"
    return out


def _rows(ops, roofs: dict[str, Any], measure: bool) -> list[dict[str, Any]]:
    from ceiling.model.roofline import place

    rows = []
    for op in ops:
        p = place(
            op.name, op.flops, op.bytes, roofs["peak_flops_per_s"], roofs["bandwidth_bytes_per_s"]
        )
        row = {
            "op": op.name,
            "kind": op.kind,
            "dtype": op.dtype,
            "shape": list(op.shape),
            "flops": op.flops,
            "bytes": op.bytes,
            "intensity_flops_per_byte": p.intensity,
            "attainable_flops_per_s": p.attainable_flops_per_s,
            "predicted_s": p.predicted_s,
            "bound": p.bound,
        }
        rows.append(row)
    if measure:
        from ceiling.measure.machine import device_name
        from ceiling.measure.ops import time_op

        device = _measure_device(roofs)
        if roofs["source"] == "datasheet":
            roofs["measured_device_name"] = device_name(device)
        for row in rows:
            if row["predicted_s"] > MEASURE_MAX_CALL_S:
                raise InvalidInput(
                    f"--measure: {row['op']} is predicted to take "
                    f"{format_time(row['predicted_s'])} per call and is timed at least 6 times; "
                    "choose a smaller op or drop --measure"
                )
        for op, row in zip(ops, rows, strict=True):
            stats = time_op(op, device)
            row["measured_s"] = stats.min
            row["measured_median_s"] = stats.median
            row["measured_flops_per_s"] = op.flops / stats.min
            row["predicted_over_measured"] = row["predicted_s"] / stats.min
            row["measured_on"] = device
            row["within_30pct"] = 1 / 1.3 <= row["predicted_over_measured"] <= 1.3
    return rows


def default_dtype(spec: str | None, profile: Path | None) -> str:
    """bf16 for a catalog accelerator (the dtype its tensor cores and published training
    runs use, where attention meets the memory wall); fp32 for a CPU or a measured profile."""
    if spec is None:
        return "fp32"
    from ceiling.hardware.resolve import resolve

    device = resolve(spec, profile).spec
    return "bf16" if device.kind != "cpu" and "bf16" in device.dtypes else "fp32"


def op_list(values: list[str] | None) -> list[str]:
    """--op values, comma-separated or repeated: a part without "kind:" continues the op
    before it (attention:B,H,S,D has commas of its own)."""
    ops: list[str] = []
    for part in comma_list(values) or []:
        if ":" in part or not ops:
            ops.append(part)
        else:
            ops[-1] += f",{part}"
    return ops


def _intensity(flop_per_byte: float) -> str:
    """62.1, 0.167, 2,048: three significant figures without an exponent."""
    return f"{flop_per_byte:,.0f}" if flop_per_byte >= 100 else f"{flop_per_byte:.3g}"


def _short_name(row: dict[str, Any]) -> str:
    """A table label that fits a narrow terminal: 'add:100M', 'matmul:4096³', 'attn:...'."""

    def count(n: int) -> str:
        for scale, prefix in ((10**9, "G"), (10**6, "M"), (10**3, "k")):
            if n >= scale and n % scale == 0:
                return f"{n // scale}{prefix}"
        return str(n)

    shape = row["shape"]
    if row["kind"] == "add":
        return f"add:{count(shape[0])}"
    if row["kind"] == "matmul" and len(set(shape)) == 1:
        return f"matmul:{shape[0]}³"
    return row["op"].replace("attention:", "attn:")


def _measure_device(roofs: dict[str, Any]) -> str:
    """Where --measure runs: the profile's device, or the local device of the spec's kind."""
    from ceiling.measure.machine import pick_device

    where = roofs.get("measure_device")
    if where is None:
        raise UnsupportedOnDevice(
            f"--measure times the ops on this machine; a {roofs['kind']} spec cannot be run here"
        )
    if where == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise UnsupportedOnDevice(
                f"--measure times the ops on this machine, but {roofs['device']} is a GPU and "
                "no CUDA device is visible here; drop --measure, or use the measured profile"
            )
    return pick_device(where)


def _plot(path: Path, roofs: dict[str, Any], rows: list[dict[str, Any]], dtype: str) -> None:
    from ceiling.report import plots
    from ceiling.report.roofline_plot import OpPoint, Roof, roofline_figure

    label = "measured" if roofs["source"] == "profile" else "datasheet"
    lines = [Roof(f"{label} roof", roofs["peak_flops_per_s"], roofs["bandwidth_bytes_per_s"])]
    if roofs.get("datasheet_peak_flops_per_s"):
        lines.append(
            Roof(
                "datasheet roof",
                roofs["datasheet_peak_flops_per_s"],
                roofs.get("datasheet_bandwidth_bytes_per_s"),
                style="--",
            )
        )
    points = [
        OpPoint(r["op"], r["intensity_flops_per_byte"], r["attainable_flops_per_s"]) for r in rows
    ]
    points += [
        OpPoint(r["op"], r["intensity_flops_per_byte"], r["measured_flops_per_s"], measured=True)
        for r in rows
        if "measured_s" in r
    ]
    fig = roofline_figure(lines, points, title=f"Roofline of {roofs['device']} ({dtype})")
    plots.save(fig, path)


@app.command()
def roofline(
    op: Annotated[
        list[str] | None,
        typer.Option(
            "--op",
            metavar="OP",
            help="add:N, matvec:N, matmul:MxNxK or attention:B,H,S,D (naive and fused); "
            f"{LIST_HELP}.",
        ),
    ] = None,
    dtype: Annotated[
        str | None,
        typer.Option(
            "--dtype",
            metavar="DTYPE",
            help="Element type of the ops and the peak used: fp64 fp32 tf32 bf16 fp16 fp8 int8 "
            "(default: bf16 on a --spec accelerator, its tensor-core dtype; else fp32).",
            show_default=False,
        ),
    ] = None,
    profile: ProfileOption = None,
    spec: SpecOption = None,
    measure: Annotated[
        bool, typer.Option("--measure", help="Also time the ops here: measured vs predicted.")
    ] = False,
    json_out: JsonOption = False,
    plot: PlotOption = None,
) -> None:
    """Ridge point and where ops sit: FLOPs, bytes, intensity, attainable FLOP/s, bound.

    The roofs are the measured ones of the saved profile (`ceiling bench`), or a catalog
    device's datasheet figures with --spec. Example: ceiling roofline --op add:100M
    --op matvec:8192 --op matmul:4096x4096x4096 --measure
    """
    from ceiling.model.opcost import parse_ops
    from ceiling.model.roofline import ridge_point
    from ceiling.vocabulary import normalize_dtype

    dtype = normalize_dtype(dtype) if dtype is not None else default_dtype(spec, profile)
    ops = [cost for text in op_list(op) for cost in parse_ops(text, dtype)]
    roofs = _roofs(spec, profile, dtype)
    ridge = ridge_point(roofs["peak_flops_per_s"], roofs["bandwidth_bytes_per_s"])
    rows = _rows(ops, roofs, measure)
    if plot is not None:
        _plot(plot, roofs, rows, dtype)
    if json_out:
        emit_json(
            {
                **roofs,
                "dtype": dtype,
                "ridge_flops_per_byte": ridge,
                "units": "FLOP (multiply-add = 2), bytes, seconds; GB = 1e9 bytes",
                "ops": rows,
                "plot": str(plot) if plot else None,
            }
        )
        return
    _render(roofs, rows, dtype, ridge, measure, plot)


def _render(roofs: dict[str, Any], rows, dtype: str, ridge: float, measure: bool, plot) -> None:
    c = console()
    where = roofs["profile"] or "catalog"
    c.print(
        f"{roofs['device']} ({roofs['source']}: {where}), {dtype}: "
        f"peak {format_flops_per_s(roofs['peak_flops_per_s'])}, "
        f"bandwidth {format_bandwidth(roofs['bandwidth_bytes_per_s'])} (GB = 1e9 bytes), "
        f"ridge point {ridge:.3g} FLOP/byte"
    )
    if roofs.get("datasheet_peak_flops_per_s"):
        bw = roofs.get("datasheet_bandwidth_bytes_per_s")
        c.print(
            f"datasheet: peak {format_flops_per_s(roofs['datasheet_peak_flops_per_s'])}"
            + (f", bandwidth {format_bandwidth(bw)}" if bw else ", bandwidth not in the datasheet")
        )
    if rows:
        c.print(_ops_table(rows, measure))
    faster = [r["op"] for r in rows if r.get("predicted_over_measured", 1) > 1.3]
    slower = [r["op"] for r in rows if r.get("predicted_over_measured", 1) < 1 / 1.3]
    if faster:
        c.print(
            f"note: {', '.join(faster)} ran more than 30 % faster than the roof allows: the roof "
            "is too low (a profile measured under load or at smaller sizes; run `ceiling bench` "
            "again on a quiet machine)"
        )
    if slower:
        c.print(
            f"note: {', '.join(slower)} ran more than 30 % below the roof: costs the roofline "
            "leaves out (launches, a kernel short of peak, extra passes over memory)"
        )
    if roofs.get("measured_device_name"):
        c.print(
            f"note: predictions are for {roofs['device']} (datasheet); the measured times are "
            f"from this machine's {roofs['measured_device_name']}"
        )
    if plot:
        c.print(f"figure: {plot}")


def _ops_table(rows: list[dict[str, Any]], measure: bool):
    """The ops placed under the roofs, with measured times beside them under --measure."""
    columns = ["op", "FLOP", "bytes", "FLOP/B", "attainable", "predicted", "bound"]
    if measure:
        columns += ["measured", "pred/meas"]
    body = []
    for r in rows:
        line = [
            _short_name(r),
            format_flops(r["flops"]).removesuffix("FLOP").strip(),  # the header has the unit
            format_bytes(r["bytes"]),
            _intensity(r["intensity_flops_per_byte"]),
            format_flops_per_s(r["attainable_flops_per_s"]),
            format_time(r["predicted_s"]),
            r["bound"],
        ]
        if measure:
            line += [format_time(r["measured_s"]), f"{r['predicted_over_measured']:.2f}"]
        body.append(line)
    return table(
        None,
        columns,
        body,
        caption="FLOP counts a multiply-add as 2; GB = 1e9 bytes, each operand read "
        "and each result written once; attainable = min(peak, FLOP/B x bandwidth)",
        compact=True,  # op names stay whole and the columns still fit 80 characters
    )
