"""Profile one workload: time its steps, record one step op by op, place it, compute MFU.

    report = profile_target("gpt:tiny", train=True, device="cpu", dtype="fp32")

Steps are timed plainly (no recorder, a device sync at each end) after warm-up; one more
step runs under the recorder with a sync around every op to attribute time. MFU uses the
plain step time and the counted model FLOPs (matmul and attention, forward + backward,
causal attention at half, recomputation excluded); HFU adds the recomputation.
"""

from __future__ import annotations

import contextlib
import functools
import statistics
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch

from ceiling.errors import CeilingError, InvalidInput, UnsupportedOnDevice
from ceiling.hardware.load import LoadWatch
from ceiling.measure.deadline import DEFAULT_TIMEOUT_S, deadline
from ceiling.model import mfu as mfu_model
from ceiling.model.forward_host import python_hint
from ceiling.profile import compiled_step, placement
from ceiling.profile.ceiling import (
    Ceiling,
    conv_tf32_enabled,
    fp32_runs_tf32,
    resolve_ceiling,
    tf32_enabled,
    tf32_on,
)
from ceiling.profile.checks import (
    available_memory_bytes,
    check_device,
    check_dtype_runs,
    check_fits,
    parse_dtype,
)
from ceiling.profile.compiled import capture, check_compiler, is_compiled, profiled_step
from ceiling.profile.explain import (
    StepExplanation,
    explain_step,
    host_phase,
    local_roofs,
    matmul_cold_bytes,
    measured_matmul_rates,
    predicted_s,
    rates_by_op,
    with_forward_host,
    working_set_bytes,
)
from ceiling.profile.op_flops import UNKNOWN
from ceiling.profile.recorder import METHOD_VERSION, OpRecorder
from ceiling.profile.runner import StepRunner, guard, sync
from ceiling.profile.targets import Workload, load_target

ATTENTION_CONVENTION = "causal-half"
# Transformer layers a profile builds: each is a set of modules made one by one (even on
# meta), and a model's FLOPs and bytes grow layer by layer, so fewer layers tell the same.
MAX_LAYERS = 1024
CONV_PREFIXES = ("aten.convolution", "aten._convolution", "aten.cudnn_convolution")


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
    mfu_of_achievable: float | None  # against the measured matmul rate, never the peak
    op_time_s: float
    ops: list[placement.Placement]
    modules: list[placement.Placement]
    categories: list[placement.Placement]
    hints: list[str]
    recomputed_flops: float = 0.0
    # every op at its roofline, one after another: a floor under the step time
    roofline_step_s: float | None = None
    recorded_step_s: float | None = None  # wall of the recorded step, less the recorder
    # the same model FLOPs with every attention pair counted (PaLM's convention)
    model_flops_per_step_full_attention: float | None = None
    # ops with no FLOP formula: their FLOPs are unknown, not zero, so MFU is a lower bound
    unknown_ops: list[str] = field(default_factory=list)
    # the step against three roofs (compute, memory, per-op overhead) and its waterfall
    explanation: StepExplanation | None = None
    attention_convention: str = ATTENTION_CONVENTION
    flop_convention: str = "a multiply-add counts as 2 FLOPs; model FLOPs = matmul + attention"
    method_version: int = METHOD_VERSION
    environment: dict[str, Any] = field(default_factory=dict)
    compiled: bool = False  # a torch.compile'd model: its hints never advise compiling it
    # the compiled step: its kernels (generated and extern) with their bytes, FLOPs,
    # measured and predicted times, and the step predicted from them
    compiled_step: compiled_step.CompiledStep | None = None
    # the machine's load while the steps ran (hardware.load.LoadRecord.to_json); None on meta
    load: dict[str, Any] | None = None

    @property
    def busy_reasons(self) -> list[str]:
        from ceiling.hardware.load import record_busy

        return record_busy(self.load)

    @property
    def compiled_kernels(self) -> list:
        return self.compiled_step.kernels if self.compiled_step else []

    @property
    def tokens_per_s(self) -> float | None:
        return self.tokens_per_step / self.step_s if self.tokens_per_step and self.step_s else None

    @property
    def samples_per_s(self) -> float | None:
        return self.samples_per_step / self.step_s if self.step_s else None

    @property
    def mfu_at_roofline(self) -> float | None:
        """The MFU the step would reach if every op ran at its roofline time."""
        if not self.roofline_step_s:
            return None
        return mfu_model.step_utilisation(
            self.model_flops_per_step, self.roofline_step_s, self.ceiling.peak_flops_per_s
        )

    @property
    def mfu_is_lower_bound(self) -> bool:
        return bool(self.unknown_ops)

    @property
    def mfu_full_attention(self) -> float | None:
        """MFU with attention counted over every position pair (PaLM's convention, the one
        published figures use): higher than the causal-half MFU by the masked pairs."""
        full = (
            self.model_flops_per_step_full_attention or self.analytic_flops_per_step_full_attention
        )
        if not full or not self.step_s:
            return None
        return mfu_model.step_utilisation(full, self.step_s, self.ceiling.peak_flops_per_s)

    @property
    def analytic_vs_counted(self) -> float | None:
        if not self.analytic_flops_per_step or not self.model_flops_per_step:
            return None
        return self.analytic_flops_per_step / self.model_flops_per_step - 1.0


