"""The parallelism planner as a result: `ceiling.plan("llama-3-8b", 64, spec="h100-sxm")`."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ceiling.api.arguments import BadArgument, argument_named, checked
from ceiling.api.result import Result
from ceiling.model.transformer import ModelArgument

# Beyond these no cluster or training run exists, and the search's work grows with them.
MAX_DEVICES = 2**20
MAX_GLOBAL_BATCH = 2**24
MAX_DOUBLINGS = 8


def _count(value: Any, what: str, hi: int) -> int:
    given = value  # refused as written: '1e308', not its 309 digits
    if isinstance(value, str):
        from ceiling.errors import CeilingError
        from ceiling.units import parse_count

        try:
            value = parse_count(value)
        except CeilingError:
            value = None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= hi:
        raise BadArgument(
            what,
            f"must be between 1 and {hi:,} (more is beyond any cluster or training run), "
            f"got {given!r}",
        )
    return value


# A link below a byte per second or above a petabyte per second exists nowhere (and
# 1e-300 B/s would make every time infinite).
BANDWIDTH_RANGE = (1.0, 1e15)


def _bandwidth(value: str | float | None, name: str) -> float | None:
    """A link bandwidth: text with its unit ("100GB/s") or bytes/s."""
    if value is None:  # not given
        return None
    if isinstance(value, str):
        from ceiling.units import parse_bandwidth

        with argument_named(name):
            value = parse_bandwidth(value)
    low, high = BANDWIDTH_RANGE
    if not low <= value <= high:
        raise BadArgument(name, f"must be between 1 B/s and 1 PB/s, got {value:g} B/s")
    return float(value)


def _loss(loss: str) -> str:
    from ceiling.model.plan.step import LOSS

    if loss not in LOSS:
        raise BadArgument("loss", f"must be one of {', '.join(LOSS)}, got {loss!r}")
    return loss


def training_job(
    cfg, seq, global_batch, attention, dropout, headroom, dp_overlap, tokens, loss="fp32"
):
    """The Job to plan (its arguments checked, `model.plan.training.training_job` the rest)."""
    from ceiling.model.plan.step import ATTENTION
    from ceiling.model.plan.training import default_seq
    from ceiling.model.plan.training import training_job as job_of

    if attention is not None and attention not in ATTENTION:
        raise BadArgument("attention", f"must be one of {', '.join(ATTENTION)}, got {attention!r}")
    s = seq if seq is not None else default_seq(cfg)
    if s < 1:
        raise BadArgument("seq", f"must be ≥ 1, got {s}")
    if s > cfg.max_seq:
        raise BadArgument(
            "seq",
            f"{s} > {cfg.name}'s {cfg.max_seq} positions; plan a longer context with "
            f"custom:...,max_seq={s}",
        )
    if isinstance(tokens, str):
        from ceiling.units import parse_count

        tokens = parse_count(tokens)
    job = job_of(
        cfg,
        s,
        _count(global_batch, "global_batch", MAX_GLOBAL_BATCH) if global_batch else None,
        attention=attention,
        dropout=dropout,
        headroom=headroom,
        overlap_dp=dp_overlap,
        token_budget=float(tokens) if tokens else None,
        loss=_loss(loss),
    )
    return job


def _fixed_text(fixed: str | dict | None) -> str | None:
    """Pins as the command line spells them: {"t": 8, "sp": False} -> "t=8,sp=off"."""
    if not isinstance(fixed, dict):
        return fixed

    def text(v: Any) -> str:
        return ("on" if v else "off") if isinstance(v, bool) else str(v)

    return ",".join(f"{k}={text(v)}" for k, v in fixed.items())


@dataclass(frozen=True)
class PlanResult(Result):
    """The ranked plans (`search.plans`, with `search.why` each loses to the best), the job
    and cluster they were planned for, and the same job on 2N, 4N, ... (`scaling`)."""

    model: Any  # TransformerConfig
    job: Any  # model.plan.step.Job
    cluster: Any  # model.cluster.Cluster
    search: Any  # model.plan.search.SearchResult
    scaling: list[Any]
    assumptions: dict[str, Any]
    fixed: dict[str, Any]
    title = "Training plan"

    @property
    def plans(self) -> list[Any]:
        return self.search.plans

    @property
    def best(self) -> Any:
        return self.search.plans[0]

    def record(self) -> dict[str, Any]:
        job, result = self.job, self.search
        return {
            "model": self.model.name,
            "params_total": self.model.params_total,
            "global_batch": job.global_batch,
            "seq_len": job.seq_len,
            "tokens_per_step": job.global_batch * job.seq_len,
            "cluster": self.cluster.to_json(),
            "assumptions": self.assumptions,
            "fixed": self.fixed,
            "evaluated": result.evaluated,
            "fitting": result.fitting,
            "plans": [
                {**r.to_json(w), "accuracy": self.accuracy(r).to_json()}
                for r, w in zip(result.plans, result.why, strict=True)
            ],
            "scaling": [row.to_json() for row in self.scaling],
        }

    def accuracy(self, row=None):
        """The error band of a plan row's step time (default the best): the regime it falls
        in and that regime's |error| on published runs, scored leave-one-source-out."""
        from ceiling.validation.features import plan_band

        return plan_band(self.model, row or self.best, self.job.seq_len, self.cluster.device)

    def figure(self):
        """Where each ranked plan's step goes, its parts stacked, the best on top."""
        from ceiling.render.plan_plot import plan_figure

        rows = [(f"#{k + 1} {_layout(p.plan)}", p.time) for k, p in enumerate(self.plans)]
        return plan_figure(rows, self.heading())

    def heading(self) -> str:
        b = self.best
        return (
            f"{self.model.name} on {self.cluster.devices} × {self.cluster.device.name}: best "
            f"step {b.step_time_s:.3g} s, MFU {b.mfu:.1%}"
        )


