"""Host time per op of an eager training step, phase by phase.

A plain call of a tiny op costs its dispatch (measure.overhead.time_tiny_op). An eager
training step pays more per op, and differently in each phase: the forward runs the
modules' Python around each op and records the autograd graph; the backward runs one
autograd engine node per op; a per-parameter optimizer (foreach=False) loops over the
parameters in Python, a foreach one runs a few ops over lists of tensors. Each is timed
here on a small stack of tiny modules (linear, layer norm, GELU: the ops a network's
blocks are made of) whose ops do almost no work, and divided by the aten ops that phase
dispatches (counted once, untimed): seconds of host per op of that phase.

A view (a reshape, a transpose, a detach) launches nothing and runs no module's Python: it
costs its dispatch and its autograd node only, far less than a block's average op. A
chain of views is timed apart, forward and backward, and priced to the views of a step
(a windowed or multi-head model makes hundreds of them).

Each phase is timed in turns with the others (ROUNDS), each turn's median kept, and the
median turn is the phase's cost: on a shared machine a burst of load spoils a turn, not
every figure, while a load that lasts (which the step itself runs under) is in it.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass

from ceiling.measure.once import measured_once
from ceiling.measure.timer import benchmark

BLOCKS = 8  # tiny blocks of the timed stack
WIDTH = 8  # features of each tiny layer: the ops' own work is negligible
VIEWS = 64  # views of the timed chain
ROUNDS = 4  # turns of every phase
QUICK_BUDGET_MS = 60.0


@dataclass(frozen=True)
class HostCosts:
    """Seconds of host time per aten op, by phase of a training step."""

    forward_s: float
    backward_s: float
    optimizer_s: float  # per-parameter optimizer (a Python loop over the parameters)
    optimizer_foreach_s: float  # foreach optimizer: per op over the whole list
    forward_view_s: float | None = None  # a view in the forward (None: as any forward op)
    backward_view_s: float | None = None  # its node in the backward

    def by_phase(self) -> dict[str, float]:
        """As model.roofline.Roofs.host_s_by_phase reads them ("forward_view": a view of
        the forward)."""
        views = {"forward_view": self.forward_view_s, "backward_view": self.backward_view_s}
        return {
            "forward": self.forward_s,
            "backward": self.backward_s,
            "optimizer": self.optimizer_s,
            "optimizer_foreach": self.optimizer_foreach_s,
            **{k: v for k, v in views.items() if v is not None},
        }

    def row(self) -> dict[str, float]:
        return asdict(self)


def from_row(row) -> HostCosts | None:
    """HostCosts from a machine profile's saved row (None when absent, malformed or saved
    before views were timed apart)."""
    try:
        costs = HostCosts(**{k: float(row[k]) for k in HostCosts.__dataclass_fields__})
    except (KeyError, TypeError, ValueError):
        return None
    return costs if all(v > 0 for v in asdict(costs).values()) else None


def quick_host_costs(device: str) -> HostCosts:
    """time_host_costs at the quick budget, once per process, device and thread count."""
    return measured_once("host_costs", device, lambda: time_host_costs(device))


def count_ops(fn, views_only: bool = False) -> int:
    """Aten ops `fn()` dispatches (only its views with `views_only`)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.n += 1 if func.is_view or not views_only else 0
            return func(*args, **(kwargs or {}))

    with Count() as counter:
        fn()
    return counter.n


def time_host_costs(device: str, budget_ms: float = QUICK_BUDGET_MS) -> HostCosts:
    """Host seconds per op of each phase (see the module docstring)."""
    import torch
    from torch import nn

    def block():
        return nn.Linear(WIDTH, WIDTH), nn.LayerNorm(WIDTH), nn.GELU()

    model = nn.Sequential(*(m for _ in range(BLOCKS) for m in block())).to(device)
    x = torch.randn(2, WIDTH, device=device)
    loop = torch.optim.AdamW(model.parameters(), foreach=False)
    foreach = torch.optim.AdamW(model.parameters(), foreach=True)
    leaf = torch.randn(2, WIDTH, device=device, requires_grad=True)

    def forward():
        return model(x).sum()

    def forward_backward() -> None:
        forward().backward()

    def views():
        y = leaf
        for i in range(VIEWS):
            y = y.view(-1) if i % 2 == 0 else y.view(2, WIDTH)
        return y

    def views_backward() -> None:
        views().backward(torch.ones(2, WIDTH, device=device))

    phases = {"forward": forward, "both": forward_backward, "loop": loop.step,
              "foreach": foreach.step, "views": views, "views_both": views_backward}  # fmt: skip
    for step in phases.values():  # state and caches made
        step()
    ops = {k: count_ops(fn) for k, fn in phases.items()}
    view_ops = {k: count_ops(phases[k], views_only=True) for k in ("views", "views_both")}
    turns: dict[str, list[float]] = {k: [] for k in phases}
    turn_ms = budget_ms / (ROUNDS * len(phases))
    for _ in range(ROUNDS):
        for k, fn in phases.items():
            samples = benchmark(fn, device=device, warmup_ms=1.0, budget_ms=turn_ms, flush=None)
            turns[k].append(statistics.median(samples))
    times = {k: statistics.median(v) for k, v in turns.items()}
    fw, both = times["forward"], times["both"]
    return HostCosts(
        forward_s=fw / ops["forward"],
        backward_s=max(both - fw, 0.0) / max(ops["both"] - ops["forward"], 1),
        optimizer_s=times["loop"] / ops["loop"],
        optimizer_foreach_s=times["foreach"] / ops["foreach"],
        forward_view_s=times["views"] / max(view_ops["views"], 1),
        backward_view_s=max(times["views_both"] - times["views"], 0.0)
        / max(ops["views_both"] - ops["views"], 1),
    )
