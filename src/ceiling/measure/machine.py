"""What device the benchmarks run on, what it should reach, and the environment they ran in."""

from __future__ import annotations

import contextlib
import os
import platform
import re
from typing import Any

from ceiling.errors import DoesNotFit, InvalidInput, UnsupportedOnDevice

# Compute capability from which each dtype runs on tensor cores / native units.
_CUDA_NATIVE_FROM = {
    "fp64": (0, 0),
    "fp32": (0, 0),
    "fp16": (7, 0),
    "tf32": (8, 0),
    "bf16": (8, 0),
    "fp8": (8, 9),
}


def pick_device(device: str | None = None) -> str:
    """'cpu', 'cuda' or 'cuda:N'; None means the GPU when there is one, else the CPU."""
    import torch

    if device is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    text = device.strip().lower()
    if text == "gpu":
        text = "cuda"
    if text == "cpu":
        return "cpu"
    if re.fullmatch(r"cuda(:\d+)?", text):
        if not torch.cuda.is_available():
            raise UnsupportedOnDevice(f"--device {device}: no CUDA device is visible here")
        index = int(text.split(":")[1]) if ":" in text else 0
        if index >= torch.cuda.device_count():
            raise UnsupportedOnDevice(
                f"--device {device}: only {torch.cuda.device_count()} CUDA device(s) here"
            )
        return text
    raise InvalidInput(f"unknown device {device!r}; use cpu, cuda or cuda:N")


def is_cuda(device: str) -> bool:
    return device.startswith("cuda")


def cpu_info():
    """The local CPU's description (hardware.cpu.detect_cpu), or None if it cannot be read."""
    try:
        from ceiling.hardware.cpu import detect_cpu

        return detect_cpu()
    except (ImportError, OSError):
        return None


def device_name(device: str) -> str:
    if is_cuda(device):
        import torch

        return torch.cuda.get_device_name(torch.device(device))
    info = cpu_info()
    return getattr(info, "model", None) or platform.processor() or "CPU"


def catalog_spec(device: str):
    """The datasheet spec for a GPU by its driver name; None for CPUs or unknown GPUs."""
    if not is_cuda(device):
        return None
    from ceiling.hardware.catalog import match_driver_name

    return match_driver_name(device_name(device))


def datasheet_peaks(device: str) -> dict[str, float]:
    """Dense peak FLOP/s per dtype: the catalog for GPUs, the derived figure for CPUs."""
    if is_cuda(device):
        spec = catalog_spec(device)
        return dict(spec.peak_flops_per_s) if spec else {}
    info = cpu_info()
    return dict(getattr(info, "peak_flops_per_s", None) or {})


def datasheet_note(device: str) -> str | None:
    """What to say when a GPU has no catalog entry: nothing is guessed in its place."""
    if not is_cuda(device) or catalog_spec(device) is not None:
        return None
    return (
        f"{device_name(device)} has no catalog entry, so no datasheet peak is assumed: the "
        "measured ceiling is the only one (describe it in a .toml — `ceiling specs "
        "--template` — and pass --spec FILE or add its directory to CEILING_CATALOG)"
    )


def telemetry_reader(device: str):
    """(reader, None), or (None, why not), for this device's clocks, power, temperature."""
    from ceiling.hardware import telemetry

    rocm = False
    if is_cuda(device):
        import torch

        rocm = bool(getattr(torch.version, "hip", None))
    reader = telemetry.reader_for(device, rocm=rocm)
    return reader, None if reader else telemetry.unavailable_reason(device, rocm=rocm)


def datasheet_bandwidth(device: str) -> float | None:
    spec = catalog_spec(device)
    return spec.memory_bandwidth_bytes_per_s if spec else None


def native_dtypes(device: str) -> dict[str, bool]:
    """Which matmul dtypes run on native units (others are emulated, often 10-100x slower)."""
    if is_cuda(device):
        import torch

        cap = torch.cuda.get_device_capability(torch.device(device))
        return {d: cap >= need for d, need in _CUDA_NATIVE_FROM.items()}
    info = cpu_info()
    native = dict(getattr(info, "native", None) or {"fp64": True, "fp32": True})
    native["tf32"] = False  # no CPU has a TF32 mode
    native["fp8"] = False
    return native


