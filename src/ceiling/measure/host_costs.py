"""Host time per op of an eager training step, phase by phase.

A plain call of a tiny op costs its dispatch (measure.overhead.time_tiny_op). An eager
training step pays more per op, and differently in each phase: the forward runs the
modules' Python around each op and records the autograd graph; the backward runs one
autograd engine node per op; a per-parameter optimizer (foreach=False) loops over the
parameters in Python, a foreach one runs a few ops over lists of tensors. Each is timed
here on a small stack of tiny modules (linear, layer norm, GELU: the ops a network's
blocks are made of) whose ops do almost no work, and divided by the aten ops that phase
dispatches (counted once, untimed): seconds of host per op of that phase.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ceiling.measure.once import measured_once
from ceiling.measure.timer import benchmark

BLOCKS = 8  # tiny blocks of the timed stack
WIDTH = 8  # features of each tiny layer: the ops' own work is negligible
QUICK_BUDGET_MS = 60.0


@dataclass(frozen=True)
class HostCosts:
    """Seconds of host time per aten op, by phase of a training step."""

    forward_s: float
    backward_s: float
    optimizer_s: float  # per-parameter optimizer (a Python loop over the parameters)
    optimizer_foreach_s: float  # foreach optimizer: per op over the whole list

    def by_phase(self) -> dict[str, float]:
        """As model.roofline.Roofs.host_s_by_phase reads them."""
        return {
            "forward": self.forward_s,
            "backward": self.backward_s,
            "optimizer": self.optimizer_s,
            "optimizer_foreach": self.optimizer_foreach_s,
        }

    def row(self) -> dict[str, float]:
        return asdict(self)


def from_row(row) -> HostCosts | None:
    """HostCosts from a machine profile's saved row (None when absent or malformed)."""
    try:
        costs = HostCosts(**{k: float(row[k]) for k in HostCosts.__dataclass_fields__})
    except (KeyError, TypeError, ValueError):
        return None
    return costs if all(v > 0 for v in asdict(costs).values()) else None


def quick_host_costs(device: str) -> HostCosts:
    """time_host_costs at the quick budget, once per process, device and thread count."""
    return measured_once("host_costs", device, lambda: time_host_costs(device))


def count_ops(fn) -> int:
    """Aten ops `fn()` dispatches."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.n += 1
            return func(*args, **(kwargs or {}))

    with Count() as counter:
        fn()
    return counter.n


def time_host_costs(device: str, budget_ms: float = QUICK_BUDGET_MS) -> HostCosts:
    """Median host seconds per op of each phase (see the module docstring)."""
    import torch
    from torch import nn

    def block():
        return nn.Linear(WIDTH, WIDTH), nn.LayerNorm(WIDTH), nn.GELU()

    model = nn.Sequential(*(m for _ in range(BLOCKS) for m in block())).to(device)
    x = torch.randn(2, WIDTH, device=device)
    loop = torch.optim.AdamW(model.parameters(), foreach=False)
    foreach = torch.optim.AdamW(model.parameters(), foreach=True)

    def forward():
        return model(x).sum()

    def forward_backward() -> None:
        forward().backward()

    for step in (forward_backward, loop.step, foreach.step):  # state and caches made
        step()
    ops = {
        "forward": count_ops(forward),
        "both": count_ops(forward_backward),
        "loop": count_ops(loop.step),
        "foreach": count_ops(foreach.step),
    }

    def median(fn) -> float:
        times = benchmark(fn, device=device, warmup_ms=5.0, budget_ms=budget_ms / 4, flush=None)
        return sorted(times)[len(times) // 2]

    fw, both = median(forward), median(forward_backward)
    return HostCosts(
        forward_s=fw / ops["forward"],
        backward_s=max(both - fw, 0.0) / max(ops["both"] - ops["forward"], 1),
        optimizer_s=median(loop.step) / ops["loop"],
        optimizer_foreach_s=median(foreach.step) / ops["foreach"],
    )