def _layout(p) -> str:
    """`32×2×1 b4`, `8×1×16 cp2 ep64 b1`: d×t×p, the other parallel axes above 1, the
    micro-batch."""
    more = "".join(f" {k}{v}" for k, v in (("cp", p.cp), ("ep", p.ep), ("v", p.v)) if v > 1)
    return f"{p.d}×{p.t}×{p.p}{more} b{p.micro_batch}"


@checked
def plan(
    model: ModelArgument,
    gpus: int | str,
    *,
    spec: str | None = None,
    machine_profile: Path | str | None = None,
    gpus_per_node: int | None = None,
    global_batch: int | str | None = None,
    seq: int | None = None,
    top: int = 5,
    fixed: str | dict | None = None,
    attention: str | None = None,
    dropout: bool | None = None,
    dp_overlap: bool = True,
    headroom: float = 0.10,
    matmul_efficiency: float | None = None,
    intra_bw: str | float | None = None,
    inter_bw: str | float | None = None,
    dtype: str = "bf16",
    tokens: float | str | None = None,
    loss: str | None = None,
    scaling: int = 0,
    calibrate: Path | str | None = None,
    framework: str | None = None,
    attention_kernel: str | None = None,
    moe_dispatcher: str | None = None,
    moe_imbalance: float | None = None,
    moe_node_limit: int | None = None,
    cuda_graphs: bool | None = None,
    moe_fusion: bool | None = None,
    host_kernel_us: float | None = None,
    step_jitter: float | None = None,
) -> PlanResult:
    """Plan training of `model` (catalog name, "custom:...", "hf:PATH", a Hugging Face config
    as a dict or a transformers config object) on `gpus` devices of a catalog `spec` (or
    `machine_profile`'s device, by default the saved one): every valid data/tensor/pipeline/
    expert split evaluated for memory and step time, the `top` fastest that fit ranked.
    `fixed` pins plan fields ("d=8,t=8" or {"t": 8}); `scaling` also plans at 2N, 4N, ...;
    link bandwidths are text with a unit ("100GB/s") or bytes/s. `calibrate`: a
    torch.profiler trace of the user's run, whose GEMM, attention, memory and collective
    efficiencies replace the defaults. `framework` (megatron, the default; nemo, torchtitan,
    maxtext, deepspeed) applies its recipe's defaults (`model.plan.frameworks`) where nothing
    else is given. `attention_kernel` (fa2, fa3, cudnn) picks fused attention's published
    curve on Hopper; a mixture of experts routes with `moe_dispatcher` (alltoall, or deepep:
    once per destination node, to at most `moe_node_limit` nodes, by default the model's
    group-limited routing; None: searched), its busiest expert rank `moe_imbalance` times the
    even share. The free features the framework's stack offers (overlaps, DeepEP, DualPipe:
    `model.plan.features`) are searched unless `fixed` pins them; the best plan says what
    each bought.
    The host launches each kernel in `host_kernel_us` µs (`model.plan.host`); `cuda_graphs`
    and `moe_fusion` as the recipe unless given. `step_jitter`: the relative variation of a
    device's step (default `clusters.toml`'s); a synchronous step waits for the slowest."""
    from ceiling.model.plan.axes import parse_fixed
    from ceiling.model.plan.training import plan_training

    cfg, recipe = _model_and_recipe(model, framework, scaling)
    job = _recipe_job(
        training_job(cfg, seq, global_batch, attention, dropout, headroom, dp_overlap, tokens,
                     recipe.job.get("loss", "fp32") if loss is None else loss),
        recipe,
        moe_dispatcher=moe_dispatcher, moe_node_limit=moe_node_limit, moe_imbalance=moe_imbalance,
        attention_kernel=attention_kernel, cuda_graphs=cuda_graphs, moe_router_fusion=moe_fusion,
        moe_permute_fusion=moe_fusion, host_kernel_s=_host_kernel_s(host_kernel_us),
    )  # fmt: skip
    n = _count(gpus, "gpus", MAX_DEVICES)
    pins = parse_fixed(_fixed_text(fixed))
    device, dtype = _device(spec, machine_profile, dtype, matmul_efficiency)
    cal = _calibration(calibrate, spec) if calibrate is not None else None
    adjust = _calibrated_cluster(cal, dtype, cfg, job, _sequences_a_call(pins, job, n))
    planned = plan_training(
        job, device, n, pins=pins, top=top, doublings=scaling, dtype=dtype,
        gpus_per_node=gpus_per_node, intra_bytes_per_s=_bandwidth(intra_bw, "intra_bw"),
        inter_bytes_per_s=_bandwidth(inter_bw, "inter_bw"),
        matmul_efficiency=matmul_efficiency, recipe=recipe, step_jitter=_jitter(step_jitter),
        adjust_cluster=adjust,
    )  # fmt: skip
    told = _told(planned, attention is not None, dropout is not None, adjust, calibrate)
    p = planned
    return PlanResult(cfg, p.job, p.cluster, p.search, p.scaling, told, p.pins)


