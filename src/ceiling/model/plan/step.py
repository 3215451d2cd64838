"""A training plan — data (d), tensor (t) and pipeline (p) parallelism, ZeRO sharding,
recomputation, sequence parallelism — and what it costs: memory per device, time per step,
MFU.

Notation: l layers, h hidden, a heads, q = a·head_dim, k = kv_heads·head_dim, f FFN width,
e active experts, V vocabulary, s sequence length, b micro-batch, B global batch (sequences),
m = B/(d·b) micro-batches per pipeline per step, v model chunks per device (interleaving).
A multiply-add counts as 2 FLOPs. Activations are 16-bit.

`evaluate_arrays` here combines the terms of each group — `memory`, `compute`,
`communication`, `pipeline` (per-piece formulas in `costs`) — into memory per device and
step time. They all take the plans' `Layout` (numpy arrays, one entry per plan), so the
search in `search` evaluates thousands of plans in one pass through the same code that
`evaluate_plan` uses for one.

Sources:
- Model state: ZeRO (Rajbhandari et al. 2020) 2 + 2 + 12 bytes per parameter; Megatron-LM
  keeps fp32 main gradients: 2 + 4 + 12 = 18 (Korthikanti et al. 2022, Fig. 1).
- Activations: Korthikanti et al. 2022, section 4 and Table 2, generalised here to grouped-query
  attention (K and V of width k), gated FFNs and mixture-of-experts (e experts per token).
- Pipeline: 1F1B and interleaved 1F1B, bubble (p-1)/(v·m) and in-flight micro-batches
  (Narayanan et al. 2021); `pipeline_sim` reproduces both by event simulation.
- Hardware FLOPs as Megatron reports them: 96·B·s·l·h²(1 + s/(6h) + V/(16·l·h)) with full
  recompute (Narayanan et al. 2021, eq. 3); the general count below reduces to it for GPT.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from ceiling.errors import InvalidInput
from ceiling.model.plan import recompute
from ceiling.model.plan.attention_kernels import KERNELS
from ceiling.model.plan.axes import Plan, plans_to_arrays
from ceiling.model.plan.communication import data_parallel, model_parallel_comm, pipeline_sends_s
from ceiling.model.plan.compute import stage_compute
from ceiling.model.plan.costs import shape_of
from ceiling.model.plan.features import FEATURES
from ceiling.model.plan.host import HOST_S_PER_KERNEL, HostOptions, host_extra_s, layer_kernels
from ceiling.model.plan.layout import layout_of
from ceiling.model.plan.memory import LOSS, memory
from ceiling.model.plan.moe import DISPATCHERS
from ceiling.model.plan.pipeline import pipeline_step
from ceiling.model.plan.rules import check_plan

ATTENTION = ("unfused", "flash")
# Training frameworks whose recipes set the planner's defaults (`training.recipe_defaults`).
FRAMEWORKS = ("megatron", "nemo", "torchtitan", "maxtext", "deepspeed")
# The attention kernel assumed unless one is asked for (`--attention`), whatever the model and
# wherever it comes from (catalog, custom:, hf:): FlashAttention, or a kernel like it that keeps
# no s×s scores — what Megatron-Core with Transformer Engine, torchtitan (SDPA), NeMo and
# Hugging Face (sdpa) run today. "unfused" is Megatron-LM's 2021 kernels (Narayanan et al.).
DEFAULT_ATTENTION = "flash"

# Bytes per parameter of the fp32 Adam update: read master weights, momentum, variance (3×4)
# and the gradient; write the three back (3×4) and the 16-bit weights (2).
ADAM_UPDATE_BYTES = 26


@dataclass(frozen=True)
class Job:
    """What is trained: the model, the global batch and sequence length, and kernel choices."""

    model: object  # ceiling.model.transformer.TransformerConfig
    global_batch: int  # sequences per optimizer step
    seq_len: int
    attention: str = DEFAULT_ATTENTION  # "unfused": the s×s scores in memory
    dropout: bool = True  # dropout masks after attention, its scores and the MLP
    headroom: float = 0.10  # share of device memory kept free (allocator, buffers, context)
    overlap_dp: bool = True  # gradient reduction overlaps the last micro-batch's backward
    token_budget: float | None = None
    loss: str = "fp32"  # the cross-entropy kernel (LOSS): what the logits cost in memory
    # Mixture-of-experts routing: the busiest expert rank's rows over the even share (None:
    # `moe.IMBALANCE`); the dispatcher (`moe.DISPATCHERS`: NCCL all-to-all sends every copy,
    # DeepEP each token once per destination node) and DeepEP's node limit (0: none).
    moe_imbalance: float | None = None
    # The fused attention kernel (`attention_kernels.KERNELS`; auto: the framework's) and the
    # training framework whose recipe defaults apply (`FRAMEWORKS`).
    attention_kernel: str = "auto"
    framework: str = "megatron"
    moe_dispatcher: str = "auto"  # auto: searched (the dispatcher axis), else pinned
    moe_node_limit: int = 0
    # The free features the stack offers, searched unless pinned (`features.FEATURES`;
    # None: every one the planner prices, no framework named).
    offered: tuple[str, ...] | None = None
    # The host's side (`host`): the stack's MoE router and permutation fusions (Megatron-Core's
    # --moe-router-fusion, --moe-permute-fusion), CUDA graphs of the static parts (attention,
    # router, preprocessing, dense FFNs), and the host seconds per eager kernel launched.
    cuda_graphs: bool = False
    moe_router_fusion: bool = True
    moe_permute_fusion: bool = True
    host_kernel_s: float = HOST_S_PER_KERNEL
    host_measured: bool = False  # host_kernel_s from the device's machine profile

    def __post_init__(self) -> None:
        for name in ("global_batch", "seq_len"):
            val = getattr(self, name)
            if not isinstance(val, int) or isinstance(val, bool) or val < 1:
                raise InvalidInput(f"{name} must be a positive integer, got {val!r}")
        if self.attention not in ATTENTION:
            raise InvalidInput(
                f"attention must be one of {', '.join(ATTENTION)}, got {self.attention!r}"
            )
        if self.loss not in LOSS:
            raise InvalidInput(f"loss must be one of {', '.join(LOSS)}, got {self.loss!r}")
        if not 0 <= self.headroom < 1:
            raise InvalidInput(f"memory headroom must be in [0, 1), got {self.headroom!r}")
        if self.token_budget is not None and not self.token_budget > 0:
            raise InvalidInput(f"token budget must be > 0, got {self.token_budget!r}")
        imbalance = self.moe_imbalance
        if imbalance is not None and not (isinstance(imbalance, (int, float)) and imbalance >= 1):
            raise InvalidInput(f"moe_imbalance must be ≥ 1 (1 = even), got {imbalance!r}")
        for name, allowed in (("attention_kernel", KERNELS), ("framework", FRAMEWORKS)):
            if getattr(self, name) not in allowed:
                raise InvalidInput(
                    f"{name} must be one of {', '.join(allowed)}, got {getattr(self, name)!r}"
                )
        if self.moe_dispatcher not in ("auto", *DISPATCHERS):
            raise InvalidInput(
                f"moe_dispatcher must be one of auto, {', '.join(DISPATCHERS)}, "
                f"got {self.moe_dispatcher!r}"
            )
        if self.offered is not None and not set(self.offered) <= set(FEATURES):
            raise InvalidInput(
                f"offered features must be among {', '.join(FEATURES)}, got {self.offered!r}"
            )
        for name in ("cuda_graphs", "moe_router_fusion", "moe_permute_fusion", "host_measured"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidInput(f"{name} must be True or False, got {getattr(self, name)!r}")
        cost = self.host_kernel_s
        if not (isinstance(cost, (int, float)) and not isinstance(cost, bool) and 0 <= cost < 1):
            raise InvalidInput(f"host seconds per kernel must be in [0, 1), got {cost!r}")
        limit = self.moe_node_limit
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
            raise InvalidInput(f"moe_node_limit must be a whole number ≥ 0, got {limit!r}")


# ---- the whole plan ---------------------------------------------------------------------


def evaluate_arrays(job: Job, cluster, plans: Mapping) -> dict:
    """Evaluate plans given as arrays (or scalars) keyed by axis (`axes.plans_to_arrays`,
    `search.enumerate_plans`); returns the memory and time terms as arrays, by the names
    a plan's JSON gives them.

    Step time, on the most loaded device (the last stage: its layers plus the output layer
    and the loss):
      (m + (p-1)/v) × per-micro-batch stage time — matmuls at the cluster's achieved matmul
        rate, memory-bound kernels at its achieved bandwidth, tensor-parallel all-reduces
        (not overlapped, as in Megatron-LM); the (p-1)/v part is the pipeline bubble
      + point-to-point sends between stages (each hop at the link it crosses)
      + the data-parallel reduction not hidden behind the last micro-batch's backward
        (ZeRO-1/2 also gather the updated weights; ZeRO-3 gathers per micro-batch, hidden
        behind compute where it can be), a share OVERLAP_COST of hidden traffic still counted
      + the optimizer update (memory-bound over the device's shard)
      + the wait for the slowest device: step_jitter · sqrt(2 ln N) of the pipeline time.
    """
    x = layout_of(job, plans)
    mem = memory(job, cluster, x)
    comp = stage_compute(job, cluster, x)
    mp = model_parallel_comm(cluster, x, comp)
    stage_mb = comp.compute_mb + mp.tp_mb + mp.cp_mb + mp.ep_mb
    host_mb = host_bound_mb(job, x, stage_mb - comp.head_mb)
    stage_mb = stage_mb + host_mb
    t, p, m = x.plan.t, x.plan.p, x.m

    # ---- pipeline: bubble and point-to-point sends ----
    pipeline_s, bubble_s, rebuild_mb = pipeline_step(x, comp, mp, stage_mb)
    one_send = x.tokens_mb * x.sh.hidden * 2.0 / t
    p2p_total, _ = pipeline_sends_s(cluster, one_send, x.dg, t, p, x.plan.v, m)
    dp = data_parallel(job, cluster, x, comp.compute_mb)

    # ---- optimizer update (memory-bound over this device's shard) ----
    # Adam's update plus one more read of the gradients for the global norm (clipping).
    shard = np.where(x.plan.zero >= 1, x.dense_dev / x.dz + x.expert_dev / x.d_expert, x.params_dev)
    optimizer_s = shard * (ADAM_UPDATE_BYTES + 2.0 * dp.grad_elem) / cluster.memory_bytes_per_s

    # A synchronous step waits for the slowest of N devices; with independent per-device
    # variation sigma, the expected maximum lies about sigma·sqrt(2 ln N) above the mean.
    devices = x.dg * t * p
    sync_s = (pipeline_s + p2p_total) * cluster.step_jitter * np.sqrt(2.0 * np.log(devices))
    step_s = pipeline_s + p2p_total + dp.exposed + optimizer_s + sync_s
    tokens = float(job.global_batch) * job.seq_len
    # Model FLOPs: 6 per weight a token multiplies plus 12·l·q·s for attention (PaLM,
    # Appendix B) — the hardware count without recomputation, so HFU ≥ MFU always holds.
    model_flops = tokens * (x.sh.layers * 3.0 * comp.fwd_tok + comp.logits_hw_tok)
    hw_flops_total = tokens * (x.sh.layers * comp.layer_hw_tok + comp.logits_hw_tok)
    peak = cluster.peak_flops_per_s
    return {
        "micro_batches": m,
        "params_per_device": x.params_dev,
        **vars(mem),
        **_micro_batch_terms(comp, mp, host_mb, m),
        "dp_hidden_s": dp.hidden,
        "bubble_s": bubble_s,
        "head_s": comp.head_mb * m,  # output layer and loss (in matmul and elementwise)
        # Rebuilding activations, inside the compute and tensor-parallel terms.
        "recompute_s": m * rebuild_mb,
        "stage_layers": np.stack(np.broadcast_arrays(*x.stage_layers), axis=-1),
        "p2p_s": p2p_total,
        "dp_comm_s": dp.total,
        "dp_exposed_s": dp.exposed,
        "optimizer_s": optimizer_s,
        "straggler_s": sync_s,
        "step_s": step_s,
        "tokens_per_s": tokens / step_s,
        "mfu": model_flops / (step_s * devices * peak),
        "hfu": hw_flops_total / (step_s * devices * peak),
        "hw_flops_per_device_per_s": hw_flops_total / (step_s * devices),
    }


def _micro_batch_terms(comp, mp, host_mb, m) -> dict:
    """The step's terms each micro-batch repeats, over its `m` micro-batches."""
    return {
        "matmul_s": comp.matmul_mb * m,
        "attention_s": comp.attention_mb * m,
        "fp8_matmul_s": comp.fp8_matmul_mb * m,
        "fp8_cast_s": comp.fp8_cast_mb * m,
        "elementwise_s": comp.elementwise_mb * m,
        "eager_kernels_s": comp.eager_mb * m,
        "host_s": host_mb * m,
        "tp_comm_s": mp.tp_mb * m,
        "cp_comm_s": mp.cp_mb * m,
        "ep_comm_s": mp.ep_mb * m,
        "tp_hidden_s": mp.tp_hidden_mb * m,
        "cp_hidden_s": mp.cp_hidden_mb * m,
        "ep_hidden_s": mp.ep_hidden_mb * m,
    }


def host_options(job: Job) -> HostOptions:
    return HostOptions(
        cuda_graphs=job.cuda_graphs,
        router_fusion=job.moe_router_fusion,
        permute_fusion=job.moe_permute_fusion,
        kernel_s=job.host_kernel_s,
    )


def host_bound_mb(job: Job, x, layers_gpu_mb):
    """Seconds per micro-batch the last stage's GPU waits for the host to launch its layers'
    kernels (`host`): each layer's host time (kernels × seconds a kernel) against its share of
    the stage's GPU time (`layers_gpu_mb`, the output layer and loss left out)."""
    opts = host_options(job)
    qk_norm = bool(getattr(job.model, "qk_norm", False))  # a field not every config has yet
    fwd, bwd, after_sync = layer_kernels(x.sh, x, opts, qk_norm)
    layers = np.maximum(x.layers_dev, 1.0)
    extra = host_extra_s(
        fwd * opts.kernel_s,
        bwd * opts.kernel_s,
        after_sync * opts.kernel_s,
        layers_gpu_mb / layers,
        x.rc_linear,
    )
    return x.layers_dev * extra


# ---- one plan, validated and explained --------------------------------------------------


# The parts of a plan's memory per device and of its step time, as PlanEstimate keeps them.
MEMORY_TERMS = (
    "state_bytes",
    "weight_bytes",
    "gradient_bytes",
    "optimizer_bytes",
    "gathered_weight_bytes",
    "fp8_weight_bytes",
    "activation_bytes",
    "logits_bytes",
    "recompute_working_bytes",
    "layer_activation_bytes",
    "layer_state_bytes",
    "params_per_device",
)
TIME_TERMS = (
    "matmul_s",
    "attention_s",
    "fp8_matmul_s",
    "fp8_cast_s",
    "elementwise_s",
    "eager_kernels_s",
    "host_s",
    "tp_comm_s",
    "cp_comm_s",
    "ep_comm_s",
    "bubble_s",
    "p2p_s",
    "dp_exposed_s",
    "optimizer_s",
    "straggler_s",
)


@dataclass(frozen=True)
class PlanEstimate:
    plan: Plan
    micro_batches: int
    fits: bool
    memory_bytes_per_device: float
    usable_bytes_per_device: float
    # state (= weight + gradient + optimizer), activation (peak, with logits),
    # gathered_weight (ZeRO-3 buffers), layer_state, layer_activation, params_per_device
    memory: dict[str, float]
    step_time_s: float
    time: dict[str, float]  # matmul, elementwise, tp_comm, bubble, p2p, dp_exposed, optimizer
    dp_comm_s: float  # total data-parallel traffic time, hidden or not
    tokens_per_s: float
    mfu: float
    hfu: float
    hw_tflops_per_device: float
    time_to_train_s: float | None
    notes: tuple[str, ...] = field(default_factory=tuple)
    # Communication hidden behind compute (not in `time`, whose parts sum to the step):
    # tensor-parallel, context-parallel ring, data-parallel (gradients, ZeRO-3 gathers).
    hidden: dict[str, float] = field(default_factory=dict)
    # Layers on the first, a middle and the last pipeline device; the stage whose memory is
    # the peak (`memory` is that stage's).
    stages: dict = field(default_factory=dict)
    recompute_s: float = 0.0  # rebuilding activations: inside `time`, not added to it
    recompute_detail: dict = field(default_factory=dict)  # what is kept, what rebuilt
    # The free features the search switched on (`features.bought`): each one's step without
    # it, the seconds it saves and the memory it adds.
    features: dict = field(default_factory=dict)

    def to_json(self, why_slower: str = "") -> dict:
        """The plan's axes (from `axes`), then what it costs."""
        return {
            **self.plan.to_json(),
            "micro_batches": self.micro_batches,
            "memory_bytes_per_device": self.memory_bytes_per_device,
            "usable_bytes_per_device": self.usable_bytes_per_device,
            "memory_breakdown_bytes": {
                k: v for k, v in self.memory.items() if k.endswith("_bytes")
            },
            "fits": self.fits,
            "step_time_s": self.step_time_s,
            "time_breakdown_s": self.time,
            "hidden_comm_s": self.hidden,
            "recompute_time_s": self.recompute_s,
            "recompute_detail": self.recompute_detail,
            "pipeline_stages": self.stages,
            "dp_comm_total_s": self.dp_comm_s,
            "tokens_per_s": self.tokens_per_s,
            "mfu": self.mfu,
            "hfu": self.hfu,
            "hw_tflops_per_device": self.hw_tflops_per_device,
            "time_to_train_s": self.time_to_train_s,
            "features_switched_on": self.features,
            "why_slower": why_slower or None,
            "notes": list(self.notes),
        }


def evaluate_plan(job: Job, cluster, plan: Plan) -> PlanEstimate:
    notes = check_plan(job, cluster, plan)
    r = evaluate_arrays(job, cluster, plans_to_arrays([plan]))
    return result_from_arrays(job, plan, r, 0 if np.ndim(r["step_s"]) else None, notes)


def result_from_arrays(job: Job, plan: Plan, r: dict, i, notes=()) -> PlanEstimate:
    def g(key):
        val = r[key] if i is None else np.broadcast_to(r[key], np.shape(r["step_s"]))[i]
        return float(val)

    tps = g("tokens_per_s")
    return PlanEstimate(
        plan=plan,
        micro_batches=round(g("micro_batches")),
        fits=bool(g("fits")),
        memory_bytes_per_device=g("memory_bytes"),
        usable_bytes_per_device=g("usable_bytes"),
        memory={key: g(key) for key in MEMORY_TERMS},
        step_time_s=g("step_s"),
        time={key: g(key) for key in TIME_TERMS},
        dp_comm_s=g("dp_comm_s"),
        tokens_per_s=tps,
        mfu=g("mfu"),
        hfu=g("hfu"),
        hw_tflops_per_device=g("hw_flops_per_device_per_s") / 1e12,
        time_to_train_s=(job.token_budget / tps) if job.token_budget else None,
        notes=tuple(notes),
        hidden={key: g(f"{key}_hidden_s") for key in ("tp", "cp", "dp")},
        stages=_stages_of(r, i),
        recompute_s=g("recompute_s"),
        recompute_detail=recompute.explain(plan.recompute, shape_of(job.model).ffn_mats),
    )


def _stages_of(r: dict, i) -> dict:
    """Layers on the first, a middle and the last device, and which one's memory is the
    peak (`_memory`)."""
    layers = np.asarray(r["stage_layers"])
    row = layers if i is None or layers.ndim == 1 else layers[i]
    heaviest = np.asarray(r["heaviest_stage"])
    which = int(heaviest if heaviest.ndim == 0 or i is None else heaviest[i])
    return {
        "layers": [int(x) for x in row],
        "heaviest_memory": ("first", "middle", "last")[which],
    }
