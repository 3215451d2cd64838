"""What a plan assumed, in words: the `assumptions` of `ceiling.plan()`'s result, which the
command's "assumed" line shows."""

from __future__ import annotations

import math


def moe_told(job) -> str:
    """How a mixture of experts routes, in words ("" for a dense model)."""
    from ceiling.model.plan import moe

    if not moe.moe_of(job.model).routed:
        return ""
    skew = job.moe_imbalance
    said = (
        f"busiest expert rank {skew:g}× the even share (given)"
        if skew is not None
        else f"busiest expert rank {moe.IMBALANCE:g}× the even share (the default: a Switch "
        "Transformer capacity factor)"
    )
    limit = f", at most {job.moe_node_limit} nodes a token" if job.moe_node_limit else ""
    how = (
        "dispatch by NCCL all-to-all or DeepEP, searched"
        if job.moe_dispatcher == "auto"
        else f"{job.moe_dispatcher} dispatch"
    )
    return f"{said}; {how}{limit}"


def host_told(job) -> str:
    """How the host launches the layers' kernels, in words."""
    from ceiling.model.plan import host, moe

    if job.host_measured:
        whence = " (measured by `ceiling bench overhead`: host time an op of an eager step)"
    elif job.host_kernel_s == host.HOST_S_PER_KERNEL:
        whence = " (the default: PyTorch's 5-20 µs CPU launch, Holistic Trace Analysis)"
    else:
        whence = " (given)"
    cost = f"{job.host_kernel_s * 1e6:.3g} µs a kernel launched{whence}"
    routed = moe.moe_of(job.model).routed
    parts = "attention, router and dense FFNs" if routed else "attention and FFNs"
    graphs = f"CUDA graphs of {parts}" if job.cuda_graphs else "eager"
    fused = ""
    if routed:
        router = "fused" if job.moe_router_fusion else "unfused"
        permute = "fused" if job.moe_permute_fusion else "unfused"
        fused = f", MoE router {router}, permutation {permute}"
    return f"{graphs}{fused}; {cost}"


def attention_kernel_told(cluster, job) -> str:
    """Which rate the fused attention runs at, in words."""
    from ceiling.model.plan import attention_kernels

    if job.attention != "flash":
        return "unfused: batched GEMMs over the whole s×s scores at the matmul rate"
    if cluster.attention_measured or not attention_kernels.has_curves(cluster.device):
        return (
            f"one share of the peak for this device, {cluster.attention_efficiency:.2f} "
            "(measured, or clusters.toml with its source)"
        )
    kernel = job.attention_kernel
    if kernel == "auto":
        kernel = attention_kernels.default_kernel(job.framework)
    return (
        f"{kernel}: its published rate by head dim, causal mask and the length each device "
        "attends over (FlashAttention-3 paper, Figs. 5-6, H100 SXM)"
    )


def assumptions(cluster, job, attention_given: bool, dropout_given: bool) -> dict:
    fp8 = "fp8" in cluster.device.peak_flops_per_s
    return {
        "matmul_efficiency": cluster.matmul_efficiency,
        "efficiency_source": cluster.efficiency_source,
        "memory_efficiency": cluster.memory_efficiency,
        "attention": job.attention,
        "dropout": job.dropout,
        "attention_from": "given"
        if attention_given
        else "the default for every model "
        "(FlashAttention-like: no s×s scores kept; --attention unfused for Megatron-LM's)",
        "dropout_from": "given" if dropout_given else "the model's config",
        "headroom": job.headroom,
        "loss": job.loss,
        "dp_overlap": "gradient reduction overlaps the last micro-batch's backward"
        if job.overlap_dp
        else "none (gradient reduction after the backward)",
        "tp_overlap": "as each plan's tp_overlap (searched where the framework offers it, "
        "else off unless pinned; off: tensor-parallel collectives exposed; on: all but the "
        "first of t chunks hidden behind the GEMMs)",
        "attention_efficiency": cluster.attention_efficiency,
        "attention_kernel": attention_kernel_told(cluster, job),
        # FP8 GEMMs' share of the FP8 peak and where it comes from (None: the device has no FP8).
        "fp8_matmul_efficiency": cluster.fp8_efficiency if fp8 else None,
        "fp8_efficiency_source": cluster.fp8_efficiency_source if fp8 else None,
        "gemm_shape": "each GEMM at the matmul efficiency times its tile utilisation over "
        "the device's SMs (padding and wave quantisation)",
        "flops": "a multiply-add counts as 2; peaks are dense",
    }


def straggler_told(cluster) -> str:
    """What the straggler term is, its size here, where its figure comes from and how to set
    it (`step.evaluate_arrays`: the wait for the slowest device)."""
    jitter, n = cluster.step_jitter, cluster.devices
    source = cluster.sources.get("jitter", "an assumption of clusters.toml")
    if jitter == 0 or n < 2:
        return f"none (step_jitter {jitter:g}; {source})"
    share = jitter * math.sqrt(2.0 * math.log(n))
    return (
        f"a synchronous step waits for the slowest of its {n} devices: each device's step "
        f"varies by {jitter:.0%} (relative std. deviation; {source}), the slowest about "
        f"{jitter:g}·√(2 ln {n}) = {share:.1%} of the pipeline time above the mean; "
        "set it with step_jitter (--step-jitter; 0 leaves it out)"
    )


def model_facts(cfg, job, pins: dict) -> list[str]:
    """The facts of the model's config the plan used, each in words."""
    facts = []
    if cfg.tied_embeddings:
        facts.append("input and output embeddings tied (one vocab × hidden matrix)")
    if cfg.sliding_window and cfg.local_layers:
        facts.append(
            f"{cfg.local_layers} of {cfg.layers} layers attend over at most "
            f"{cfg.sliding_window:,} tokens"
        )
    if cfg.expert_groups > 1 and cfg.expert_groups_per_token:
        facts.append(
            f"group-limited routing: a token's experts from {cfg.expert_groups_per_token} of "
            f"{cfg.expert_groups} groups, at most {job.moe_node_limit or 'any'} nodes a token "
            "with DeepEP (a group a node)"
        )
    stored = getattr(cfg, "stored_weights", None)
    if stored == "fp8":
        fp8 = pins.get("fp8", "off")
        facts.append(
            "weights published in FP8 (quantization_config): linear layers in FP8"
            if fp8 != "off"
            else "weights published in FP8 (quantization_config); this device or the pins "
            "run the linear layers in 16 bits"
        )
    elif stored:
        facts.append(f"weights published in {stored} (quantization_config; decode reads them so)")
    notes = cfg.source.split("; ")[1:] if cfg.source.startswith("Hugging Face") else []
    return facts + [n for n in notes if not n.startswith("weights stored in")]
