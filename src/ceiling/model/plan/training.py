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

from ceiling.errors import InvalidInput
from ceiling.model.plan.search import SearchResult, scaling, search
from ceiling.model.plan.step import DEFAULT_ATTENTION, Job

# Without --seq and --global-batch: at most 4,096 tokens a sequence, about 4M tokens a step.
DEFAULT_SEQ = 4096
DEFAULT_TOKENS_PER_STEP = 4 * 2**20


# Models this large run the Megatron-Core/NeMo recipes with tensor-parallel communication
# overlap on: NeMo's gpt3_175b, llama3_70b, llama31_405b and nemotron4_340b recipes set
# tp_comm_overlap (userbuffers); its 8B-class recipes (llama3_8b) leave it off.
TP_OVERLAP_FROM_PARAMS = 30e9


@dataclass(frozen=True)
class Recipe:
    """What a framework's recipes set that the planner would otherwise assume: plan axes
    pinned unless the user pins them, job fields, and the words that say so."""

    pins: dict
    job: dict
    said: str


def recipe_defaults(framework: str | None, cfg) -> Recipe:
    """The defaults of a training framework's recipes for `cfg` (None: the planner's own).

    megatron: Megatron-LM/Megatron-Core with Transformer Engine — the distributed optimizer's
      gradient reduce overlapped (--overlap-grad-reduce), TP overlap for large models;
    nemo: as megatron; NeMo 2's GPTConfig fuses the cross-entropy (cross_entropy_loss_fusion
      = True) and its performance recipes reduce gradients in 16 bits
      (`recipe.trainer.plugins.grad_reduce_in_fp32 = False`, with the DDP config's): 16 bytes
      of state a parameter, not 18 — 10.75 GiB less for a 340B model on TP8 PP8;
    torchtitan: FSDP over the data-parallel ranks (data_parallel_shard_degree -1), eager
      PyTorch (compile off in its train configs), F.cross_entropy on upcast logits, SDPA's
      flash backend (FlashAttention-2);
    maxtext: FSDP over the data-parallel ranks (ici_fsdp_parallelism -1), XLA-fused
      pointwise kernels and loss, cuDNN flash attention through Transformer Engine on GPUs;
      XLA runs the step as compiled programs, no kernel launched one by one from Python
      (priced as CUDA graphs, `host`).

    Mixture-of-experts recipes: Megatron-Core's (and NeMo's) MoE recipes fuse the router and
    the permutation (--moe-router-fusion, --moe-permute-fusion: the Megatron-Core MoE model
    zoo's Qwen3 and DeepSeek-V3 configs) and run eagerly without CUDA graphs on Hopper;
    torchtitan's router is plain PyTorch ops (unfused)."""
    if framework is None:
        return Recipe({}, {}, "")
    big = cfg.params_total >= TP_OVERLAP_FROM_PARAMS
    routed = cfg.experts > 1
    if framework in ("megatron", "nemo"):
        pins = {"tp_overlap": True} if big else {}
        nemo = framework == "nemo"
        pins.update({"state_bytes": 16} if nemo else {})
        job = {"loss": "fused"} if nemo else {}
        said = (
            f"{framework} recipe: gradient reduce overlapped"
            + (", MoE router and permutation fused, no CUDA graphs" if routed else "")
            + (f", TP overlap on ({cfg.params_total / 1e9:.0f}B ≥ 30B)" if big else "")
            + (
                ", 16-bit gradients (16 bytes of state a parameter), fused cross-entropy"
                if nemo
                else ""
            )
        )
        return Recipe(pins, {**job, "framework": framework}, said)
    if framework == "torchtitan":
        return Recipe(
            {"zero": 3, "kernels": "eager"},
            {"loss": "eager", "framework": framework, "attention_kernel": "fa2"}
            | ({"moe_router_fusion": False} if routed else {}),
            "torchtitan recipe: FSDP, eager kernels (no compile), eager cross-entropy, "
            "SDPA flash attention (FlashAttention-2)" + (", unfused router" if routed else ""),
        )
    if framework == "maxtext":
        return Recipe(
            {"zero": 3},
            {"loss": "fused", "framework": framework, "attention_kernel": "cudnn"}
            | {"cuda_graphs": True},
            "maxtext recipe: FSDP, fused kernels and loss (XLA), cuDNN flash attention, "
            "compiled programs (no per-kernel launches)",
        )
    from ceiling.model.plan.step import FRAMEWORKS

    raise InvalidInput(f"framework must be one of {', '.join(FRAMEWORKS)}, got {framework!r}")


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
    published training run's)."""
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
    )


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
):
    """The cluster of `gpus` devices of a resolved device (`hardware.resolve.ResolvedDevice`):
    a datasheet spec with the `clusters.toml` efficiencies, or a measured profile's GPU (its
    catalog entry for links and node size) with the efficiencies it measured."""
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
    **cluster_options: Any,
) -> TrainingPlan:
    """Search the plans of `job` on `gpus` of `device` (a resolved device); `pins` fixes
    axes (`axes.parse_fixed`); `doublings` > 0 also plans at 2N, 4N, ...; dtype fp8 runs
    the linear layers' GEMMs in FP8 and the rest in bf16, as real FP8 runs do.
    `adjust_cluster(cluster)` returns the cluster to plan on instead (efficiencies measured
    elsewhere, e.g. in a trace of the user's run)."""
    pins = dict(pins or {})
    if dtype == "fp8":
        pins.setdefault("fp8", "linear")
    job = with_measured_host(job, device)
    dtype = peak_dtype(dtype)

    def cluster_for(count: int):
        cluster = plan_cluster(device, count, dtype=dtype, **cluster_options)
        return adjust_cluster(cluster) if adjust_cluster else cluster

    cluster = cluster_for(gpus)
    result = search(job, cluster, pins, top=top)
    counts = [gpus * 2**i for i in range(doublings + 1)]
    rows = scaling(job, cluster_for, counts, pins) if doublings else []
    return TrainingPlan(job, cluster, result, rows, pins)
