"""Profile one workload: time its steps, record one step op by op, place it, compute MFU.

    report = profile_target("gpt:tiny", train=True, device="cpu", dtype="fp32")

Steps are timed plainly (no recorder, a device sync at each end) after warm-up; one more
step runs under the recorder with a sync around every op to attribute time. MFU uses the
plain step time and the counted model FLOPs (matmul and attention, forward + backward,
causal attention at half, recomputation excluded); HFU adds the recomputation.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from ceiling.errors import CeilingError, DoesNotFit, InvalidInput, UnsupportedOnDevice
from ceiling.model import mfu as mfu_model
from ceiling.profile import placement
from ceiling.profile.recorder import METHOD_VERSION, OpRecorder
from ceiling.profile.targets import (
    Workload,
    as_args,
    is_out_of_memory,
    load_target,
    move_batch,
    one_line,
)

TORCH_DTYPES = {
    "fp64": torch.float64,
    "fp32": torch.float32,
    "tf32": torch.float32,  # fp32 storage, TF32 matmuls
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "fp8": getattr(torch, "float8_e4m3fn", None),
}
ATTENTION_CONVENTION = "causal-half"
# weights + gradients + two Adam moments, each in the model's dtype
TRAIN_STATE_COPIES = 4


@dataclass
class Ceiling:
    name: str
    source: str
    kind: str  # "cpu" | "gpu"
    peak_key: str
    peak_flops_per_s: float  # dense datasheet / theoretical peak for the dtype in use
    bandwidth_bytes_per_s: float
    measured_peak_flops_per_s: float | None = None  # from a machine profile, if any

    @property
    def roof_flops_per_s(self) -> float:
        """The compute roof ops are placed under: measured when a profile has it."""
        return self.measured_peak_flops_per_s or self.peak_flops_per_s


@dataclass
class ProfileReport:
    target: str
    device: str
    dtype: str
    tf32: bool
    train: bool
    samples_per_step: int
    tokens_per_step: int | None
    ceiling: Ceiling
    step_s: float | None  # None on the meta device (counts only)
    step_samples_s: list[float]
    model_flops_per_step: float
    hardware_flops_per_step: float
    other_flops_per_step: float
    analytic_flops_per_step: float | None
    analytic_flops_per_step_full_attention: float | None
    mfu: float | None
    hfu: float | None
    mfu_vs_measured_peak: float | None
    op_time_s: float
    ops: list[placement.Placement]
    modules: list[placement.Placement]
    categories: list[placement.Placement]
    hints: list[str]
    recomputed_flops: float = 0.0
    attention_convention: str = ATTENTION_CONVENTION
    flop_convention: str = "a multiply-add counts as 2 FLOPs; model FLOPs = matmul + attention"
    method_version: int = METHOD_VERSION
    environment: dict[str, Any] = field(default_factory=dict)

    @property
    def tokens_per_s(self) -> float | None:
        return self.tokens_per_step / self.step_s if self.tokens_per_step and self.step_s else None

    @property
    def samples_per_s(self) -> float | None:
        return self.samples_per_step / self.step_s if self.step_s else None

    @property
    def analytic_vs_counted(self) -> float | None:
        if not self.analytic_flops_per_step or not self.model_flops_per_step:
            return None
        return self.analytic_flops_per_step / self.model_flops_per_step - 1.0


# ---- device, dtype, memory checks ------------------------------------------------------


def parse_dtype(name: str) -> tuple[str, torch.dtype]:
    from ceiling.hardware.catalog import normalize_dtype

    key = normalize_dtype(name)
    dt = TORCH_DTYPES.get(key)
    if dt is None:
        raise InvalidInput(
            f"dtype {name!r} cannot be used for a model; use one of "
            f"{', '.join(k for k, v in TORCH_DTYPES.items() if v is not None)}"
        )
    return key, dt


def check_device(device: str) -> torch.device:
    if device not in ("cpu", "cuda", "meta") and not device.startswith("cuda:"):
        raise InvalidInput(f"--device must be cpu, cuda or meta, got {device!r}")
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
            "before any activations"
        )


# ---- the device's ceiling --------------------------------------------------------------


def resolve_ceiling(
    device: torch.device, dtype_key: str, tf32: bool, spec: str | None, profile: str | None
) -> Ceiling:
    from ceiling.hardware.catalog import normalize_dtype

    kind = "gpu" if device.type == "cuda" else "cpu"
    peak_key = mfu_model.peak_key(normalize_dtype(dtype_key), tf32, kind)
    if spec is not None:
        from ceiling.hardware.resolve import resolve_device

        s = resolve_device(spec, None)
        return Ceiling(
            s.name, f"datasheet spec {s.key}", s.kind, peak_key, s.peak(peak_key),
            s.memory_bandwidth_bytes_per_s,
        )  # fmt: skip
    from ceiling.measure.decode import local_ceiling

    local = local_ceiling(str(device), profile)
    s = local.spec
    measured = local.source.startswith("measured")
    dense = _dense_peak(device, peak_key) if measured else None
    return Ceiling(
        name=s.name,
        source=local.source,
        kind=s.kind,
        peak_key=peak_key,
        peak_flops_per_s=dense if dense is not None else s.peak(peak_key),
        bandwidth_bytes_per_s=s.memory_bandwidth_bytes_per_s,
        measured_peak_flops_per_s=s.peak(peak_key) if measured else None,
    )


def _dense_peak(device: torch.device, peak_key: str) -> float | None:
    """The datasheet (GPU) or theoretical (CPU) dense peak, beside a measured profile."""
    try:
        if device.type == "cuda":
            from ceiling.hardware.catalog import match_driver_name

            spec = match_driver_name(torch.cuda.get_device_name(device))
            return spec.peak(peak_key) if spec else None
        from ceiling.hardware.cpu import detect_cpu

        return detect_cpu().peak_flops_per_s.get(peak_key)
    except CeilingError:
        return None


# ---- running steps -----------------------------------------------------------------------


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class StepRunner:
    """One training (or inference) step of a workload, on its device."""

    def __init__(self, workload: Workload, device: torch.device, dtype: torch.dtype, train: bool):
        self.device, self.train = device, train
        if device.type == "meta":
            # fake CPU tensors, not bare meta ones: shapes only, but ops pick the kernels a
            # CPU would (fused attention rather than its unfused math fallback)
            from torch._subclasses.fake_tensor import FakeTensorMode

            self.fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
            on_meta = workload.build(device, dtype)
            with self.fake_mode:
                self.model = on_meta.to_empty(device="cpu")
                self.batch = move_batch(workload.batch, torch.device("cpu"), dtype)
        else:
            self.fake_mode = None
            self.model = workload.build(device, dtype)
            self.batch = move_batch(workload.batch, device, dtype)
        self.model.train(train)
        self.loss_fn = workload.loss_fn
        # meta tensors hold no values: an optimizer step (which reads its step count) cannot
        # run there, so a meta step is forward + backward only
        self.optimizer = workload.make_optimizer(self.model) if train else None
        if device.type == "meta":
            self.optimizer = None

    def step(self, recorder: OpRecorder | None = None, batch: Any = None) -> None:
        if self.fake_mode is not None:
            with self.fake_mode:
                self._step(recorder, batch)
        else:
            self._step(recorder, batch)

    def _step(self, recorder: OpRecorder | None, batch: Any) -> None:
        batch = self.batch if batch is None else batch
        if not self.train:
            with torch.no_grad():
                self.model(*as_args(batch))
            return
        if self.optimizer is not None:
            self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss_fn(self.model(*as_args(batch)), batch)
        loss.backward()
        if self.optimizer is None:
            return
        if recorder is None:
            self.optimizer.step()
        else:
            with recorder.phase("optimizer"):
                self.optimizer.step()

    def timed_steps(self, n: int) -> list[float]:
        out = []
        for _ in range(n):
            _sync(self.device)
            t0 = time.perf_counter()
            self.step()
            _sync(self.device)
            out.append(time.perf_counter() - t0)
        return out


def _guard(target: str, fn, *args, **kwargs):
    """Run user code; out-of-memory becomes DoesNotFit, other failures one-line errors."""
    try:
        return fn(*args, **kwargs)
    except CeilingError:
        raise
    except Exception as exc:
        if is_out_of_memory(exc):
            raise DoesNotFit(f"{target} does not fit in memory: {one_line(exc)[:200]}") from None
        raise InvalidInput(f"{target} failed while running: {one_line(exc)[:300]}") from None


def _tf32_enabled(device: torch.device) -> bool:
    """TF32 matmuls are on when the fp32 matmul precision is below "highest" (a user's
    own `torch.set_float32_matmul_precision("high")` counts too)."""
    return device.type == "cuda" and torch.get_float32_matmul_precision() != "highest"


def profile_target(
    target: str,
    *,
    train: bool = False,
    device: str = "cpu",
    dtype: str = "fp32",
    spec: str | None = None,
    profile: str | None = None,
    batch: int | None = None,
    seq: int | None = None,
    warmup_steps: int = 1,
    steps: int = 5,
    module_depth: int = 3,
    available_bytes: float | None = None,
) -> ProfileReport:
    """Profile a target (see ceiling.profile.targets) on a device; see the module docstring.

    dtype "tf32" runs fp32 with TF32 matmuls for this call only; otherwise TF32 follows
    torch's current setting (`torch.set_float32_matmul_precision`)."""
    if steps < 1 or warmup_steps < 0:
        raise InvalidInput(f"need steps ≥ 1 and warm-up ≥ 0, got {steps} and {warmup_steps}")
    dev = check_device(device)
    key, torch_dtype = parse_dtype(dtype)
    if key != "tf32":
        return _profile(**locals())
    if dev.type != "cuda":
        raise UnsupportedOnDevice("TF32 is a GPU tensor-core mode; on a CPU use fp32")
    before = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    # "high": fp32 matmuls may use TF32 tensor cores (the documented switch)
    torch.set_float32_matmul_precision("high")
    torch.backends.cudnn.allow_tf32 = True
    try:
        return _profile(**{**locals(), "key": "fp32"})
    finally:
        torch.set_float32_matmul_precision(before[0])
        torch.backends.cudnn.allow_tf32 = before[1]


