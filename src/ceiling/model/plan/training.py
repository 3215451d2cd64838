"""One training plan from a model, a device and a device count: the function `ceiling plan`,
`ceiling.plan()` and the report's planner section all call, so the same inputs give the same
plan, step time and MFU wherever they are asked.

The caller resolves the device (`hardware.resolve`: a datasheet spec, or a measured profile
whose matmul and memory efficiencies then replace the `clusters.toml` defaults) and checks
its own arguments; everything from there on happens here once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from ceiling.errors import DoesNotFit, InvalidInput
from ceiling.model.plan import features
from ceiling.model.plan.frameworks import Recipe, recipe_defaults
from ceiling.model.plan.refusals import suggesting, without_unpinning
from ceiling.model.plan.search import SearchResult, scaling, search
from ceiling.model.plan.step import DEFAULT_ATTENTION, Job

# Without --seq and --global-batch: at most 4,096 tokens a sequence, about 4M tokens a step.
DEFAULT_SEQ = 4096
DEFAULT_TOKENS_PER_STEP = 4 * 2**20


def default_seq(cfg) -> int:
    return min(cfg.max_seq, DEFAULT_SEQ)


def default_global_batch(seq: int) -> int:
    return max(1, round(DEFAULT_TOKENS_PER_STEP / seq))


def training_job(
    cfg,
    seq: int | None = None,
    global_batch: int | None = None,
    *,
    attention: str | None = None,
    dropout: bool | None = None,
    headroom: float = 0.10,
    overlap_dp: bool = True,
    token_budget: float | None = None,
    loss: str = "fp32",
) -> Job:
    """The Job to plan, with the defaults above for what is not given: the attention kernel
    `step.DEFAULT_ATTENTION` for every model, dropout as the model's config says (its
    published training run's), DeepEP's node limit as its routing does (`model_node_limit`)."""
    s = seq if seq is not None else default_seq(cfg)
    return Job(
        cfg,
        global_batch or default_global_batch(s),
        s,
        attention=attention if attention is not None else DEFAULT_ATTENTION,
        dropout=dropout if dropout is not None else cfg.trained_dropout,
        headroom=headroom,
        overlap_dp=overlap_dp,
        token_budget=token_budget,
        loss=loss,
        moe_node_limit=model_node_limit(cfg),
    )


def model_pins(cfg, device) -> dict:
    """What the model's config decides of a plan: weights published in FP8 (DeepSeek-V3's
    quantization_config) were trained with FP8 linear layers, planned so on a device with an
    FP8 rate."""
    if getattr(cfg, "stored_weights", None) != "fp8":
        return {}
    return {"fp8": "linear"} if "fp8" in datasheet_of(device).peak_flops_per_s else {}


def model_node_limit(cfg) -> int:
    """Group-limited routing (DeepSeek's n_group, topk_group) as the node limit of DeepEP's
    dispatch: with a group of experts on each node, a token reaches at most topk_group
    nodes (DeepSeek-V3 technical report, section 2.1.2: 4 nodes); 0 without."""
    limit = getattr(cfg, "expert_groups_per_token", None)
    return limit if cfg.expert_groups > 1 and limit else 0


def _plans(job: Job, cluster, pins: dict) -> bool:
    """Whether some plan with `pins` runs and fits."""
    try:
        search(job, cluster, pins, top=1)
    except (DoesNotFit, InvalidInput):
        return False
    return True


def peak_dtype(dtype: str) -> str:
    """The dtype of the peak a plan in `dtype` is measured against: fp8 plans run their
    linear layers' GEMMs in FP8 (the fp8 axis) and everything else in bf16, as real FP8 runs
    do."""
    return "bf16" if dtype == "fp8" else dtype


def datasheet_of(device):
    """The catalog entry whose links, node and peaks the planner takes for a resolved device:
    the spec itself, or a measured profile's GPU as the catalog knows it."""
    if not device.from_profile:
        return device.spec
    spec = device.datasheet
    if spec is None:
        raise InvalidInput(
            f"the profiled device {device.measured.name!r} is not in the catalog, so its links "
            "and node are unknown; pass --spec NAME"
        )
    return spec


def plan_cluster(
    device,
    gpus: int,
    *,
    gpus_per_node: int | None = None,
    intra_bytes_per_s: float | None = None,
    inter_bytes_per_s: float | None = None,
    matmul_efficiency: float | None = None,
    dtype: str = "bf16",
    step_jitter: float | None = None,
):
    """The cluster of `gpus` devices of a resolved device (`hardware.resolve.ResolvedDevice`):
    a datasheet spec with the `clusters.toml` efficiencies, or a measured profile's GPU (its
    catalog entry for links and node size) with the efficiencies it measured; `step_jitter`
    replaces the `clusters.toml` variation of a device's step (the straggler term)."""
    from ceiling.model.cluster import (
        efficiencies_from_profile,
        fp8_efficiency_from_profile,
        make_cluster,
    )

    spec = datasheet_of(device)
    mm_eff, mem_eff, source, fp8_eff = matmul_efficiency, None, None, None
    if device.from_profile:
        prof_mm, mem_eff = efficiencies_from_profile(device.measured, spec, dtype)
        fp8_eff = fp8_efficiency_from_profile(device.measured, spec)
        if mm_eff is None:
            mm_eff = prof_mm
            source = f"measured by `ceiling bench` ({device.profile_path})"
    if dtype not in spec.peak_flops_per_s:
        have = ", ".join(spec.dtypes)
        raise InvalidInput(f"dtype {dtype}: {spec.name} has no such peak (it has {have})")
    cluster = make_cluster(
        spec,
        gpus,
        gpus_per_node,
        intra_node_bandwidth_bytes_per_s=intra_bytes_per_s,
        inter_node_bandwidth_bytes_per_s=inter_bytes_per_s,
        matmul_efficiency=mm_eff,
        memory_efficiency=mem_eff,
        dtype=dtype,
        efficiency_source=source,
        device_source=device.source,
    )
    if step_jitter is not None:
        sources = {**cluster.sources, "jitter": "given"}
        cluster = replace(cluster, step_jitter=float(step_jitter), sources=sources)
    # A measured FP8 rate prices FP8 GEMMs at their own share of the FP8 peak.
    return replace(cluster, fp8_matmul_efficiency=fp8_eff) if fp8_eff else cluster


def with_measured_host(job: Job, device) -> Job:
    """The job with the host seconds a kernel its device's GPU profile measured (`host`),
    where the job holds the default."""
    from ceiling.model.plan.host import HOST_S_PER_KERNEL, measured_kernel_s

    if job.host_kernel_s != HOST_S_PER_KERNEL or not getattr(device, "from_profile", False):
        return job
    measured = measured_kernel_s(device.measured)
    return replace(job, host_kernel_s=measured, host_measured=True) if measured else job


@dataclass(frozen=True)
class TrainingPlan:
    """The ranked plans of a job on a cluster, and the best plan at 2N, 4N, ... devices."""

    job: Job
    cluster: Any  # model.cluster.ClusterSpec
    search: SearchResult
    scaling: list  # search.ScalingRow per device count, the first the cluster's own
    pins: dict[str, Any]
    recipe: Recipe  # the framework's defaults the plans were made with


def plan_training(
    job: Job,
    device,
    gpus: int,
    *,
    pins: dict | None = None,
    top: int = 5,
    doublings: int = 0,
    dtype: str = "bf16",
    adjust_cluster: Callable | None = None,
    recipe: Recipe | None = None,
    **cluster_options: Any,
) -> TrainingPlan:
    """Search the plans of `job` on `gpus` of `device` (a resolved device); `pins` fixes
    axes (`axes.parse_fixed`); `doublings` > 0 also plans at 2N, 4N, ...; dtype fp8 runs
    the linear layers' GEMMs in FP8 and the rest in bf16, as real FP8 runs do.
    `adjust_cluster(cluster)` returns the cluster to plan on instead (efficiencies measured
    elsewhere, e.g. in a trace of the user's run). `recipe` (default: the default framework's,
    `frameworks.DEFAULT_FRAMEWORK`) pins its axes where `pins` does not and offers its free
    features (`features.offered`) where the job names none; its job fields are the caller's
    to apply (`Job` holds the default framework's)."""
    recipe = recipe or recipe_defaults(None, job.model)
    own = {**recipe.pins, **model_pins(job.model, device)}  # set again when the user's omit
    pins = {**own, **(pins or {})}
    if dtype == "fp8":
        pins.setdefault("fp8", "linear")
    job = with_measured_host(job, device)
    if job.offered is None:  # the free features the recipe's stack offers are searched
        job = replace(job, offered=features.offered(recipe.framework))
    dtype = peak_dtype(dtype)

    def cluster_for(count: int):
        cluster = plan_cluster(device, count, dtype=dtype, **cluster_options)
        return adjust_cluster(cluster) if adjust_cluster else cluster

    cluster = cluster_for(gpus)
    try:
        with suggesting(job, gpus, pins, lambda pinned: _plans(job, cluster, pinned), DoesNotFit):
            result = search(job, cluster, pins, top=top)
    except (InvalidInput, DoesNotFit) as err:
        if getattr(err, "suggestions", None) is None:
            raise
        raise without_unpinning(err, own, job.model.layers, pins.get("p")) from None
    counts = [gpus * 2**i for i in range(doublings + 1)]
    rows = scaling(job, cluster_for, counts, pins) if doublings else []
    return TrainingPlan(job, cluster, result, rows, pins, recipe)
