"""What each training framework's recipes set that the planner would otherwise assume
(`--framework`): state bytes a parameter, expert tensor parallelism, how gradients are reduced
(overlapped or not, in which buckets), tensor-parallel overlap by model size, how FSDP
reshards, kernels and loss. Without `--framework` the planner plans Megatron-Core's defaults
and says so.

Sources, one a default:
- state bytes a parameter. Megatron-LM forces fp32 gradient accumulation and reduction with
  bf16 (arguments.py: ``accumulate_allreduce_grads_in_fp32 = True``): bf16 weights (2), fp32
  main gradients (4), fp32 master weights and Adam moments (12) — 18, the distributed
  optimizer's table (docs/source/api-guide/dist_optimizer.md: "bf16 param, fp32 grads:
  6 + 12/d"). NeMo 2's performance recipes reduce in 16 bits (``grad_reduce_in_fp32 =
  False``): 16. DeepSpeed's bf16 ZeRO reduces in the model's dtype (``communication_data_type``
  unset): 2 + 2 + 12 = 16 (Rajbhandari et al. 2020, section 3.1, "16Ψ"). torchtitan's FSDP2
  and MaxText keep fp32 sharded weights and reduce fp32 gradients (torchtitan
  ``mixed_precision_reduce = "float32"``): 4 + 4 + 8 = 16 sharded, priced as 18 (fp32
  gradients on the wire; the 16-bit option of this planner means 16-bit gradients).
- expert tensor parallelism. Megatron-Core's MoE model zoo (Qwen3, DeepSeek-V3) and NeMo's
  MoE recipes run ``--expert-tensor-parallel-size 1``; torchtitan's
  ``expert_tensor_parallel_degree`` defaults to 1; DeepSpeed-MoE splits no expert
  (``enable_expert_tensor_parallelism = False``): etp=1 for every recipe.
- gradient reduce. Megatron-Core's recipes set ``--overlap-grad-reduce`` with buckets of
  max(40M, 1M·dp) parameters (``DistributedDataParallelConfig.bucket_size``); torchtitan's
  FSDP2 reduce-scatters each block's gradients as the backward leaves it; XLA schedules
  MaxText's reductions asynchronously; DeepSpeed ZeRO-1/2 reduce after the backward by default
  (``overlap_comm = false``, ``reduce_bucket_size = 5e8`` elements).
- tensor-parallel overlap. NeMo's gpt3_175b, llama3_70b, llama31_405b and nemotron4_340b
  recipes set ``tp_comm_overlap`` (userbuffers), its 8B-class recipes leave it off: on from
  30B parameters for nemo. Megatron-LM's ``--tp-comm-overlap`` is opt-in (default off), as
  is torchtitan's async TP: off for the others.
- FSDP resharding. torchtitan's ``reshard_after_forward_policy = "default"`` frees the
  gathered weights after the forward without a pipeline and keeps them with one; ZeRO-3 and
  MaxText gather again in the backward.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ceiling.errors import InvalidInput

DEFAULT_FRAMEWORK = "megatron"
# Models this large run the Megatron-Core/NeMo recipes with tensor-parallel overlap on.
TP_OVERLAP_FROM_PARAMS = 30e9


@dataclass(frozen=True)
class Recipe:
    """What a framework's recipes set: plan axes pinned unless the user pins them, job
    fields, and the words that say so (each default with its value)."""

    framework: str
    pins: dict
    job: dict
    said: str
    defaults: dict = field(default_factory=dict)  # default -> its value, in words
    chosen: bool = True  # False: no --framework given, the planner's default framework


def _megatron(cfg, nemo: bool) -> tuple[dict, dict, dict]:
    big = nemo and cfg.params_total >= TP_OVERLAP_FROM_PARAMS
    routed = cfg.experts > 1
    pins = {"state_bytes": 16 if nemo else 18}
    pins.update({"tp_overlap": True} if big else {})
    pins.update({"etp": 1} if routed else {})
    job = {"loss": "fused"} if nemo else {}
    said = {
        "state": "16 bytes a parameter (16-bit gradients, grad_reduce_in_fp32=False)"
        if nemo
        else "18 bytes a parameter (fp32 gradients, the distributed optimizer's 6 + 12/d)",
        "gradient reduce": "overlapped with the backward, buckets of max(40M, 1M·d) parameters",
        "TP overlap": f"on ({cfg.params_total / 1e9:.0f}B ≥ 30B)"
        if big
        else f"off ({cfg.params_total / 1e9:.3g}B < 30B)"
        if nemo
        else "off (--tp-comm-overlap is opt-in)",
    }
    if routed:
        said["ETP"] = "1 (the MoE recipes' expert_tensor_parallel_size)"
        said["MoE"] = "router and permutation fused, no CUDA graphs"
    if nemo:
        said["loss"] = "fused cross-entropy"
    return pins, job, said


def _torchtitan(cfg) -> tuple[dict, dict, dict]:
    routed = cfg.experts > 1
    pins = {"zero": 3, "kernels": "eager", "state_bytes": 18, "tp_overlap": False}
    pins.update({"etp": 1} if routed else {})
    job = {"loss": "eager", "attention_kernel": "fa2"}
    job.update({"moe_router_fusion": False} if routed else {})
    said = {
        "state": "18 bytes a parameter as priced (fp32 sharded weights, fp32 gradient reduce)",
        "FSDP": "over the data-parallel ranks, resharded after the forward (kept with PP)",
        "gradient reduce": "reduce-scatter per block, overlapped with the backward",
        "TP overlap": "off (async TP is opt-in)",
        "kernels": "eager (no compile), eager cross-entropy, SDPA flash (FlashAttention-2)",
    }
    if routed:
        said["ETP"] = "1 (expert_tensor_parallel_degree)"
        said["MoE"] = "unfused router"
    return pins, job, said


def _maxtext(cfg) -> tuple[dict, dict, dict]:
    pins = {"zero": 3, "state_bytes": 18, "tp_overlap": False}
    pins.update({"etp": 1} if cfg.experts > 1 else {})
    job = {"loss": "fused", "attention_kernel": "cudnn", "cuda_graphs": True}
    said = {
        "state": "18 bytes a parameter as priced (fp32 weights and gradients)",
        "FSDP": "over the data-parallel ranks (ici_fsdp_parallelism -1), gathered again in "
        "the backward",
        "gradient reduce": "asynchronous (XLA), overlapped",
        "kernels": "fused kernels and loss (XLA), cuDNN flash attention, compiled programs "
        "(no per-kernel launches)",
    }
    if cfg.experts > 1:
        said["ETP"] = "1 (each expert whole on its expert-parallel shard)"
    return pins, job, said


def _deepspeed(cfg) -> tuple[dict, dict, dict]:
    pins = {"state_bytes": 16, "tp_overlap": False}
    pins.update({"etp": 1} if cfg.experts > 1 else {})
    job = {"overlap_dp": False}
    said = {
        "state": "16 bytes a parameter (bf16 gradients, ZeRO's 16Ψ)",
        "gradient reduce": "after the backward (overlap_comm=false), buckets of 5e8 elements",
        "TP overlap": "off",
        "ZeRO-3": "parameters gathered again in the backward (stage3 prefetch 5e7)",
    }
    if cfg.experts > 1:
        said["ETP"] = "1 (DeepSpeed-MoE splits no expert)"
    return pins, job, said


_RECIPES = {
    "megatron": lambda cfg: _megatron(cfg, nemo=False),
    "nemo": lambda cfg: _megatron(cfg, nemo=True),
    "torchtitan": _torchtitan,
    "maxtext": _maxtext,
    "deepspeed": _deepspeed,
}
FRAMEWORKS = tuple(_RECIPES)


def recipe_defaults(framework: str | None, cfg) -> Recipe:
    """The defaults of a training framework's recipes for `cfg` (None: `DEFAULT_FRAMEWORK`'s,
    named as the default)."""
    name = framework if framework is not None else DEFAULT_FRAMEWORK
    if name not in _RECIPES:
        raise InvalidInput(f"framework must be one of {', '.join(FRAMEWORKS)}, got {name!r}")
    from ceiling.model.plan.axes import BY_KEY

    pins, job, defaults = _RECIPES[name](cfg)
    # A pin that is the planner's own default changes nothing and is not shown as pinned.
    pins = {k: v for k, v in pins.items() if BY_KEY[k].default != v}
    whose = f"{name} recipe" if framework is not None else f"{name} recipe (the default)"
    said = f"{whose}: " + ", ".join(f"{k} {v}" for k, v in defaults.items())
    return Recipe(name, pins, {**job, "framework": name}, said, defaults, framework is not None)
