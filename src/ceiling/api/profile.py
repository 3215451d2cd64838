"""Profile a live model as a result: `ceiling.profile(model, batch)`.

The same analysis as `ceiling profile TARGET` (one step recorded op by op, placed under the
roofs, MFU and HFU of the timed steps), given the model and batch you already hold.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ceiling.api.arguments import checked
from ceiling.api.result import Result
from ceiling.errors import InvalidInput
from ceiling.vocabulary import canonical_dtype

# what a live model's parameters may be held in for a profile
MODEL_DTYPES = ("fp32", "bf16", "fp16", "fp64")


def _ops_json(rows) -> list[dict]:
    return [
        {
            "name": p.name,
            "category": p.category,
            "calls": p.calls,
            "flops": p.flops,
            "bytes": p.bytes,
            "time_s": p.time_s,
            "intensity_flop_per_byte": p.intensity,
            "attainable_flops_per_s": p.attainable_flops_per_s,
            "achieved_flops_per_s": p.achieved_flops_per_s,
            "roofline_time_s": p.roofline_time_s,
            "fraction_of_attainable": p.fraction_of_attainable,
            "bound": p.bound,
            "exact": p.exact,
        }
        for p in rows
    ]


def report_json(r) -> dict:
    """A `profile.run.ProfileReport` as the command's JSON record."""
    from ceiling.render import waterfall

    c = r.ceiling
    return {
        "target": r.target,
        "device": r.device,
        "dtype": r.dtype,
        "tf32": r.tf32,
        "train": r.train,
        "samples_per_step": r.samples_per_step,
        "tokens_per_step": r.tokens_per_step,
        "step_s": r.step_s,
        "step_samples_s": r.step_samples_s,
        "tokens_per_s": r.tokens_per_s,
        "samples_per_s": r.samples_per_s,
        "mfu": r.mfu,
        "mfu_is_lower_bound": r.mfu_is_lower_bound,
        "unknown_ops": r.unknown_ops,
        "hfu": r.hfu,
        "mfu_of_achievable": r.mfu_of_achievable,
        "mfu_full_attention": r.mfu_full_attention,
        "roofline_step_s": r.roofline_step_s,
        "mfu_at_roofline": r.mfu_at_roofline,
        "recorded_step_s": r.recorded_step_s,
        "model_flops_per_step": r.model_flops_per_step,
        "model_flops_per_step_full_attention": r.model_flops_per_step_full_attention,
        "hardware_flops_per_step": r.hardware_flops_per_step,
        "recomputed_flops_per_step": r.recomputed_flops,
        "other_flops_per_step": r.other_flops_per_step,
        "analytic_flops_per_step": r.analytic_flops_per_step,
        "analytic_flops_per_step_full_attention": r.analytic_flops_per_step_full_attention,
        "analytic_vs_counted": r.analytic_vs_counted,
        "attention_convention": r.attention_convention,
        "flop_convention": r.flop_convention,
        "ceiling": {
            "name": c.name,
            "source": c.source,
            "kind": c.kind,
            "peak_dtype": c.peak_key,
            "peak_flops_per_s": c.peak_flops_per_s,
            "measured_peak_flops_per_s": c.measured_peak_flops_per_s,
            "roofline_peak_flops_per_s": c.roof_flops_per_s,
            "bandwidth_bytes_per_s": c.bandwidth_bytes_per_s,
        },
        "op_time_s": r.op_time_s,
        "ops": _ops_json(r.ops),
        "modules": _ops_json(r.modules),
        "categories": _ops_json(r.categories),
        "hints": r.hints,
        "roofs": waterfall.explanation_json(r.explanation),
        "method_version": r.method_version,
        "environment": r.environment,
        "load": r.load,
        "busy": bool(r.busy_reasons),
        "busy_reasons": r.busy_reasons,
        "compiled": r.compiled,
        "compiled_kernels": [_kernel_json(k) for k in r.compiled_kernels],
        "compiled_step": _compiled_step_json(r.compiled_step),
    }


def _kernel_json(k) -> dict:
    return {
        "name": k.name,
        "kind": k.kind,
        "calls": k.calls,
        "time_s": k.time_s,
        "bytes_read": k.bytes_read,
        "bytes_written": k.bytes_written,
        "flops": k.flops,
        "matmul_dims": list(k.matmul_dims) if k.matmul_dims else None,
        "predicted_s": k.predicted_s,
        "bound": k.bound,
    }


def _compiled_step_json(s) -> dict | None:
    if s is None:
        return None
    return {
        "step_s": s.step_s,
        "predicted_step_s": s.predicted_step_s,
        "profiled_step_s": s.profiled_step_s,
        "kernel_s": s.kernel_s,
        "outside_s": s.outside_s,
        "host_s": s.host_s,
        "predicted_kernel_s": s.predicted_kernel_s,
        "predicted_host_s": s.predicted_host_s,
        "predicted_outside_s": s.predicted_outside_s,
        "frames": s.frames,
        "frame_calls": s.frame_calls,
        "graph_breaks": s.graph_breaks,
        "generated_bytes": s.generated_bytes,
        "uncaptured_kernels": s.uncaptured,
    }


_SHORT_NAMES = (
    ("aten.", ""),
    ("_scaled_dot_product_", "sdpa_"),
    ("_attention_for_cpu", "_cpu"),
    ("_attention", ""),
    ("native_", ""),
    ("_backward", "_bwd"),
    ("_bwd_data", "_bwd"),
)


def short_op_name(name: str) -> str:
    """aten._scaled_dot_product_flash_attention_for_cpu_backward -> sdpa_flash_cpu_bwd."""
    for long, short in _SHORT_NAMES:
        name = name.replace(long, short)
    return name.lstrip("_") or name