def _profile(
    *,
    target: str,
    train: bool,
    dev: torch.device,
    key: str,
    torch_dtype: torch.dtype,
    spec: str | None,
    profile: str | None,
    batch: int | None,
    seq: int | None,
    warmup_steps: int,
    steps: int,
    module_depth: int,
    available_bytes: float | None,
    **_unused,
) -> ProfileReport:
    meta = dev.type == "meta"  # counts only: nothing runs, nothing is timed
    if not meta:
        check_dtype_runs(dev, key, torch_dtype)
    tf32 = _tf32_enabled(dev) and key == "fp32"
    # on meta the roofline is --spec's, else this machine's CPU
    ceiling = resolve_ceiling(torch.device("cpu") if meta else dev, key, tf32, spec, profile)
    workload = load_target(target, batch=batch, seq=seq)
    itemsize = torch.empty((), dtype=torch_dtype).element_size()
    if not meta:
        free = available_memory_bytes(dev) if available_bytes is None else available_bytes
        check_fits(workload.params, itemsize, train, free)

    runner = _guard(target, StepRunner, workload, dev, torch_dtype, train)
    samples: list[float] = []
    step_s = None
    if not meta:
        _guard(target, runner.timed_steps, warmup_steps)
        samples = _guard(target, runner.timed_steps, steps)
        step_s = statistics.median(samples)
    rec = OpRecorder(time_ops=not meta)
    with rec:
        _guard(target, runner.step, rec)

    model_flops = rec.model_flops()
    hardware_flops = rec.hardware_flops()
    total = rec.totals()
    peak, bw = ceiling.peak_flops_per_s, ceiling.bandwidth_bytes_per_s
    roof = ceiling.roof_flops_per_s
    analytic = analytic_full = None
    cfg = workload.transformer
    if cfg is not None and workload.tokens_per_step:
        s = workload.seq_len
        passes = 3.0 if train else 1.0  # forward, or forward + backward (2× forward)
        full = cfg.flops_per_token(s, training=train) * workload.tokens_per_step
        attention = passes * cfg.attention_flops_per_token(s) * workload.tokens_per_step
        analytic_full = full
        analytic = full - attention / 2.0  # causal-half, as counted
    measured_peak = ceiling.measured_peak_flops_per_s
    return ProfileReport(
        target=workload.name,
        device=str(dev),
        dtype=key,
        tf32=tf32,
        train=train,
        samples_per_step=workload.samples_per_step,
        tokens_per_step=workload.tokens_per_step,
        ceiling=ceiling,
        step_s=step_s,
        step_samples_s=samples,
        model_flops_per_step=model_flops,
        hardware_flops_per_step=hardware_flops,
        other_flops_per_step=total.flops - hardware_flops,
        analytic_flops_per_step=analytic,
        analytic_flops_per_step_full_attention=analytic_full,
        mfu=mfu_model.step_utilisation(model_flops, step_s, peak) if step_s else None,
        hfu=mfu_model.step_utilisation(hardware_flops, step_s, peak) if step_s else None,
        mfu_vs_measured_peak=(
            mfu_model.step_utilisation(model_flops, step_s, measured_peak)
            if measured_peak and step_s
            else None
        ),
        op_time_s=total.time_s or 0.0,
        ops=[placement.place(t, roof, bw) for t in rec.by_op() if t.category != "view"],
        modules=[placement.place(t, roof, bw) for t in rec.by_module(depth=module_depth)],
        categories=[placement.place(t, roof, bw) for t in rec.by_category()],
        hints=placement.hints(rec.calls, roof, bw, itemsize, step_s),
        recomputed_flops=hardware_flops - model_flops,
        environment=_environment(dev),
    )


def _environment(device: torch.device) -> dict[str, Any]:
    from ceiling.measure.decode import environment

    return environment(str(device))