def _model_and_recipe(model, framework: str | None, scaling: int):
    """(the model's shapes, its framework's recipe), the doublings checked first."""
    from ceiling.model.plan.training import recipe_defaults
    from ceiling.model.transformer import parse_model

    _check_doublings(scaling)
    cfg = parse_model(model)
    with argument_named("framework"):
        return cfg, recipe_defaults(framework, cfg)


def _check_doublings(scaling: int) -> None:
    if not 0 <= scaling <= MAX_DOUBLINGS:
        raise BadArgument(
            "scaling", f"must be between 0 and {MAX_DOUBLINGS} doublings, got {scaling}"
        )


def _recipe_job(job, recipe, **options):
    """The job with the recipe's fields (its loss is the caller's) and each option given."""
    job = replace(job, **{k: v for k, v in recipe.job.items() if k != "loss"})
    return _with_options(job, options)


def _with_options(job, given: dict):
    """The job with each option given (None: not given), checked by name."""
    for name, value in given.items():
        if value is None:
            continue
        with argument_named(name):
            job = replace(job, **{name: value})
    return job


def _host_kernel_s(host_kernel_us) -> float | None:
    if host_kernel_us is None:
        return None
    if isinstance(host_kernel_us, bool) or not isinstance(host_kernel_us, (int, float)):
        raise BadArgument("host_kernel_us", f"must be a number, got {host_kernel_us!r}")
    if not 0 <= host_kernel_us < 1e5:
        raise BadArgument("host_kernel_us", f"must be in [0, 1e5) µs, got {host_kernel_us}")
    return host_kernel_us * 1e-6


