"""`ceiling roofline`: ridge point, ops placed under the roofs, optionally measured."""

from __future__ import annotations

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
    figure_and_json,
    table,
)
from ceiling.units import (
    format_bandwidth,
    format_bytes,
    format_flops,
    format_flops_per_s,
    format_time,
)


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
    from ceiling.api.roofline import roofline as place_ops

    result = place_ops(
        op_list(op), dtype=dtype, spec=spec, machine_profile=profile, measure=measure
    )
    if figure_and_json(result, plot, json_out):
        return
    _render(result.roofs, result.ops, result.dtype, result.ridge_flops_per_byte, measure, plot)


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