def profile_target(
    target: str | Workload,
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
    timeout_s: float | None = DEFAULT_TIMEOUT_S,
    compile: bool = False,
) -> ProfileReport:
    """Profile a target (see ceiling.profile.targets) on a device; see the module docstring.

    dtype "tf32" runs fp32 with TF32 matmuls and convolutions for this call only (on meta:
    counts against a --spec's TF32 peak); otherwise fp32 follows torch's settings: the
    matmul precision, or cuDNN's convolution setting (TF32 by default) when convolutions
    carry most of the model FLOPs. `compile`: run the model through torch.compile (a
    model passed already compiled is found as such); its generated kernels are listed."""
    if steps < 1 or warmup_steps < 0:
        raise InvalidInput(f"need steps ≥ 1 and warm-up ≥ 0, got {steps} and {warmup_steps}")
    dev = check_device(device)
    key, torch_dtype = parse_dtype(dtype)
    run = functools.partial(
        _profile, target=target, train=train, dev=dev, torch_dtype=torch_dtype, spec=spec,
        profile=profile, batch=batch, seq=seq, warmup_steps=warmup_steps, steps=steps,
        module_depth=module_depth, available_bytes=available_bytes, compile=compile,
    )  # fmt: skip
    name = target.name if isinstance(target, Workload) else target
    with deadline(timeout_s, f"profiling {name}"), LoadWatch() as watch:
        report = _with_tf32(run, key, dev)
    again = "the profile" if isinstance(target, Workload) else f"`ceiling profile {name}`"
    return report if dev.type == "meta" else marked_busy(report, watch.so_far(), again)


def marked_busy(report: ProfileReport, load, again: str) -> ProfileReport:
    """The report with the load its steps ran under; measured on a busy machine, its hints
    (drawn from the step's times) give way to saying so and what to run again."""
    report.load = load.to_json()
    if load.busy:
        report.hints = [
            f"measured while the machine was busy ({'; '.join(load.reasons())}): the step time, "
            "MFU and op times read low and vary, so no hint is drawn from them; run "
            f"{again} again on an idle machine"
        ]
    return report


def _with_tf32(run, key: str, dev: torch.device) -> ProfileReport:
    if key != "tf32":
        return run(key=key, tf32_requested=False)
    if dev.type == "meta":
        return run(key="fp32", tf32_requested=True)
    if dev.type != "cuda":
        raise UnsupportedOnDevice("TF32 is a GPU tensor-core mode; on a CPU use fp32")
    with tf32_on():
        return run(key="fp32", tf32_requested=True)


