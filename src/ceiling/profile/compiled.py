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

What each kernel moves is read while the model compiles (`capture`): inductor's scheduler
knows the buffers every fused kernel reads and writes, their sizes and dtypes
(`get_read_buffer_sizes`, `get_write_buffer_sizes`: each buffer from outside the kernel
once, a buffer produced and consumed inside it not at all). Its library calls (extern
kernels: matmuls, convolutions, attention) are counted with this package's FLOP formulas
at their input shapes, the same count as the eager op. Compiling is forced past inductor's
caches for that one compile, since a graph loaded from the cache is never scheduled.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
from dataclasses import dataclass

from ceiling.errors import UnsupportedOnDevice

GENERATED = ("cpp_fused", "triton_", "cpp_kernel")  # in the names of inductor's kernels
COMPILERS = ("c++", "g++", "clang++")


@dataclass(frozen=True)
class Kernel:
    """One kernel of the compiled step: a generated (fused) kernel, or an extern (library)
    kernel the compiled graph calls. Bytes and FLOPs are per step (all its calls); None
    where the kernel was not seen compiling (a model compiled before it was profiled)."""

    name: str
    calls: int
    time_s: float
    kind: str = "generated"  # generated | extern
    bytes_read: float | None = None
    bytes_written: float | None = None
    flops: float | None = None
    matmul_dims: tuple[int, ...] | None = None  # (M, N, K) of an extern matmul
    predicted_s: float | None = None  # at its roofs, with its host cost per call
    bound: str | None = None  # compute | memory | overhead

    @property
    def bytes(self) -> float | None:
        if self.bytes_read is None or self.bytes_written is None:
            return None
        return self.bytes_read + self.bytes_written


@dataclass(frozen=True)
class Site:
    """One place a compiled graph's code calls a kernel, as inductor scheduled it."""

    name: str  # as the profiler names it
    kind: str  # generated | extern
    bytes_read: float
    bytes_written: float
    flops: float = 0.0
    matmul_dims: tuple[int, ...] | None = None
    # the elementwise functions a generated kernel computes, (aten name, elements) each:
    # their measured cost per element (model.roofline) bounds its compute
    functions: tuple[tuple[str, int], ...] = ()


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


REGION = "Torch-Compiled Region"  # one call of a compiled frame (its graphs)
GRAPH_CALL = ("CompiledFunction", "## Call CompiledFxGraph")  # a compiled graph running
HOST_ONLY = ("TorchDynamo Cache Lookup",)  # the guards: host time of the compiled step


@dataclass(frozen=True)
class ProfiledStep:
    """One step under torch.profiler: its generated kernels, the extern calls its compiled
    graphs made (profiler name -> calls, seconds), the compiled frames it ran and the time
    of the ops outside them (eager code: the optimizer, the loss, code between graph
    breaks), and the profiled step's wall time."""

    generated: list[Kernel]
    extern: dict[str, tuple[int, float]]
    frames: int
    outside_s: float
    wall_s: float
    frame_calls: int = 0  # calls of compiled frames (each its guards and wrappers)


def _inside_graph(event) -> bool:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith(GRAPH_CALL):
            return True
        parent = parent.cpu_parent
    return False


def _compiled_root(name: str) -> bool:
    return name.startswith(REGION) or "CompiledFunction" in name or name in HOST_ONLY


def read_events(events, extern_names, wall_s: float, key_rows) -> ProfiledStep:
    """The compiled step's parts from profiler events (FunctionEvents: name, cpu_parent,
    times in µs) and key_averages rows for the generated kernels (key, count, µs)."""
    extern: dict[str, tuple[int, float]] = {}
    frames, outside_us, frame_calls = set(), 0.0, 0
    for e in events:
        if e.name in extern_names and _inside_graph(e):
            calls, total = extern.get(e.name, (0, 0.0))
            # on a GPU the time its kernels ran, not the host's launch
            us = getattr(e, "device_time_total", 0.0) or e.cpu_time_total
            extern[e.name] = (calls + 1, total + us * 1e-6)
        if e.cpu_parent is None:
            if e.name.startswith(REGION):
                frames.add(e.name)
                frame_calls += 1
            elif not _compiled_root(e.name):
                outside_us += e.cpu_time_total
    return ProfiledStep(
        kernels(key_rows), extern, len(frames), outside_us * 1e-6, wall_s, frame_calls
    )


def profiled_step(step, device: str, extern_names=()) -> ProfiledStep:
    """Run `step()` once under torch.profiler; its compiled step's parts."""
    import time

    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if device.startswith("cuda"):
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        t0 = time.perf_counter()
        step()
        if device.startswith("cuda"):
            import torch

            torch.cuda.synchronize()
        wall_s = time.perf_counter() - t0
    rows = []
    for e in prof.key_averages():
        device_us = getattr(e, "device_time_total", 0.0) or 0.0
        rows.append((e.key, e.count, device_us or e.self_cpu_time_total))
    return read_events(prof.events(), set(extern_names), wall_s, rows)


# ---- what each kernel moves, read while the model compiles -------------------------------


class Capture:
    """The kernel sites of every graph compiled while it is open, by profiler name."""

    def __init__(self) -> None:
        self.sites: dict[str, list[Site]] = {}

    def add(self, site: Site) -> None:
        self.sites.setdefault(site.name, []).append(site)


def _scheduled(nodes) -> list:
    from torch._inductor.scheduler import BaseSchedulerNode

    return [n for node in nodes if isinstance(node, BaseSchedulerNode) for n in node.get_nodes()]


