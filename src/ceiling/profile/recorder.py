"""Record every aten op a PyTorch workload runs: FLOPs, bytes, optional time, module path.

    with OpRecorder(time_ops=True) as rec:
        loss = model(x).sum(); loss.backward()
    rec.calls          # one OpCall per op call
    rec.by_op()        # totals per aten op
    rec.by_module()    # totals per module path (a module includes its children)

A TorchDispatchMode sees each op after autograd, so forward, backward and optimizer ops are
all recorded, each with the module whose forward (or backward) was running. FLOPs and
bytes need only shapes, strides and dtypes, so recording works on "meta" and fake tensors
(models too large to run); time is then None.

Per-op time (`time_ops=True`) waits for the device before and after each op, which removes
the overlap a real run has: use it to attribute time, not to measure step time.
Recomputation: an op that runs inside a module's forward while the autograd engine is
running (activation checkpointing) is marked phase "recompute"; a fused attention backward
recomputes its scores. Both are hardware FLOPs, not model FLOPs.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import MISSING, dataclass, field, fields, replace

import torch
from torch.nn.modules.module import register_module_forward_hook
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.module_tracker import ModuleTracker

from ceiling.measure.first_touch import faults_now
from ceiling.profile.causal import EagerAttention
from ceiling.profile.op_flops import (
    MODEL_CATEGORIES,
    attention_dims,
    count_flops,
    matmul_batch,
    matmul_dims,
    replay_key,
)
from ceiling.profile.shadow_values import replay
from ceiling.profile.traffic import count_traffic, tensor_bytes

METHOD_VERSION = 1

# Queries about a tensor's layout reach the mode as ops; they are not work.
_METADATA_OPS = {
    "sym_is_contiguous",
    "is_contiguous",
    "is_strides_like_format",
    "is_non_overlapping_and_dense",
    "size",
    "sym_size",
    "stride",
    "sym_stride",
    "storage_offset",
    "sym_storage_offset",
    "numel",
    "sym_numel",
    "dim",
    "layout",
    "device",
}


# Markers and device queries, not work. Custom ops (a user's "mylib.fused") are recorded:
# their bytes count; their FLOPs are 0 and marked estimated unless registered with torch.
_UNRECORDED_NAMESPACES = {"profiler", "prim"}


@dataclass(frozen=True)
class OpCall:
    op: str  # "aten.mm"
    module: str  # innermost module path, "Global" outside any module
    phase: str  # forward | backward | recompute | optimizer | any label set by phase()
    category: str
    flops: float
    flops_exact: bool
    recomputed_flops: float  # part of flops that redoes forward work (fused attention backward)
    bytes_read: float
    bytes_written: float
    bytes_exact: bool
    time_s: float | None
    dtype: str | None
    matmul_dims: tuple[int, ...] | None = None
    matmul_batch: int = 1  # products of that shape one call makes (a bmm's batch)
    # attention pairs a causal mask removes (not in `flops`): full convention = flops + this
    causal_skipped_flops: float = 0.0
    # bytes of each output the op allocated (not a view, not written in place): a new
    # buffer's first touch costs more than its bytes (model.first_touch); timed ops only
    new_buffers: tuple[int, ...] = ()
    page_faults: int | None = None  # taken while it ran (None: not counted)
    # elementwise and norm ops: the function (aten name, "gelu[tanh]" for approximate="tanh")
    # and how many elements it computes, for its measured cost per element
    function: str | None = None
    elements: int = 0
    # a fused attention call's shape (op_flops.attention_dims), its own rate's key
    attention_dims: tuple | None = None
    # a convolution's or recurrent layer's call: its overload and argument shapes
    # (op_flops.replay_key), its replayed rate's key
    replay_key: tuple | None = None

    @property
    def bytes(self) -> float:
        return self.bytes_read + self.bytes_written


_CALL_DEFAULTS = {f.name: f.default for f in fields(OpCall) if f.default is not MISSING}


def _new_call(values: dict) -> OpCall:
    """An OpCall made without the frozen dataclass's __init__, which sets each of its twenty
    fields through object.__setattr__ (several µs a call: the recorder makes one per op)."""
    call = object.__new__(OpCall)
    call.__dict__.update(_CALL_DEFAULTS)
    call.__dict__.update(values)
    return call


_OP_NAMES: dict = {}  # OpOverload -> ("aten.mm", "mm")
_DTYPE_NAMES: dict = {}  # torch.float32 -> "float32"


def _op_names(func) -> tuple[str, str]:
    names = _OP_NAMES.get(func)
    if names is None:
        packet = func._overloadpacket.__name__
        names = _OP_NAMES[func] = (f"{func.namespace}.{packet}", packet)
    return names


def _dtype_name(dtype) -> str:
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype).removeprefix("torch.")
    return name


@dataclass
class OpTotals:
    """Sums over many calls of one op, module or category."""

    name: str
    calls: int = 0
    flops: float = 0.0
    model_flops: float = 0.0
    bytes_read: float = 0.0
    bytes_written: float = 0.0
    time_s: float | None = None
    exact: bool = True
    category: str = ""
    matmul_dims: set = field(default_factory=set)

    @property
    def bytes(self) -> float:
        return self.bytes_read + self.bytes_written

    def add(self, call: OpCall) -> None:
        self.calls += 1
        self.flops += call.flops
        if call.category in MODEL_CATEGORIES and call.phase != "recompute":
            self.model_flops += call.flops - call.recomputed_flops
        self.bytes_read += call.bytes_read
        self.bytes_written += call.bytes_written
        if call.time_s is not None:
            self.time_s = (self.time_s or 0.0) + call.time_s
        self.exact = self.exact and call.flops_exact and call.bytes_exact
        if not self.category:
            self.category = call.category
        elif self.category != call.category:
            self.category = "mixed"
        if call.matmul_dims is not None:
            self.matmul_dims.add(call.matmul_dims)


class _Tracker(ModuleTracker):
    """Module paths as ModuleTracker has them, plus how deep in forward calls we are."""

    def __init__(self) -> None:
        super().__init__()
        self.forward_depth = 0
        self.hooks_s = 0.0  # time in these hooks: the recorder's work, not the workload's
        self._innermost: dict[frozenset, str] = {}

    def _fw_pre_hook(self, mod, input) -> None:
        t0 = time.perf_counter()
        self.forward_depth += 1
        super()._fw_pre_hook(mod, input)
        self.hooks_s += time.perf_counter() - t0

    def _fw_post_hook(self, mod, input, output) -> None:
        t0 = time.perf_counter()
        super()._fw_post_hook(mod, input, output)
        self.hooks_s += time.perf_counter() - t0

    def _leave_forward(self, mod, input, output) -> None:
        self.forward_depth = max(0, self.forward_depth - 1)

    def __enter__(self):
        self.forward_depth = 0
        self.hooks_s = 0.0
        # always_call: checkpointing stops a recomputation early by raising inside forward
        self._depth_handle = register_module_forward_hook(self._leave_forward, always_call=True)
        return super().__enter__()

    def __exit__(self, *args):
        self._depth_handle.remove()
        return super().__exit__(*args)

    def innermost(self) -> str:
        parents = self.parents
        if len(parents) == 1:
            return next(iter(parents))
        key = frozenset(parents)  # the same modules run many ops: decided once per set
        found = self._innermost.get(key)
        if found is None:
            found = max((p for p in parents if p != "Global"), key=lambda p: (p.count("."), p))
            if len(self._innermost) > 4096:
                self._innermost.clear()
            self._innermost[key] = found
        return found


def _sync(device: torch.device | None) -> None:
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)


def _first_device(args, kwargs) -> torch.device | None:
    """The device the op runs on: an accelerator tensor's when there is one (a CPU scalar
    may come first, as in `cpu_scalar * cuda_tensor`), else the first tensor's."""
    found = None
    for x in (*args, *kwargs.values()):
        for t in x if isinstance(x, (list, tuple)) else (x,):
            if isinstance(t, torch.Tensor):
                if t.device.type != "cpu":
                    return t.device
                found = found or t.device
    return found