def _profile(
    *,
    target: str | Workload,
    train: bool,
    dev: torch.device,
    key: str,
    tf32_requested: bool,
    torch_dtype: torch.dtype,
    spec: str | None,
    profile: str | None,
    batch: int | None,
    seq: int | None,
    warmup_steps: int,
    steps: int,
    module_depth: int,
    available_bytes: float | None,
    compile: bool = False,
) -> ProfileReport:
    meta = dev.type == "meta"
    _check_runs(dev, key, torch_dtype, compile)
    tf32 = (tf32_requested or tf32_enabled(dev)) and key == "fp32"
    ceiling = resolve_ceiling(dev, key, tf32, spec, profile)
    workload, target = _workload(target, batch, seq, available_bytes)
    itemsize = torch.empty((), dtype=torch_dtype).element_size()
    if not meta:
        free = available_memory_bytes(dev) if available_bytes is None else available_bytes
        check_fits(workload.params, itemsize, train, free)

    runner = guard(target, StepRunner, workload, dev, torch_dtype, train)
    if compile:
        runner.model = torch.compile(runner.model)
    compiled = not meta and is_compiled(runner.model)
    samples: list[float] = []
    step_s = profiled = sites = None
    if not meta:
        samples, profiled, sites = _timed_steps(target, runner, dev, warmup_steps, steps, compiled)
        step_s = statistics.median(samples)
    rec, recorded_step_s = _recorded_step(target, runner, dev, meta)

    model_flops = rec.model_flops()
    if key == "fp32" and dev.type == "cuda" and not tf32_requested:
        runs_tf32 = _fp32_runs_tf32(rec, model_flops, tf32, dev)
        if runs_tf32 != tf32:
            tf32 = runs_tf32
            ceiling = resolve_ceiling(dev, key, tf32, spec, profile)
    explanation = explain_recorded(rec.calls, ceiling, dev, profile, workload, itemsize, train,
                                   step_s, recorded_step_s, model_flops, compiled=compiled,
                                   runner=runner)  # fmt: skip
    step = None
    if profiled is not None:
        step = guard(target, _compiled_step, rec.calls, explanation, profiled, sites,
                     step_s, str(dev), train)  # fmt: skip
    return _report(
        workload, rec, explanation, dev=dev, key=key, tf32=tf32, train=train, ceiling=ceiling,
        samples=samples, step_s=step_s, recorded_step_s=recorded_step_s, itemsize=itemsize,
        compiled=compiled, step=step, module_depth=module_depth,
    )  # fmt: skip


def _check_runs(dev: torch.device, key: str, torch_dtype: torch.dtype, compile: bool) -> None:
    """Refuse what cannot run before anything is built: a compile on meta, a dtype the device
    does not run."""
    meta = dev.type == "meta"
    if compile and meta:
        raise InvalidInput("--compile runs the model; on meta (counts only) nothing runs")
    if compile:
        check_compiler(str(dev))  # counts only: nothing runs, nothing is timed
    if not meta:
        check_dtype_runs(dev, key, torch_dtype)


def _workload(
    target: str | Workload, batch: int | None, seq: int | None, available_bytes: float | None
) -> tuple[Workload, str]:
    """The workload to profile and its name: a live model and batch (the Python API) as
    given, a target name loaded once its batch is known to fit."""
    if isinstance(target, Workload):
        workload, name = target, target.name
    else:
        check_batch_room(target, batch, seq, available_bytes)
        workload, name = load_target(target, batch=batch, seq=seq), target
    check_layers(workload)
    return workload, name