def _fused_bytes(nodes) -> tuple[float, float]:
    """Bytes a kernel over these scheduler nodes reads from and writes to memory: inductor's
    own count over the nodes taken as one fused kernel."""
    from torch._inductor.scheduler import FusedSchedulerNode

    flat = _scheduled(nodes)
    if not flat:
        return 0.0, 0.0
    node = flat[0] if len(flat) == 1 else FusedSchedulerNode(flat[0].scheduler, flat)
    return float(node.get_read_buffer_sizes()), float(node.get_write_buffer_sizes())


def _functions(nodes) -> tuple[tuple[str, int], ...]:
    """The aten functions a fused kernel computes (its nodes' origins before inductor's
    decompositions, named as the recorder names them: "gelu[tanh]" for the tanh form),
    each over the most elements a node computing it covers."""
    import torch
    from torch._inductor.utils import sympy_product
    from torch._inductor.virtualized import V

    found: dict[str, int] = {}
    for n in _scheduled(nodes):
        ranges = n.get_ranges()
        numel = V.graph.sizevars.optimization_hint(
            sympy_product(ranges[0]) * sympy_product(ranges[1]), fallback=0
        )
        for origin in getattr(n.node, "origins", ()):
            aten = origin.meta.get("original_aten")
            if not isinstance(aten, torch._ops.OpOverload):
                continue
            name = aten._overloadpacket.__name__
            if origin.kwargs.get("approximate") == "tanh":
                name += "[tanh]"
            found[name] = max(found.get(name, 0), int(numel))
    return tuple(sorted(found.items()))


def _generated_site(name: str, nodes) -> Site:
    return Site(name, "generated", *_fused_bytes(nodes), functions=_functions(nodes))


def _graph_prefix() -> str:
    """Inductor names a CPU kernel's profiler range after its graph (cpp.py)."""
    from torch._inductor.virtualized import V

    graph_id = V.graph.graph_id
    return f"graph_{graph_id}_" if graph_id is not None else ""


def profiler_name(op_overload) -> str:
    """aten.addmm.out -> aten::addmm, as torch.profiler names the call."""
    namespace = getattr(op_overload, "namespace", "aten")
    return f"{namespace}::{op_overload._overloadpacket.__name__}"


def _meta(buffer):
    import torch
    from torch._inductor.virtualized import V

    size = V.graph.sizevars.optimization_hints(buffer.get_size(), fallback=1)
    return torch.empty(size, dtype=buffer.get_dtype(), device="meta")


def _extern_flops(node) -> tuple[float, tuple[int, ...] | None]:
    """FLOPs of an extern kernel with this package's formulas at its input shapes (what the
    eager op counts), and its (M, N, K) if a matmul; inductor's estimate (torch's FLOP
    registry) where the call cannot be rebuilt."""
    from ceiling.profile import op_flops

    op = node.op_overload
    try:
        default = op._overloadpacket.default
        metas = [_meta(b) for b in node.inputs]
        if hasattr(node, "unflatten_args"):
            args, kwargs = node.unflatten_args(metas, node.constant_args)
        else:
            args, kwargs = [*metas, *node.constant_args], dict(node.kwargs)
        count = op_flops.count_flops(default, tuple(args), kwargs, None)
        return count.flops, op_flops.matmul_dims(default, args)
    except Exception:  # a call this rebuild does not know: the caller asks torch
        return 0.0, None


def _extern_site(scheduler_node) -> Site | None:
    from torch._inductor import ir

    node = scheduler_node.node
    op = getattr(node, "op_overload", None)
    if op is None or isinstance(node, ir.MultiOutput) or not hasattr(op, "_overloadpacket"):
        return None
    flops, dims = _extern_flops(node)
    if not flops:
        flops = float(scheduler_node.estimate_flops() or 0.0)
    return Site(
        profiler_name(op), "extern", float(scheduler_node.get_read_buffer_sizes()),
        float(scheduler_node.get_write_buffer_sizes()), flops, dims,
    )  # fmt: skip


@contextlib.contextmanager
def capture():
    """Record the kernels of every graph compiled inside: inductor's generated kernels (C++
    or Triton) with the bytes they move, its extern calls with their FLOPs. Inductor's
    kernel profiling is on (each CPU kernel a profiler range) and its caches are off."""
    import torch._functorch.config as functorch
    import torch._inductor.config as inductor
    from torch._inductor import scheduler
    from torch._inductor.codegen import cpp

    found = Capture()
    patched = []

    def wrap(cls, name, after):
        original = getattr(cls, name)

        @functools.wraps(original)
        def method(self, *args, **kwargs):
            out = original(self, *args, **kwargs)
            with contextlib.suppress(Exception):  # never break the compile for a count
                after(out, *args)
            return out

        setattr(cls, name, method)
        patched.append((cls, name, original))

    def cpp_kernel(name, src_code, nodes, *rest):
        found.add(_generated_site(_graph_prefix() + name, nodes))

    def triton_kernel(name, src_code, node_schedule, *rest):
        found.add(_generated_site(name, node_schedule))

    def extern(_, scheduler_node):
        site = _extern_site(scheduler_node)
        if site is not None:
            found.add(site)

    wrap(cpp.CppScheduling, "define_kernel", cpp_kernel)
    wrap(scheduler.Scheduler, "codegen_extern_call", extern)
    try:
        from torch._inductor.codegen import triton

        wrap(triton.TritonScheduling, "define_kernel", triton_kernel)
    except ImportError:  # no Triton in this build: CPU kernels only
        pass
    settings = {"cpp.enable_kernel_profile": True, "fx_graph_cache": False}
    try:
        with inductor.patch(settings), functorch.patch(enable_autograd_cache=False):
            yield found
    finally:
        for cls, name, original in reversed(patched):
            setattr(cls, name, original)
