"""This machine as a result: `ceiling.info()` (the CPU, its peaks per dtype, torch, GPUs)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ceiling.api.arguments import checked
from ceiling.api.result import Result

# Why a dtype is not native, in words a user can act on.
NOT_NATIVE = {
    "bf16": (
        "no AVX512_BF16, AMX-BF16 or ARM BF16: bf16 matmul runs in emulation here, often "
        "hundreds of times slower than fp32 — use fp32 on this CPU"
    ),
    "fp16": (
        "no AVX512_FP16, AMX-FP16 or ARM FP16 arithmetic: fp16 matmul runs in emulation here, "
        "often hundreds of times slower than fp32 — use fp32 on this CPU"
    ),
    "tf32": "a GPU tensor-core format, not a CPU one; on a CPU torch computes fp32 instead",
    "int8": "no VNNI/AMX/SDOT: int8 dot products take several instructions each",
}


def _torch_info() -> dict | None:
    try:
        import torch
    except ImportError:
        return None
    return {
        "version": torch.__version__,
        "threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(),
        "cuda_available": torch.cuda.is_available(),
        "cuda_version": torch.version.cuda,
        "mkldnn": bool(torch.backends.mkldnn.is_available()),
    }


def _gpu_json(g) -> dict:
    return {
        "index": g.index,
        "name": g.name,
        "sms": g.sms,
        "memory_bytes": g.memory_bytes,
        "l2_bytes": g.l2_bytes,
        "compute_capability": g.compute_capability,
        "catalog_key": g.catalog_key,
        "catalog_peak_flops_per_s": dict(g.catalog.peak_flops_per_s) if g.catalog else None,
        "catalog_memory_bandwidth_bytes_per_s": (
            g.catalog.memory_bandwidth_bytes_per_s if g.catalog else None
        ),
    }


def measured_vs_peak(cpu) -> dict | None:
    """The saved profile's best matmul rates for this CPU against its derived peak.

    A rate above the peak cannot come from more FLOPs per cycle than the vector model
    allows; it bounds the clock the cores really ran at from below (the clock readable in a
    VM is often only the nominal one). None without a saved measurement of this CPU.
    """
    from ceiling.errors import CeilingError
    from ceiling.hardware.profile import default_profile_path, load_profile

    path = default_profile_path()
    try:  # none saved, or unreadable: nothing to compare
        profile = load_profile(path)
    except CeilingError:
        return None
    dev = next((d for d in profile.devices if d.kind == "cpu" and d.name == cpu.model), None)
    if dev is None or not dev.peak_flops_per_s:
        return None
    fractions = {
        d: rate / cpu.peak_flops_per_s[d]
        for d, rate in dev.peak_flops_per_s.items()
        if cpu.peak_flops_per_s.get(d)
    }
    if not fractions:
        return None
    top = max(fractions, key=fractions.get)
    implied = cpu.freq_hz * fractions[top] if cpu.freq_hz and fractions[top] > 1 else None
    return {
        "profile": str(path),
        "measured_flops_per_s": dict(dev.peak_flops_per_s),
        "peak_fraction": fractions,
        "implied_min_clock_hz": implied,
        "implied_from": top if implied else None,
    }


@dataclass(frozen=True)
class InfoResult(Result):
    """This machine: `cpu` (the detected `CpuInfo`), `torch` (its version and threads; None
    when torch is not importable), `gpus` (those torch sees, matched to the catalog) and
    `measured` (the saved profile's matmul rates against the CPU's peak, or None)."""

    cpu: Any  # hardware.cpu.CpuInfo
    torch: dict | None
    gpus: list[Any]  # hardware.gpu.GpuInfo
    measured: dict | None
    title = "This machine"

    @property
    def not_native_why(self) -> dict[str, str]:
        return {d: NOT_NATIVE[d] for d, ok in self.cpu.native.items() if not ok}

    def record(self) -> dict[str, Any]:
        cpu = self.cpu
        return {
            "cpu": {
                "model": cpu.model,
                "vendor": cpu.vendor,
                "arch": cpu.arch,
                "cores": cpu.cores,
                "threads": cpu.threads,
                "caches_bytes": cpu.caches,
                "llc_bytes": cpu.llc_bytes,
                "freq_hz": cpu.freq_hz,
                "freq_source": cpu.freq_source,
                "clocks_hz": cpu.clocks_hz,
                "features": list(cpu.features),
                "isa": cpu.isa,
                "flops_per_cycle_per_core": cpu.flops_per_cycle_per_core,
                "peak_flops_per_s": cpu.peak_flops_per_s,
                "native": cpu.native,
                "not_native_why": self.not_native_why,
                "assumptions": list(cpu.assumptions),
                "memory_bytes": cpu.memory_bytes,
                "notes": list(cpu.notes),
                "measured_vs_peak": self.measured,
            },
            "torch": self.torch,
            "gpus": [_gpu_json(g) for g in self.gpus],
        }

    def heading(self) -> str:
        return f"This machine: {self.cpu.model}, {len(self.gpus)} GPU(s)"


@checked
def info() -> InfoResult:
    """This machine: CPU, caches, clocks, SIMD features, theoretical peak per dtype, GPUs."""
    from ceiling.hardware import cpu as cpu_module
    from ceiling.hardware import gpu as gpu_module

    cpu = cpu_module.detect_cpu()
    torch_info = _torch_info()
    gpus = gpu_module.detect_gpus() if torch_info else []
    return InfoResult(cpu, torch_info, gpus, measured_vs_peak(cpu))