def _timed_steps(target: str, runner, dev: torch.device, warmup_steps: int, steps: int,
                 compiled: bool):  # fmt: skip
    """The plain step times after warm-up; for a compiled model also the step profiled
    kernel by kernel and the compiled call sites found (else None, None)."""
    profiled = None
    with capture() if compiled else contextlib.nullcontext() as sites:
        guard(target, runner.timed_steps, max(warmup_steps, 2 if compiled else 0))
        samples = guard(target, runner.timed_steps, steps)
        if compiled:
            names = {n for n, found in sites.sites.items() if found[0].kind == "extern"}
            profiled = guard(target, profiled_step, runner.step, str(dev), names)
    return samples, profiled, sites.sites if compiled else None


def _recorded_step(target: str, runner, dev: torch.device, meta: bool):
    """One step under the op recorder, and that step's time less the recorder's own work
    (what op time is a share of; None on meta, where nothing runs)."""
    rec = OpRecorder(time_ops=not meta)
    with rec, warnings.catch_warnings():
        # the recorder's global module hooks fire for the compiled wrapper too: it counts
        # ops, not hook calls, so torch's warning about that says nothing to the user
        warnings.filterwarnings("ignore", message=".*torch.compile.*global hooks")
        t0 = time.perf_counter()
        guard(target, runner.step, rec)
        sync(dev)
        recorded_wall_s = time.perf_counter() - t0
    return rec, None if meta else max(recorded_wall_s - rec.overhead_s, 0.0)


def _fp32_runs_tf32(rec, model_flops: float, tf32: bool, dev: torch.device) -> bool:
    """cuDNN runs fp32 convolutions on TF32 by default, whatever the matmul setting: whether
    this step's fp32 work runs on TF32, from its convolutions' share of the model FLOPs."""
    conv = sum(c.flops for c in rec.calls if c.op.startswith(CONV_PREFIXES))
    share = conv / model_flops if model_flops else 0.0
    return fp32_runs_tf32(tf32, conv_tf32_enabled(dev), share)


def _analytic_flops(workload: Workload, train: bool) -> tuple[float | None, float | None]:
    """A transformer's FLOPs a step from its shape (causal-half as counted, and with full
    attention); (None, None) for any other model."""
    cfg = workload.transformer
    if cfg is None or not workload.tokens_per_step:
        return None, None
    s = workload.seq_len
    passes = 3.0 if train else 1.0  # forward, or forward + backward (2× forward)
    full = cfg.flops_per_token(s, training=train) * workload.tokens_per_step
    attention = passes * cfg.attention_flops_per_token(s) * workload.tokens_per_step
    return full - attention / 2.0, full  # causal-half, as counted


def _report(workload: Workload, rec: OpRecorder, explanation: StepExplanation, *,
            dev: torch.device, key: str, tf32: bool, train: bool, ceiling: Ceiling,
            samples: list[float], step_s: float | None, recorded_step_s: float | None,
            itemsize: int, compiled: bool, step, module_depth: int) -> ProfileReport:  # fmt: skip
    model_flops = rec.model_flops()
    hardware_flops = rec.hardware_flops()
    total = rec.totals()
    peak = ceiling.peak_flops_per_s
    roof = ceiling.roof_flops_per_s
    bw, per_op = explanation.memory_roof_bytes_per_s, explanation.roofs.per_op_s
    analytic, analytic_full = _analytic_flops(workload, train)
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
        mfu=mfu_model.model_flops_utilisation(model_flops, step_s, peak) if step_s else None,
        hfu=mfu_model.model_flops_utilisation(hardware_flops, step_s, peak) if step_s else None,
        mfu_of_achievable=(
            mfu_model.of_achievable(model_flops, step_s, measured_peak)
            if measured_peak and step_s
            else None
        ),
        op_time_s=total.time_s or 0.0,
        ops=[placement.place(t, roof, bw, per_op) for t in rec.by_op() if t.category != "view"],
        modules=[placement.place(t, roof, bw, per_op) for t in rec.by_module(depth=module_depth)],
        categories=[placement.place(t, roof, bw, per_op) for t in rec.by_category()],
        hints=_noise_hint(samples)
        + placement.hints(rec.calls, roof, bw, itemsize, recorded_step_s, compiled, str(dev))
        + (compiled_step.hints(step, bw, str(dev)) if step else [])
        + python_hint(explanation.forward_host, step_s),
        roofline_step_s=placement.roofline_time(rec.calls, roof, bw),
        recorded_step_s=recorded_step_s,
        recomputed_flops=hardware_flops - model_flops,
        model_flops_per_step_full_attention=model_flops + rec.causal_skipped_flops(),
        unknown_ops=sorted({c.op for c in rec.calls if c.category == UNKNOWN}),
        explanation=explanation,
        environment=environment(dev),
        compiled=compiled,
        compiled_step=step,
    )


