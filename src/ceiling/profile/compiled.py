"""A compiled model (torch.compile): what runs is the compiled graph's kernels, not the
eager ops the recorder counts FLOPs from.

Inductor fuses a graph's pointwise and reduction ops into generated kernels (C++ loops
on a CPU, Triton on a GPU) and calls library kernels (matmul, convolution) for the rest.
The FLOPs are the same as eager; the time goes to far fewer, fused kernels. With its
kernel profiling on (inductor's `cpp.enable_kernel_profile`), each generated CPU kernel
runs inside a profiler range named after it ("graph_0_cpp_fused_gelu_native_layer_norm_0");
Triton kernels on a GPU are named "triton_...". One step under torch.profiler lists
them, with their calls and time.

On a CPU, inductor compiles its kernels with a C++ compiler: without one the feature is
refused in one line.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

from ceiling.errors import UnsupportedOnDevice

GENERATED = ("cpp_fused", "triton_", "cpp_kernel")  # in the names of inductor's kernels
COMPILERS = ("c++", "g++", "clang++")


@dataclass(frozen=True)
class Kernel:
    name: str
    calls: int
    time_s: float


def is_compiled(model) -> bool:
    """A module torch.compile wrapped (or compiled in place with `module.compile()`)."""
    import torch

    if isinstance(model, torch._dynamo.eval_frame.OptimizedModule):
        return True
    return any(getattr(m, "_compiled_call_impl", None) is not None for m in model.modules())


def check_compiler(device: str) -> None:
    """Refuse torch.compile on a CPU without a C++ compiler (inductor needs one there)."""
    if device.startswith(("cuda", "meta")):
        return
    wanted = os.environ.get("CXX")
    if any(shutil.which(c) for c in ((wanted,) if wanted else COMPILERS)):
        return
    raise UnsupportedOnDevice(
        "a compiled model on a CPU needs a C++ compiler (torch.compile's inductor builds its "
        f"kernels with one); none of {', '.join((wanted,) if wanted else COMPILERS)} is on PATH"
    )


def kernel_profiling():
    """Inductor's setting that names each generated CPU kernel in the profiler (set before
    the model compiles, i.e. before its first step)."""
    import torch._inductor.config as inductor

    return inductor.patch({"cpp.enable_kernel_profile": True})


def kernels(events) -> list[Kernel]:
    """The generated kernels among profiler rows (key, count, self CPU or device time in
    µs), slowest first."""
    found = {}
    for key, count, time_us in events:
        if any(g in key for g in GENERATED):
            calls, total = found.get(key, (0, 0.0))
            found[key] = (calls + count, total + time_us * 1e-6)
    rows = [Kernel(k, c, t) for k, (c, t) in found.items()]
    return sorted(rows, key=lambda k: (-k.time_s, k.name))


def profiled_kernels(step, device: str) -> list[Kernel]:
    """Run `step()` once under torch.profiler; its generated kernels."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if device.startswith("cuda"):
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        step()
    rows = []
    for e in prof.key_averages():
        device_us = getattr(e, "device_time_total", 0.0) or 0.0
        rows.append((e.key, e.count, device_us or e.cpu_time_total))
    return kernels(rows)