class _RecordingMode(TorchDispatchMode):
    def __init__(self, recorder: OpRecorder) -> None:
        super().__init__()
        self.recorder = recorder

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        namespace = func.namespace
        packet_name = func._overloadpacket.__name__
        if packet_name in _METADATA_OPS or namespace in _UNRECORDED_NAMESPACES:
            return func(*args, **kwargs)
        rec = self.recorder
        if not rec.time_ops:  # counting only: no device to find, no clock to read
            out = func(*args, **kwargs)
            rec._record(func, args, kwargs, out, None)
            return out
        entered = time.perf_counter()
        device = _first_device(args, kwargs)
        timed = rec.time_ops and device is not None and device.type not in ("meta",)
        faults = None
        if timed and not _is_fake(args):
            _sync(device)
            before = faults_now()
            t0 = time.perf_counter()
            out = func(*args, **kwargs)
            _sync(device)
            elapsed = time.perf_counter() - t0
            after = faults_now()
            if before is not None and after is not None:
                faults = after - before
            if _is_fake((out,)):  # fake inputs inside lists: nothing really ran
                elapsed = faults = None
        else:
            out = func(*args, **kwargs)
            elapsed = None
        rec._record(func, args, kwargs, out, elapsed, faults)
        if elapsed is not None:
            rec.overhead_s += time.perf_counter() - entered - elapsed
        return out