def _compiled_step(calls, explanation, profiled, sites, step_s, device, train):
    """The compiled step from its kernels and the host time of its frame calls; the eager
    ops outside the compiled graphs (the optimizer, and what runs outside the model)
    predicted as the eager step has them."""
    from ceiling.measure.compiled_overhead import frame_host_s

    outside = [c for c in calls if c.phase == "optimizer" or c.module == "Global"]
    rates, roofs = explanation.matmul_rates, explanation.roofs
    frame_s = frame_host_s(device, train, roofs.host_s(compiled_step.HOST_PHASE))
    return compiled_step.predict(
        profiled, sites, roofs, explanation.memory_roof_bytes_per_s,
        rates=rates, op_rates=rates_by_op(calls, rates),
        predicted_outside_s=predicted_s(outside, explanation), step_s=step_s,
        frame_host_s=frame_s,
    )  # fmt: skip


def _builds_its_own_batch(target: str) -> bool:
    """Built-ins and catalog/custom: models whose inputs this tool makes (not hf: or yours)."""
    low = target.strip().lower()
    return low in ("mlp", "cnn") or low.startswith(("gpt:", "custom:")) or ":" not in low


def check_batch_room(
    target: str, batch: int | None, seq: int | None, available_bytes: float | None
) -> None:
    """Refuse a batch whose inputs alone do not fit in memory, before they are made: one
    sample's bytes (from a batch of one) × batch × 2 (the samples, then the stacked batch).
    Inputs live in host memory on every device, meta included."""
    if batch is None or batch <= 1 or not _builds_its_own_batch(target):
        return
    from ceiling.hardware import capacity

    probe = load_target(target, batch=1, seq=seq)
    tensors = probe.batch if isinstance(probe.batch, (tuple, list)) else (probe.batch,)
    sample = sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))
    room = capacity.local_room() if available_bytes is None else capacity.Room(available_bytes, 1)
    capacity.check_bytes(
        2.0 * batch * sample,
        f"inputs of batch {batch:,} × {sample:,} B per sample × 2 (samples, then the stacked "
        "batch)",
        room,
        "a smaller --batch (activations need more still)",
    )


def check_layers(workload) -> None:
    cfg = workload.transformer
    if cfg is not None and cfg.layers > MAX_LAYERS:
        raise InvalidInput(
            f"{cfg.layers:,} layers is more than the {MAX_LAYERS:,} a profile builds (each "
            "layer's modules are made one by one, even on meta); FLOPs and bytes grow layer by "
            f"layer, so profile {MAX_LAYERS} or fewer and scale by layers / {MAX_LAYERS}"
        )