def last_level_cache_bytes(device: str) -> float:
    """LLC of the CPU, or L2 of the GPU; 32 MiB when it cannot be read."""
    if is_cuda(device):
        import torch

        return float(torch.cuda.get_device_properties(torch.device(device)).L2_cache_size)
    info = cpu_info()
    for holder in (info, getattr(info, "caches", None)):
        if holder is None:
            continue
        value = (
            holder.get("llc_bytes")
            if isinstance(holder, dict)
            else getattr(holder, "llc_bytes", None)
        )
        if value:
            return float(value)
    return 32.0 * 2**20


def device_memory_bytes(device: str) -> float | None:
    if is_cuda(device):
        import torch

        return float(torch.cuda.get_device_properties(torch.device(device)).total_memory)
    import psutil

    return float(psutil.virtual_memory().total)


@contextlib.contextmanager
def float32_matmul_mode(tf32: bool):
    """fp32 matmuls in IEEE fp32, or (tf32=True) on TF32 tensor cores; the caller's settings
    restored after.

    Newer torch has per-backend settings (cuda, mkldnn) and refuses the older global read
    once they are mixed, so they are used where they exist. A CPU (mkldnn) always stays
    IEEE: tf32 is a GPU mode, and 'high' could let oneDNN use reduced precision.
    """
    import torch

    cuda = torch.backends.cuda.matmul
    mkldnn = getattr(getattr(torch.backends, "mkldnn", None), "matmul", None)
    if hasattr(cuda, "fp32_precision") and hasattr(mkldnn, "fp32_precision"):
        before = cuda.fp32_precision, mkldnn.fp32_precision
        cuda.fp32_precision = "tf32" if tf32 else "ieee"
        mkldnn.fp32_precision = "ieee"
        try:
            yield
        finally:
            cuda.fp32_precision, mkldnn.fp32_precision = before
        return
    before_global = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before_global)


def free_memory_bytes(device: str) -> float | None:
    """Memory a benchmark may still allocate: free device memory, or available host RAM."""
    try:
        if is_cuda(device):
            import torch

            free, _total = torch.cuda.mem_get_info(torch.device(device))
            return float(free)
        import psutil

        return float(psutil.virtual_memory().available)
    except Exception:  # unknown is not a reason to refuse; the allocation will tell
        return None


# Leave this share of the free memory to everything else (the allocator, the reference check).
FIT_SHARE = 0.8


def check_fits(needed_bytes: float, device: str, what: str) -> None:
    """Raise DoesNotFit, with the arithmetic, when `what` needs more than the free memory."""
    from ceiling.units import format_bytes

    free = free_memory_bytes(device)
    if free is not None and needed_bytes > FIT_SHARE * free:
        raise DoesNotFit(
            f"{what} needs {format_bytes(needed_bytes, binary=True)} on {device} but only "
            f"{format_bytes(free, binary=True)} is free (at most {FIT_SHARE:.0%} is used); "
            "choose a smaller size"
        )


def _blas_backend(torch) -> str:
    """The BLAS torch was built with, from torch.__config__.show()."""
    try:
        text = torch.__config__.show()
    except Exception:  # the config text is informational; never fail a run over it
        return "unknown"
    for key in ("BLAS_INFO", "USE_MKL"):
        m = re.search(rf"{key}=([^,\s]+)", text)
        if m:
            return m.group(1) if key == "BLAS_INFO" else "mkl"
    return "unknown"


def environment(device: str) -> dict[str, Any]:
    """Library versions, BLAS, threads, device and clocks where readable."""
    import numpy
    import torch

    env: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "blas": _blas_backend(torch),
        "threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "device": device,
        "device_name": device_name(device),
    }
    if hasattr(os, "getloadavg"):  # other work on the machine as the measurement starts
        env["load_average_1min"] = round(os.getloadavg()[0], 2)
    try:
        import psutil

        freq = psutil.cpu_freq()
        if freq:
            env["cpu_clock_hz"] = freq.current * 1e6
    except (ImportError, OSError, NotImplementedError):
        pass
    if is_cuda(device):
        dev = torch.device(device)
        props = torch.cuda.get_device_properties(dev)
        env["cuda"] = torch.version.cuda
        env["capability"] = "{}.{}".format(*torch.cuda.get_device_capability(dev))
        env["sms"] = props.multi_processor_count
        # Needs pynvml; the clock is informative, so a missing library or a refusing driver
        # leaves it out.
        with contextlib.suppress(Exception):
            env["gpu_clock_hz"] = torch.cuda.clock_rate(dev) * 1e6
    return env