def _jitter(step_jitter) -> float | None:
    if step_jitter is None:
        return None
    ok = isinstance(step_jitter, (int, float)) and not isinstance(step_jitter, bool)
    if not ok or not 0 <= step_jitter < 1:
        raise BadArgument("step_jitter", f"must be in [0, 1), got {step_jitter!r}")
    return float(step_jitter)


def _device(spec, machine_profile, dtype: str, matmul_efficiency):
    """The resolved device and the dtype, checked: the device must have the dtype's peak."""
    from ceiling.hardware.resolve import resolve
    from ceiling.model.plan.training import datasheet_of, peak_dtype
    from ceiling.vocabulary import normalize_dtype

    if matmul_efficiency is not None and not 0 < matmul_efficiency <= 1:
        raise BadArgument("matmul_efficiency", f"must be in (0, 1], got {matmul_efficiency}")
    with argument_named("dtype"):
        dtype = normalize_dtype(dtype)
    device = resolve(spec, machine_profile)
    datasheet = datasheet_of(device)
    if peak_dtype(dtype) not in datasheet.peak_flops_per_s:
        have = ", ".join(datasheet.dtypes)
        raise BadArgument(
            "dtype", f"{peak_dtype(dtype)}: {datasheet.name} has no such peak (it has {have})"
        )
    return device, dtype


def _calibrated_cluster(cal, dtype: str, cfg, job, sequences: int = 1):
    """The cluster adjustment a trace's calibration makes (None: no trace)."""
    if cal is None:
        return None
    return _Calibrated(cal, dtype, _typical_sizes(cfg, job, dtype, sequences), sequences)