def explain_recorded(calls, ceiling, dev, profile, workload, itemsize, train, step_s,
                     recorded_s, flops, *, compiled=False, runner=None,
                     data_wait_s=0.0) -> StepExplanation:  # fmt: skip
    """A recorded step (`calls`) of `workload` against the roofs of the device it ran on:
    each matmul, attention and convolution shape at its own measured rate, the forward at
    the model's own host time per op where `runner` can time it (_forward_host). One
    explanation for `ceiling profile`, `ceiling step` and the report alike."""
    from ceiling.measure.decode import _cache_bytes, _private_cache_bytes

    ran = dev.type != "meta"
    cache = _cache_bytes(str(dev)) if ran else None
    roofs, source = local_roofs(ceiling, str(dev), profile, cache, measure=ran, train=train)
    working_set = working_set_bytes(workload.params, itemsize, train, calls)
    host = None
    if runner is not None and ran and not compiled and step_s:
        host = _forward_host(runner, workload, calls, roofs, working_set, itemsize, step_s)
    if host is not None:
        roofs = with_forward_host(roofs, host)
    # each matmul shape timed alone here is its own compute roof (not for another device)
    here = ran and not ceiling.source.startswith("datasheet spec")
    private = _private_cache_bytes(str(dev)) if ran else None
    cold = matmul_cold_bytes(calls, working_set, cache, private)
    rates = measured_matmul_rates(calls, str(dev), cold) if here else None
    return explain_step(
        calls, roofs, source, working_set, ceiling=ceiling, model_flops=flops,
        step_s=step_s, recorded_step_s=recorded_s, data_wait_s=data_wait_s,
        matmul_rates=rates, compiled=compiled, forward_host=host,
    )  # fmt: skip


# The model's own forward host time is measured where the host runs the ops too (a CPU)
# and matters: where the figure it would replace (torch's modules', or an inference step's
# per-op floor) puts the forward's host time at this share of the step or more. A GPU's host
# queues kernels ahead of it, and a forward's fixed time there is not its host's; it keeps
# torch's modules' figure.
FORWARD_HOST_SHARE = 0.02


def _forward_host(runner, workload, calls, roofs, working_set, itemsize, step_s):
    """model.forward_host.ForwardHost of this step's forward, or None where it is not
    measured (see FORWARD_HOST_SHARE) or the batch has no half that runs."""
    from ceiling.model.forward_host import TORCH_MODULES, forward_host
    from ceiling.profile.forward_host import half_batch, time_forward_turns

    if not roofs.serial_dispatch:
        return None
    forward = [c for c in calls if c.phase == "forward"]
    replaced = sum(roofs.host_s(host_phase(c)) for c in forward)
    if not forward or replaced < FORWARD_HOST_SHARE * step_s:
        return None
    samples = workload.samples_per_step
    cut = half_batch(runner.batch, samples)
    if cut is None:
        return None
    half, half_samples = cut
    if runner.optimizer is not None:  # the last step's gradients freed, as a step does
        runner.optimizer.zero_grad(set_to_none=True)
    try:  # once, untimed: its shapes' buffers made, and a half that does not run found
        runner.forward_only(half)
    except CeilingError:
        raise
    except Exception:  # a batch whose halves do not go together: the figure stands
        return None
    turns = guard(workload.name, time_forward_turns, runner, half)
    bandwidth, _ = roofs.memory_roof(working_set)
    weights_s = workload.params * itemsize / bandwidth
    # a training step's forward is priced at torch's own modules' host time per op; an
    # inference step's at the per-op floor
    label = TORCH_MODULES if "forward" in roofs.host_s_by_phase else "the per-op floor"
    return forward_host(turns, len(forward), samples, half_samples, weights_s,
                        replaced / len(forward), label)  # fmt: skip


def _noise_hint(samples: list[float]) -> list[str]:
    """Say so when the timed steps disagree: MFU then depends on which step is taken."""
    from ceiling.measure.stats import summarize

    if len(samples) < 3:
        return []
    st = summarize(samples)
    if not st.noisy:
        return []
    return [
        f"step times vary from {st.min * 1e3:.4g} to {max(samples) * 1e3:.4g} ms (median "
        f"{st.median * 1e3:.4g} ms, IQR {st.relative_iqr * 100:.0f} % of it): something else "
        "is using this machine, so MFU is uncertain; use more --steps or a quieter machine"
    ]


def environment(device: torch.device) -> dict[str, Any]:
    from ceiling.measure.machine import environment

    return environment(str(device))
