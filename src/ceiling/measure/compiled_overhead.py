"""Host time of one call of a compiled frame (torch.compile) beyond its kernels: the guards
dynamo checks, the runtime wrappers around the compiled graph and, in a training step, the
autograd node that runs its compiled backward and the gradient it accumulates.

Measured on a one-element tensor, so that its kernels do no work: the median call less the
host cost of the generated kernels it runs (one forward; one more backward when training).
Once per process, device, thread count and direction (measure.once): it describes torch's
runtime on this machine, not the model.
"""

from __future__ import annotations

from ceiling.measure.once import measured_once
from ceiling.measure.stats import summarize
from ceiling.measure.timer import HostTimer, benchmark, device_sync

PROBE_KERNELS = {False: 1, True: 2}  # generated kernels the probe runs: forward, + backward
WARMUP_MS = 50.0  # after its compile, the first calls of a frame settle its guards
BUDGET_MS = 100.0


def _probe(x):
    return (x * 2.0).sum()


def _median_call_s(device: str, train: bool) -> float:
    import torch

    compiled = torch.compile(_probe)
    x = torch.ones(1, device=device, requires_grad=train)

    def call() -> None:
        if train:
            compiled(x).backward()
            return
        with torch.no_grad():
            compiled(x)

    timer = HostTimer(sync=device_sync(device))
    samples = benchmark(call, device=device, warmup_ms=WARMUP_MS, budget_ms=BUDGET_MS,
                        flush=None, timer=timer)  # fmt: skip
    return summarize(samples).median


def frame_host_s(device: str, train: bool, per_kernel_s: float) -> float:
    """Seconds of host time one compiled frame call adds to the kernels it runs, each of
    which costs the host `per_kernel_s` (counted with the kernels)."""
    call_s = measured_once("compiled frame", device, lambda: _median_call_s(device, train), train)
    return max(call_s - PROBE_KERNELS[train] * per_kernel_s, 0.0)
