"""Host<->device and device<->device copy bandwidth, pinned and pageable host memory.

GPU only. Each sample copies one buffer; the rate is bytes copied / time, GB = 1e9 bytes
(device->device counts the bytes copied once, as nvbandwidth does; `best_traffic_gbps` also
counts the read, 2x, the figure to set beside STREAM copy and the HBM datasheet bandwidth).
CUDA events bracket each copy; pageable copies go through the driver's staging buffer,
which is why they are slower than pinned ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ceiling.errors import UnsupportedOnDevice
from ceiling.measure import machine
from ceiling.measure.stats import Stats, summarize
from ceiling.measure.timer import benchmark

SIZES_BYTES = (2**20, 16 * 2**20, 256 * 2**20)
QUICK_SIZES_BYTES = (256 * 2**20,)


@dataclass(frozen=True)
class TransferResult:
    direction: str  # h2d | d2h | d2d
    host_memory: str  # pinned | pageable | device (for d2d)
    bytes: int
    samples: list[float]
    stats: Stats

    @property
    def best_gbps(self) -> float:
        return self.bytes / self.stats.min / 1e9

    @property
    def median_gbps(self) -> float:
        return self.bytes / self.stats.median / 1e9

    @property
    def traffic_bytes(self) -> int:
        """Bytes through the memory that limits the copy: a device-to-device copy reads and
        writes every byte in the same HBM (2x); a host copy crosses the link once."""
        return 2 * self.bytes if self.direction == "d2d" else self.bytes

    @property
    def best_traffic_gbps(self) -> float:
        return self.traffic_bytes / self.stats.min / 1e9

    def row(self) -> dict[str, Any]:
        return {
            "direction": self.direction,
            "host_memory": self.host_memory,
            "bytes": self.bytes,
            "best_gbps": self.best_gbps,
            "median_gbps": self.median_gbps,
            "traffic_bytes": self.traffic_bytes,
            "best_traffic_gbps": self.best_traffic_gbps,
            "best_s": self.stats.min,
            "median_s": self.stats.median,
            "samples": len(self.samples),
        }


def skip_reason(device: str) -> str | None:
    if not machine.is_cuda(device):
        return "transfer bandwidth needs a CUDA device; this run is on the CPU"
    return None


def _copies(src_dev, dst_dev, pageable, pinned):
    """(direction, host memory, one copy) for each case, on buffers of the same size."""
    return [
        ("h2d", "pinned", lambda: dst_dev.copy_(pinned, non_blocking=True)),
        ("h2d", "pageable", lambda: dst_dev.copy_(pageable)),
        ("d2h", "pinned", lambda: pinned.copy_(src_dev, non_blocking=True)),
        ("d2h", "pageable", lambda: pageable.copy_(src_dev)),
        ("d2d", "device", lambda: dst_dev.copy_(src_dev)),
    ]


def run_transfer(
    device: str,
    *,
    sizes: tuple[int, ...] = SIZES_BYTES,
    warmup_ms: float = 10.0,
    budget_ms: float = 100.0,
) -> list[TransferResult]:
    import torch

    reason = skip_reason(device)
    if reason:
        raise UnsupportedOnDevice(reason)
    results = []
    for size in sizes:
        src_dev = torch.empty(size, dtype=torch.uint8, device=device).fill_(7)
        dst_dev = torch.empty_like(src_dev)
        pageable = torch.full((size,), 7, dtype=torch.uint8)
        pinned = torch.full((size,), 7, dtype=torch.uint8).pin_memory()
        cases = _copies(src_dev, dst_dev, pageable, pinned)
        for direction, memory, fn in cases:
            samples = benchmark(
                fn, device=device, warmup_ms=warmup_ms, budget_ms=budget_ms, flush=None
            )
            results.append(TransferResult(direction, memory, size, samples, summarize(samples)))
        torch.cuda.synchronize(torch.device(device))
    return results
