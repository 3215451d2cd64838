"""The GPUs torch can see, matched to catalog entries. Imports torch only when called."""

from __future__ import annotations

from dataclasses import dataclass

from ceiling.hardware.catalog import DeviceSpec, match_driver_name


@dataclass(frozen=True)
class GpuInfo:
    """One visible GPU. Sizes in bytes; `catalog` is the matching datasheet entry or None."""

    index: int
    name: str
    sms: int | None
    memory_bytes: float
    l2_bytes: float | None
    compute_capability: str | None
    catalog_key: str | None
    catalog: DeviceSpec | None


def gpu_info_from_properties(index: int, props) -> GpuInfo:
    """GpuInfo from an object shaped like torch.cuda.get_device_properties(i)."""
    name = str(getattr(props, "name", "") or f"GPU {index}")
    l2 = getattr(props, "L2_cache_size", None)  # absent in older torch builds
    major, minor = getattr(props, "major", None), getattr(props, "minor", None)
    spec = match_driver_name(name)
    return GpuInfo(
        index=index,
        name=name,
        sms=getattr(props, "multi_processor_count", None),
        memory_bytes=float(getattr(props, "total_memory", 0)),
        l2_bytes=float(l2) if l2 else None,
        compute_capability=f"{major}.{minor}" if major is not None else None,
        catalog_key=spec.key if spec else None,
        catalog=spec,
    )


def detect_gpus() -> list[GpuInfo]:
    """Every CUDA (or ROCm) device torch sees; empty without torch or without a GPU."""
    try:
        import torch
    except ImportError:
        return []
    if not torch.cuda.is_available():
        return []
    return [
        gpu_info_from_properties(i, torch.cuda.get_device_properties(i))
        for i in range(torch.cuda.device_count())
    ]