def _sequences_a_call(pins: dict, job, gpus: int) -> int:
    """The sequences a kernel of the plan works on, for the sizes a traced figure is compared
    with: the micro-batch `--fixed b=` pins, else the batch each device gets (the most a
    micro-batch can hold: the calibration is made once, for every plan searched)."""
    pinned = pins.get("micro_batch")
    if isinstance(pinned, int) and pinned >= 1:
        return pinned
    return max(1, job.global_batch // max(gpus, 1))


class _Calibrated:
    """The cluster with the trace's figures (`trace.calibration.calibrated`), remembering the
    defaults they replaced (what the plan says it extrapolated toward)."""

    def __init__(self, cal, dtype: str, sizes: dict[str, float], sequences: int = 1) -> None:
        self.cal, self.dtype, self.sizes, self.defaults = cal, dtype, sizes, {}
        self.sequences = sequences

    def __call__(self, cluster):
        from ceiling.trace.calibration import SCOPES, calibrated

        self.defaults = self.defaults or {n: getattr(cluster, n) for n in SCOPES}
        return calibrated(cluster, self.cal, self.dtype, sizes=self.sizes)

    def applied(self, cluster) -> dict:
        """What the plan takes of each traced figure, and why (its scope)."""
        from ceiling.trace.calibration import SCOPES, scoped

        cal, applied = self.cal, {}
        for name in cal.taken:
            if name == "collective_efficiency":
                applied[name] = {"measured": cal.collective_efficiency,
                                 "applied": cal.collective_efficiency, "scope": ""}  # fmt: skip
                continue
            value, why = scoped(cal, name, self.dtype, self.sizes.get(name), self.defaults[name])
            applied[name] = {"measured": getattr(cal, name),
                             "applied": None if value is None else getattr(cluster, name),
                             "default": self.defaults[name],
                             "plan_size_per_call": self.sizes.get(name), "scope": why}  # fmt: skip
        gemm = {"dtype": self.dtype, "flops_per_call": self.sizes["matmul_efficiency"],
                "sequences_a_call": self.sequences}  # fmt: skip
        # taken: what the plan uses; a figure measured but kept at its default is said so
        taken = {k: a["applied"] for k, a in applied.items() if a["applied"] is not None}
        kept = [k for k in SCOPES if k not in taken] + (
            [] if "collective_efficiency" in taken else ["collective_efficiency"])  # fmt: skip
        return {"applied": applied, "plan_gemm": gemm, "taken": taken, "kept_defaults": kept,
                "measured_figures": {k: getattr(cal, k) for k in cal.taken}}  # fmt: skip


def _told(planned, attention_given: bool, dropout_given: bool, adjust, calibrate) -> dict:
    """The assumptions of a plan, in words."""
    from ceiling.api.plan_told import (
        assumptions,
        host_told,
        model_facts,
        moe_told,
        straggler_told,
    )

    cluster, job = planned.cluster, planned.job
    told = assumptions(cluster, job, attention_given, dropout_given)
    told["framework"] = planned.recipe.said
    told["framework_defaults"] = dict(planned.recipe.defaults)
    if moe := moe_told(job):
        told["moe"] = moe
    told["host"] = host_told(job)
    told["straggler"] = straggler_told(cluster)
    told["model_facts"] = model_facts(job.model, job, planned.pins)
    if adjust is not None:
        told["calibrated_from"] = _calibration_told(calibrate, adjust.cal)
        told["calibrated_from"].update(adjust.applied(cluster))
    return told


def _typical_sizes(cfg, job, dtype: str, sequences: int = 1) -> dict[str, float]:
    """The size a call of each kind of op in the step has over `sequences` sequences (what a
    traced figure's sizes are compared with): a hidden × hidden projection's FLOPs, one
    layer's attention FLOPs, and the bytes an elementwise op reads and writes over its
    activations."""
    s, h, n = job.seq_len, cfg.hidden, sequences
    element = 4 if dtype in ("fp32", "tf32") else 2
    return {
        "matmul_efficiency": 2.0 * n * s * h * h,
        "attention_efficiency": 4.0 * n * s * s * h,
        "memory_efficiency": 2.0 * n * s * h * element,
    }


def _calibration(trace_path: Path | str, spec: str | None):
    """The efficiencies measured in the user's trace, against its own device's peaks (the
    device the trace names), or `spec`'s when the trace names none."""
    from ceiling.trace.analyze import analyze

    with argument_named("calibrate"):
        result = analyze(trace_path)
        if result.device.name is not None or spec is None:
            return result.calibration()
        from dataclasses import replace

        cal = analyze(trace_path, spec=spec).calibration()
        return replace(cal, device=f"{cal.device} (the trace names no device: --spec's)")


def _calibration_told(trace_path, cal) -> dict:
    """What the trace measured (what the plan took of it: `_Calibrated.applied`)."""
    return {
        "trace": str(trace_path),
        "how": cal.basis,
        # what the trace measured, so that what the plan extrapolates from it can be said
        "measured": {
            "device": cal.device,
            "gemm_dtypes": list(cal.matmul_dtypes),
            "gemm_flops_per_call": cal.matmul_flops_per_call,
            "attention_dtypes": list(cal.attention_dtypes),
            "attention_flops_per_call": cal.attention_flops_per_call,
            "memory_bytes_per_call": cal.memory_bytes_per_call,
            "ranks": cal.world_size,
        },
        "why_not": dict(cal.missing),
    }