@dataclass(frozen=True)
class ProfileResult(Result):
    """One step of a model: per-op FLOPs, bytes and time under the roofs, MFU and HFU
    (`report`: the `profile.run.ProfileReport` the command prints)."""

    report: Any
    title = "Profile"

    @property
    def mfu(self) -> float | None:
        return self.report.mfu

    @property
    def hfu(self) -> float | None:
        return self.report.hfu

    @property
    def step_s(self) -> float | None:
        return self.report.step_s

    @property
    def model_flops_per_step(self) -> float:
        return self.report.model_flops_per_step

    @property
    def hardware_flops_per_step(self) -> float:
        return self.report.hardware_flops_per_step

    @property
    def ops(self) -> list[Any]:
        return self.report.ops

    @property
    def compiled_step(self) -> Any:
        """A compiled model's step from its kernels (`profile.compiled_step.CompiledStep`):
        each kernel's bytes, FLOPs, measured and predicted time; None for an eager model."""
        return self.report.compiled_step

    def record(self) -> dict[str, Any]:
        return report_json(self.report)

    def heading(self) -> str:
        r = self.report
        what = "training step" if r.train else "forward pass"
        mfu = f", MFU {r.mfu:.1%}" if r.mfu is not None else ""
        return f"{r.target}: {what} on {r.device} ({r.dtype}){mfu}"

    def figure(self):
        """Each op's achieved FLOP/s against its intensity, under the roofline."""
        from ceiling.render import plots

        r = self.report
        peak, bw = r.ceiling.roof_flops_per_s, r.ceiling.bandwidth_bytes_per_s
        pts = [p for p in r.ops if p.intensity and p.achieved_flops_per_s]
        lo = min([p.intensity for p in pts] + [peak / bw / 100])
        hi = max([p.intensity for p in pts] + [peak / bw * 100])
        fig, ax = plots.subplots(figsize=(6.4, 4.2))
        xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
        ax.plot(xs, [min(peak, x * bw) for x in xs], color="k", lw=1.5, label="roofline")
        for p in pts[:40]:
            ax.plot(p.intensity, p.achieved_flops_per_s, "o", ms=4)
            ax.annotate(short_op_name(p.name), (p.intensity, p.achieved_flops_per_s),
                        fontsize=6, xytext=(3, 2), textcoords="offset points")  # fmt: skip
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("arithmetic intensity (FLOP/byte)")
        ax.set_ylabel("achieved FLOP/s (multiply-add = 2)")
        ax.set_title(f"{r.target} on {r.ceiling.name} ({r.ceiling.peak_key})")
        ax.grid(True, which="both", alpha=0.3)
        return fig


def profile_target(target: str, **options: Any) -> ProfileResult:
    """A named target ("gpt:tiny", a catalog model, "hf:PATH", "module:callable"), as
    `ceiling profile TARGET` runs it; options as `profile.run.profile_target`'s."""
    from ceiling.profile.run import profile_target as run_target

    return ProfileResult(run_target(target, **options))


def model_place(model) -> tuple[str, str]:
    """(device, dtype name) of the model's first floating-point parameter: where and in
    what it runs unless told otherwise."""
    for p in model.parameters():
        if p.is_floating_point():
            name = canonical_dtype(p.dtype)
            if name not in MODEL_DTYPES:
                held = str(p.dtype).removeprefix("torch.")
                raise InvalidInput(f"the model's parameters are {held}: give dtype=")
            return str(p.device), name
    return "cpu", "fp32"


@checked
def profile(
    model,
    batch,
    train: bool = True,
    loss_fn=None,
    optimizer=None,
    device: str | None = None,
    steps: int = 5,
    *,
    dtype: str | None = None,
    forward=None,
    tokens_per_step: int | None = None,
    spec: str | None = None,
    machine_profile: str | None = None,
    warmup_steps: int = 1,
    name: str | None = None,
    timeout_s: float | None = None,
) -> ProfileResult:
    """Profile one step of a live `model` on `batch` (a tensor, a tuple, or a dict such as a
    Hugging Face batch, passed as model(**batch)).

    train: forward, backward and an optimizer step (`optimizer`, default AdamW, so the
    weights change: pass a copy to keep them); else a forward under no_grad. loss_fn(output,
    batch): default the output's `loss`, else its logits' mean. `forward(model, batch)`
    replaces the default call. device and dtype default to the model's own (a model on
    "meta" is counted without running; others move the model there, in place); tokens per
    step default to input_ids' size. The
    peak is the saved machine profile's, or a catalog device's with `spec`."""
    from torch import nn

    from ceiling.profile.run import profile_target
    from ceiling.profile.targets import from_parts

    if isinstance(model, str):
        raise InvalidInput(
            f"ceiling.profile takes a live nn.Module; profile the named target {model!r} "
            "with ceiling.api.profile.profile_target(name, train=..., batch=..., seq=...)"
        )
    if not isinstance(model, nn.Module):
        raise InvalidInput(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if batch is None:
        raise InvalidInput("give the batch the model takes (a tensor, a tuple or a dict)")
    if optimizer is not None and not train:
        raise InvalidInput("an optimizer only runs in a training step: drop it or train=True")
    own_device, own_dtype = model_place(model)
    label = name or type(model).__name__
    parts = {
        "model": model,
        "batch": batch,
        "loss_fn": loss_fn,
        "optimizer": optimizer,
        "forward": forward,
        "tokens_per_step": tokens_per_step,
    }
    report = profile_target(
        from_parts(label, parts),
        train=train,
        device=device or own_device,
        dtype=dtype or own_dtype,
        spec=spec,
        profile=machine_profile,
        steps=steps,
        warmup_steps=warmup_steps,
        timeout_s=timeout_s,
    )
    return ProfileResult(report)
