"""Each op (name and input shapes) summed over the analysed steps and placed under the
device's roofline: its time, its roofline time, and the time lost above it. Pure."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ceiling.model import roofline
from ceiling.trace.results import OpRow


@dataclass(frozen=True)
class Roof:
    """peak(dtype) -> the roof's FLOP/s for that dtype (None if the device has none; measured
    for a machine profile); the main roof (the dtype most matmuls ran in); memory bandwidth;
    and the dense datasheet peaks MFU is measured against (`model.mfu`)."""

    peak: Callable[[str | None], float | None]
    main_peak_flops_per_s: float
    bandwidth_bytes_per_s: float
    datasheet_peak: Callable[[str | None], float | None]
    main_datasheet_peak_flops_per_s: float | None


def shapes_text(args: dict) -> str:
    dims = args.get("Input Dims")
    if not isinstance(dims, list):
        return ""
    return " ".join(
        "x".join(str(d) for d in x)
        for x in dims
        if isinstance(x, list) and x and all(isinstance(d, int) for d in x)
    )


def op_rows(records, rec_step, op_time, roof: Roof | None, precisions=None) -> list[OpRow]:
    """`precisions`: record index -> the dtype its kernels ran in (TF32 for an fp32 GEMM on
    tensor cores), which places the op under that dtype's peak."""
    groups: dict[tuple, OpRow] = {}
    precisions = precisions or {}
    for i, (r, s, t) in enumerate(zip(records, rec_step, op_time, strict=True)):
        if s < 0 or r.comm:
            continue
        c = r.cost
        key = (r.name, shapes_text(r.event.args))
        row = groups.get(key)
        if row is None:
            row = groups[key] = OpRow(
                name=r.name,
                shapes=key[1],
                dtype=precisions.get(i) or (c.dtype if c else None),
                category=c.category if c else "unknown",
                calls=0,
                time_s=0.0,
                flops=0.0,
                bytes=0.0,
                flops_exact=True,
            )
        row.calls += 1
        row.time_s += t
        if c is None or c.flops is None:
            row.flops, row.flops_exact = None, False
        elif row.flops is not None:
            row.flops += c.flops
            row.flops_exact = row.flops_exact and c.flops_exact
        if c is None or c.bytes is None:
            row.bytes = None
        elif row.bytes is not None:
            row.bytes += c.bytes
    rows = list(groups.values())
    for row in rows:
        _place(row, roof)
    rows.sort(key=lambda r: (r.lost_s is None, -(r.lost_s or 0.0), -r.time_s))
    return rows


def _place(row: OpRow, roof: Roof | None) -> None:
    if row.flops is None or row.bytes is None or (row.flops == 0 and row.bytes == 0):
        return
    if row.time_s > 0:
        row.achieved_flops_per_s = row.flops / row.time_s
    if row.bytes > 0:
        row.intensity = row.flops / row.bytes
    if roof is None:
        return
    peak = roof.peak(row.dtype) or roof.main_peak_flops_per_s
    bw = roof.bandwidth_bytes_per_s
    row.roof_time_s = roofline.predicted_time_s(row.flops, row.bytes, peak, bw)
    row.lost_s = max(row.time_s - row.roof_time_s, 0.0)
    if row.intensity is not None:
        row.attainable_flops_per_s = roofline.attainable_flops_per_s(row.intensity, peak, bw)
        row.bound = roofline.bound(row.intensity, peak, bw)
    else:
        row.bound = "compute"
