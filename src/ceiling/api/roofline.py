"""The roofline as a result: `ceiling.roofline(["matmul:4096x4096x4096"], spec="h100-sxm")`."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ceiling.api.arguments import checked
from ceiling.api.result import Result
from ceiling.errors import InvalidInput, UnsupportedOnDevice, argument
from ceiling.units import format_time

# measure=True refuses ops whose predicted call is longer than this (it times at least 6 calls).
MEASURE_MAX_CALL_S = 20.0
UNITS = "FLOP (multiply-add = 2), bytes, seconds; GB = 1e9 bytes"


def default_dtype(spec: str | None, profile: Path | str | None) -> str:
    """bf16 for a catalog accelerator (the dtype its tensor cores and published training
    runs use, where attention meets the memory wall); fp32 for a CPU or a measured profile."""
    if spec is None:
        return "fp32"
    from ceiling.hardware.resolve import resolve

    device = resolve(spec, profile).spec
    return "bf16" if device.kind != "cpu" and "bf16" in device.dtypes else "fp32"


def roofs(spec_name: str | None, profile: Path | str | None, dtype: str) -> dict[str, Any]:
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
        # measuring times the ops on the local device of the spec's kind; comparing an
        # H100's prediction with a CPU's timing would be a silently wrong figure.
        out["measure_device"] = {"gpu": "cuda", "cpu": "cpu"}.get(spec.kind)
    else:
        dev = resolved.measured
        out["profile"] = str(resolved.profile_path)
        out["datasheet_peak_flops_per_s"] = dev.datasheet_peak_flops_per_s.get(dtype)
        out["datasheet_bandwidth_bytes_per_s"] = dev.datasheet_bandwidth_bytes_per_s
        out["measure_device"] = "cuda" if dev.kind == "cuda" else "cpu"
    return out


def _placed(op, roof: dict[str, Any]) -> dict[str, Any]:
    from ceiling.model.roofline import place

    p = place(op.name, op.flops, op.bytes, roof["peak_flops_per_s"], roof["bandwidth_bytes_per_s"])
    return {
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


def _measured(ops, rows: list[dict[str, Any]], roof: dict[str, Any]) -> None:
    """Each op timed here beside its prediction (rows gain measured_* keys)."""
    from ceiling.measure.machine import device_name
    from ceiling.measure.ops import time_op

    device = _measure_device(roof)
    if roof["source"] == "datasheet":
        roof["measured_device_name"] = device_name(device)
    for row in rows:
        if row["predicted_s"] > MEASURE_MAX_CALL_S:
            raise InvalidInput(
                f"{argument('measure')}: {row['op']} is predicted to take "
                f"{format_time(row['predicted_s'])} per call and is timed at least 6 times; "
                f"choose a smaller op or drop {argument('measure')}"
            )
    for op, row in zip(ops, rows, strict=True):
        stats = time_op(op, device)
        row["measured_s"] = stats.min
        row["measured_median_s"] = stats.median
        row["measured_flops_per_s"] = op.flops / stats.min
        row["predicted_over_measured"] = row["predicted_s"] / stats.min
        row["measured_on"] = device
        row["within_30pct"] = 1 / 1.3 <= row["predicted_over_measured"] <= 1.3


def _measure_device(roof: dict[str, Any]) -> str:
    """Where measuring runs: the profile's device, or the local device of the spec's kind."""
    from ceiling.measure.machine import pick_device

    where = roof.get("measure_device")
    if where is None:
        raise UnsupportedOnDevice(
            f"{argument('measure')} times the ops on this machine; a {roof['kind']} spec "
            "cannot be run here"
        )
    if where == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise UnsupportedOnDevice(
                f"{argument('measure')} times the ops on this machine, but {roof['device']} is a "
                f"GPU and no CUDA device is visible here; drop {argument('measure')}, or use the "
                "measured profile"
            )
    return pick_device(where)


@dataclass(frozen=True)
class RooflineResult(Result):
    """The device's roofs (`roofs`: peak, bandwidth, where they come from), the ridge point
    and each op placed under them (`ops`: FLOPs, bytes, intensity, bound, predicted time,
    and measured time when measured)."""

    roofs: dict[str, Any]
    dtype: str
    ridge_flops_per_byte: float
    ops: list[dict[str, Any]]
    title = "Roofline"

    @property
    def measured(self) -> bool:
        return any("measured_s" in r for r in self.ops)

    def record(self) -> dict[str, Any]:
        return {
            **self.roofs,
            "dtype": self.dtype,
            "ridge_flops_per_byte": self.ridge_flops_per_byte,
            "units": UNITS,
            "ops": self.ops,
        }

    def heading(self) -> str:
        return (
            f"Roofline of {self.roofs['device']} ({self.dtype}): ridge point "
            f"{self.ridge_flops_per_byte:.3g} FLOP/byte"
        )

    def figure(self):
        from ceiling.render.roofline_plot import OpPoint, Roof, roofline_figure

        r = self.roofs
        label = "measured" if r["source"] == "profile" else "datasheet"
        lines = [Roof(f"{label} roof", r["peak_flops_per_s"], r["bandwidth_bytes_per_s"])]
        if r.get("datasheet_peak_flops_per_s"):
            lines.append(
                Roof(
                    "datasheet roof",
                    r["datasheet_peak_flops_per_s"],
                    r.get("datasheet_bandwidth_bytes_per_s"),
                    style="--",
                )
            )
        points = [
            OpPoint(o["op"], o["intensity_flops_per_byte"], o["attainable_flops_per_s"])
            for o in self.ops
        ]
        points += [
            OpPoint(o["op"], o["intensity_flops_per_byte"], o["measured_flops_per_s"], True)
            for o in self.ops
            if "measured_s" in o
        ]
        return roofline_figure(lines, points, title=f"Roofline of {r['device']} ({self.dtype})")


@checked
def roofline(
    ops: Iterable[str] | str = (),
    *,
    dtype: str | None = None,
    spec: str | None = None,
    machine_profile: Path | str | None = None,
    measure: bool = False,
) -> RooflineResult:
    """Ops ("add:N", "matvec:N", "matmul:MxNxK", "attention:B,H,S,D" for naive and fused)
    under the roofs of a catalog device (`spec`) or the saved machine profile (default);
    `measure` also times them here. `dtype` defaults to bf16 on an accelerator, else fp32."""
    from ceiling.model.opcost import parse_ops
    from ceiling.model.roofline import ridge_point
    from ceiling.vocabulary import normalize_dtype

    dtype = normalize_dtype(dtype) if dtype is not None else default_dtype(spec, machine_profile)
    texts = [ops] if isinstance(ops, str) else list(ops)
    costs = [cost for text in texts for cost in parse_ops(text, dtype)]
    roof = roofs(spec, machine_profile, dtype)
    ridge = ridge_point(roof["peak_flops_per_s"], roof["bandwidth_bytes_per_s"])
    rows = [_placed(op, roof) for op in costs]
    if measure:
        _measured(costs, rows, roof)
    return RooflineResult(roof, dtype, ridge, rows)
