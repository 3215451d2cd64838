"""The ceiling a profile is measured against: dense peak for MFU, roofline for placement.

--spec NAME: that catalog device. Otherwise the machine profile (measured peaks and
bandwidth, with the datasheet or theoretical dense peak beside it), else the datasheet
(GPU) or the CPU's theoretical peak with a quick bandwidth measurement.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from ceiling.model import mfu as mfu_model


@dataclass
class Ceiling:
    name: str
    source: str
    kind: str  # "cpu" | "gpu"
    peak_key: str
    peak_flops_per_s: float  # dense datasheet / theoretical peak for the dtype in use
    bandwidth_bytes_per_s: float
    measured_peak_flops_per_s: float | None = None  # from a machine profile, if any

    @property
    def roof_flops_per_s(self) -> float:
        """The compute roof ops are placed under: measured when a profile has it."""
        return self.measured_peak_flops_per_s or self.peak_flops_per_s


def resolve_ceiling(
    device: torch.device, dtype_key: str, tf32: bool, spec: str | None, profile: str | None
) -> Ceiling:
    from ceiling.hardware.catalog import normalize_dtype
    from ceiling.hardware.resolve import check_one_device

    check_one_device(spec, profile)  # the one device rule
    kind = "gpu" if device.type == "cuda" else "cpu"
    peak_key = mfu_model.peak_key(normalize_dtype(dtype_key), tf32, kind)
    if spec is not None:
        from ceiling.hardware.resolve import resolve

        s = resolve(spec, None).spec
        if device.type == "meta":  # nothing runs here: the spec's device is the one counted
            peak_key = mfu_model.peak_key(normalize_dtype(dtype_key), tf32, s.kind)
        source = f"datasheet spec {s.key}"
        if s.kind != kind and device.type != "meta":
            source += f" (a {s.kind}; the step ran on this {kind}, so MFU is against {s.key})"
        return Ceiling(
            s.name, source, s.kind, peak_key, s.peak(peak_key), s.memory_bandwidth_bytes_per_s,
        )  # fmt: skip
    from ceiling.measure.decode import local_ceiling

    # on meta nothing runs: the roofline is this machine's CPU
    # a step reads and writes: the profile's read+write bandwidth, never decode's read-only rate
    where = "cpu" if device.type == "meta" else str(device)
    local = local_ceiling(where, profile, reads_only=False)
    m, s = local.machine, local.spec
    measured = m.measured_peak(peak_key) if m.from_profile else None
    # MFU's peak is the datasheet's (theoretical for a CPU); a device the catalog lacks has
    # only its measured rate, which then stands in and the source says so
    dense = m.datasheet_peak(peak_key)
    return Ceiling(
        name=s.name,
        source=local.source if dense or not measured else local.source + "; no datasheet peak",
        kind=s.kind,
        peak_key=peak_key,
        peak_flops_per_s=dense if dense is not None else s.peak(peak_key),
        bandwidth_bytes_per_s=s.memory_bandwidth_bytes_per_s,
        measured_peak_flops_per_s=measured if measured is not None else None,
    )


def tf32_enabled(device: torch.device) -> bool:
    """fp32 matmuls run on TF32 tensor cores: torch's per-backend setting
    (`torch.backends.cuda.matmul.fp32_precision = "tf32"`) or the older global one
    (`torch.set_float32_matmul_precision("high")`, `allow_tf32`); a user's own counts."""
    return device.type == "cuda" and _matmul_precision() == "tf32"


def conv_tf32_enabled(device: torch.device) -> bool:
    """fp32 convolutions run on TF32 tensor cores: cuDNN's setting, on by default."""
    if device.type != "cuda":
        return False
    conv = getattr(torch.backends.cudnn, "conv", None)
    new = getattr(conv, "fp32_precision", "none")
    if new in ("tf32", "ieee"):
        return new == "tf32"
    try:
        return bool(torch.backends.cudnn.allow_tf32)
    except RuntimeError:
        return True


def _matmul_precision() -> str:
    new = getattr(torch.backends.cuda.matmul, "fp32_precision", "none")
    if new in ("tf32", "ieee"):
        return new
    try:
        return "ieee" if torch.get_float32_matmul_precision() == "highest" else "tf32"
    except RuntimeError:  # torch refuses the global read once per-backend settings are mixed in
        return "ieee"


def fp32_runs_tf32(matmul_tf32: bool, conv_tf32: bool, conv_share: float) -> bool:
    """Which peak an fp32 step is measured against: the TF32 one when the kind of op that
    does most of its model FLOPs (convolutions or matmuls) runs on TF32."""
    return conv_tf32 if conv_share > 0.5 else matmul_tf32


@contextmanager
def tf32_on() -> Iterator[None]:
    """fp32 matmuls and convolutions on TF32 inside; the user's settings restored after."""
    matmul = torch.backends.cuda.matmul
    conv = getattr(torch.backends.cudnn, "conv", None)
    if hasattr(matmul, "fp32_precision") and hasattr(conv, "fp32_precision"):
        before = matmul.fp32_precision, conv.fp32_precision
        matmul.fp32_precision = conv.fp32_precision = "tf32"
        try:
            yield
        finally:
            matmul.fp32_precision, conv.fp32_precision = before
        return
    before_old = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    torch.set_float32_matmul_precision("high")  # fp32 matmuls may use TF32 tensor cores
    torch.backends.cudnn.allow_tf32 = True
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before_old[0])
        torch.backends.cudnn.allow_tf32 = before_old[1]
