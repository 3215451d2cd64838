"""Refuse early what cannot run: an unknown device, a dtype the device cannot compute in,
a model whose weights (and, to train, gradients and Adam state) exceed free memory."""

from __future__ import annotations

import torch

from ceiling.errors import DoesNotFit, InvalidInput, UnsupportedOnDevice, argument
from ceiling.profile.targets import one_line
from ceiling.vocabulary import FLOAT_DTYPES, normalize_dtype, torch_dtype

# weights + gradients + two Adam moments, each in the model's dtype
TRAIN_STATE_COPIES = 4


def parse_dtype(name: str) -> tuple[str, torch.dtype]:
    """A model's dtype (tf32: fp32 storage, TF32 matmuls) and its torch dtype."""
    usable = tuple(d for d in FLOAT_DTYPES if torch_dtype(d) is not None)
    key = normalize_dtype(name, usable, usage=" for a model")
    return key, torch_dtype(key)


def check_device(device: str) -> torch.device:
    if device not in ("cpu", "cuda", "meta") and not device.startswith("cuda:"):
        raise InvalidInput(f"{argument('device')} must be cpu, cuda or meta, got {device!r}")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UnsupportedOnDevice("no CUDA device is visible here; use --device cpu")
    return torch.device(device)


def check_dtype_runs(device: torch.device, key: str, dtype: torch.dtype) -> None:
    """A tiny matmul in the dtype; a device that cannot run it fails here, not mid-model."""
    try:
        a = torch.ones(16, 16, device=device).to(dtype)
        (a @ a).float().sum().item()
    except (RuntimeError, TypeError, NotImplementedError) as exc:
        raise UnsupportedOnDevice(
            f"{device.type} cannot run {key} matmuls here ({one_line(exc)[:120]})"
        ) from None


def available_memory_bytes(device: torch.device) -> float:
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return float(free)
    import psutil

    return float(psutil.virtual_memory().available)


def check_fits(params: int, itemsize: int, train: bool, available_bytes: float) -> None:
    copies = TRAIN_STATE_COPIES if train else 1
    need = params * itemsize * copies
    if need > available_bytes:
        what = "weights, gradients and two Adam moments" if train else "weights"
        raise DoesNotFit(
            f"{params:,} parameters × {itemsize} B × {copies} ({what}) = "
            f"{need / 2**30:.1f} GiB > {available_bytes / 2**30:.1f} GiB free on the device, "
            "before any activations; --device meta counts its FLOPs and bytes without running"
        )