_WARM: list[bool] = []


def _warm_up() -> None:
    """Pay once per process, before anything is measured, what the first recorded op would
    otherwise pay inside the step: importing torch's fake-tensor and compiler modules
    (1–2 s on a fresh process) and first use of the dispatch mode and module hooks."""
    if _WARM:
        return
    _WARM.append(True)
    import torch._dynamo  # the fake-tensor checks below import it on first use
    from torch._subclasses.fake_tensor import FakeTensor  # noqa: F401

    try:  # the caller may be under no_grad, inference mode or a fake-tensor mode
        with torch.inference_mode(False), torch.enable_grad():
            layer = torch.nn.Linear(2, 2)
            with OpRecorder(time_ops=True):
                layer(torch.ones(1, 2)).sum().backward()
    except Exception:  # a warm-up only: the recording itself reports real failures
        return


_FUNCTION_CATEGORIES = ("elementwise", "norm", "reduction")
# ops that move no data from inputs but compute each element they write: random draws
_GENERATORS = ("bernoulli_",)
_GENERATOR_PACKETS = {getattr(torch.ops.aten, n) for n in _GENERATORS}


def _function(func, args, kwargs, out, category: str) -> dict:
    """The function an elementwise, norm, reduction (pooling) or random op computes, and
    over how many elements (its largest output's)."""
    if category not in _FUNCTION_CATEGORIES and func._overloadpacket not in _GENERATOR_PACKETS:
        return {}
    name = func._overloadpacket.__name__
    if kwargs.get("approximate") == "tanh" or any(a == "tanh" for a in args if type(a) is str):
        name += "[tanh]"
    if isinstance(out, torch.Tensor):  # most ops: one output, no tree to walk
        return {"function": name, "elements": out.numel()}
    sizes = [t.numel() for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
    if not sizes:
        sizes = [t.numel() for t in tree_leaves(args) if isinstance(t, torch.Tensor)]
    return {"function": name, "elements": max(sizes, default=0)}


def new_buffers(args, kwargs, out) -> tuple[int, ...]:
    """Bytes of each output whose storage no input has: a buffer the op allocated."""

    def storage(t: torch.Tensor) -> int:
        return t.untyped_storage().data_ptr()

    seen = {storage(t) for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
    sizes = []
    for t in tree_leaves(out):
        if isinstance(t, torch.Tensor) and storage(t) not in seen:
            seen.add(storage(t))
            sizes.append(t.untyped_storage().nbytes())
    return tuple(sizes)


def _is_fake(args) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    for a in args:
        if isinstance(a, FakeTensor):
            return True
        if isinstance(a, (list, tuple)) and any(isinstance(x, FakeTensor) for x in a):
            return True
    return False


class OpRecorder:
    """Context manager recording every op; see the module docstring."""

    def __init__(self, time_ops: bool = False) -> None:
        self.time_ops = time_ops
        self.calls: list[OpCall] = []
        # the recorder's own time inside timed ops (counting, syncs): not the workload's
        self.overhead_s = 0.0
        self._phase: str | None = None
        self._tracker = _Tracker()
        self._mode = _RecordingMode(self)
        self._eager = EagerAttention()

    def __enter__(self) -> OpRecorder:
        _warm_up()
        self._tracker.__enter__()
        self._mode.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._mode.__exit__(*exc)
        self._tracker.__exit__(*exc)
        if self.time_ops:  # module bookkeeping between ops is the recorder's, not the step's
            self.overhead_s += self._tracker.hooks_s

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Label the ops run inside (e.g. "optimizer"); autograd phases apply otherwise."""
        before = self._phase
        self._phase = name
        try:
            yield
        finally:
            self._phase = before

    def clear(self) -> None:
        self.calls.clear()
        self.overhead_s = 0.0
        self._eager = EagerAttention()

    def _current_phase(self) -> str:
        if torch._C._current_graph_task_id() != -1:
            return "recompute" if self._tracker.forward_depth > 0 else "backward"
        return self._phase or "forward"

    def _record(
        self, func, args, kwargs, out, elapsed: float | None, faults: int | None = None
    ) -> None:
        replay(func, args, kwargs, out)  # a mask's values on meta: read as on any device
        fl = count_flops(func, args, kwargs, out)
        tr = count_traffic(func, args, kwargs, out)
        op, name = _op_names(func)
        dtype = None
        for x in args:
            if isinstance(x, torch.Tensor):
                dtype = x.dtype
                break
        else:
            if isinstance(out, torch.Tensor):
                dtype = out.dtype
        category = fl.category
        matmul = category == "matmul"
        values = {
            "op": op,
            "module": self._tracker.innermost(),
            "phase": self._current_phase(),
            "category": category,
            "flops": fl.flops,
            "flops_exact": fl.exact,
            "recomputed_flops": fl.recomputed,
            "bytes_read": tr.bytes_read,
            "bytes_written": tr.bytes_written,
            "bytes_exact": tr.exact,
            "time_s": elapsed,
            "dtype": None if dtype is None else _dtype_name(dtype),
            "matmul_dims": matmul_dims(func, args) if matmul else None,
            "matmul_batch": matmul_batch(func, args) if matmul else 1,
            "causal_skipped_flops": fl.causal_skipped,
            "new_buffers": () if elapsed is None else new_buffers(args, kwargs, out),
            "page_faults": faults,
            "attention_dims": (
                attention_dims(func, args, kwargs) if category == "attention" else None
            ),
            "replay_key": replay_key(func, args) if matmul else None,
        }
        values.update(_function(func, args, kwargs, out, category))
        self.calls.append(_new_call(values))
        for index, share in self._eager.observe(name, args, kwargs, out, len(self.calls) - 1):
            self._mark_causal(index, share)

    def _mark_causal(self, index: int, share: float) -> None:
        """An eager attention matmul found under a causal mask: counted at the kept share."""
        c = self.calls[index]
        if c.category != "matmul":
            return
        self.calls[index] = replace(
            c,
            category="attention",
            flops=c.flops * share,
            causal_skipped_flops=c.flops * (1.0 - share),
            matmul_dims=None,
        )

    # ---- totals -----------------------------------------------------------------------

    def totals(self, phases: tuple[str, ...] | None = None) -> OpTotals:
        t = OpTotals("total")
        for c in self.calls:
            if phases is None or c.phase in phases:
                t.add(c)
        return t

    def model_flops(self) -> float:
        """Matmul and attention FLOPs less any recomputation: the model FLOPs of MFU."""
        return sum(
            c.flops - c.recomputed_flops
            for c in self.calls
            if c.category in MODEL_CATEGORIES and c.phase != "recompute"
        )

    def causal_skipped_flops(self) -> float:
        """Model FLOPs of the attention pairs causal masks removed: the full-attention
        convention counts model_flops() plus these."""
        return sum(c.causal_skipped_flops for c in self.calls if c.phase != "recompute")

    def hardware_flops(self) -> float:
        """Matmul and attention FLOPs the device executed, recomputation included."""
        return sum(c.flops for c in self.calls if c.category in MODEL_CATEGORIES)

    def by_op(self) -> list[OpTotals]:
        return self._group(lambda c: c.op)

    def by_category(self) -> list[OpTotals]:
        return self._group(lambda c: c.category)

    def by_module(self, depth: int | None = None) -> list[OpTotals]:
        """Totals per module path; a module's row includes its children's ops.
        `depth` limits the rows to paths with at most that many dots."""
        groups: dict[str, OpTotals] = {}
        for c in self.calls:
            parts = c.module.split(".")
            for i in range(1, len(parts) + 1):
                if depth is not None and i - 1 > depth:
                    break
                path = ".".join(parts[:i])
                groups.setdefault(path, OpTotals(path)).add(c)
        return sorted(groups.values(), key=_sort_key)

    def _group(self, key) -> list[OpTotals]:
        groups: dict[str, OpTotals] = defaultdict(lambda: None)  # type: ignore[arg-type]
        for c in self.calls:
            k = key(c)
            if groups[k] is None:
                groups[k] = OpTotals(k)
            groups[k].add(c)
        return sorted(groups.values(), key=_sort_key)


def _sort_key(t: OpTotals):
    return (-(t.time_s or 0.0), -t.flops, -t.bytes, t.name)


__all__ = ["METHOD_VERSION", "OpCall", "OpRecorder", "OpTotals", "tensor_bytes"]
