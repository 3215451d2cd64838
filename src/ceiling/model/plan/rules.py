"""The cross-axis validity rules of a plan: what must divide what, with the arithmetic.

The axes themselves (names, valid values) are declared in `axes`; the search enumerates
only plans that pass these rules (`search.enumerate_plans`).
"""

from __future__ import annotations

import math

from ceiling.errors import InvalidInput
from ceiling.model.plan.costs import shape_of


def check_plan(job, cluster, plan) -> list[str]:
    """Raise InvalidInput for a plan that cannot run, showing the arithmetic; return notes
    (warnings) for one that runs badly."""
    sh = shape_of(job.model)
    n = cluster.devices
    if plan.devices != n:
        cp = f" × cp({plan.cp})" if plan.cp > 1 else ""
        raise InvalidInput(
            f"the plan uses d({plan.d}) × t({plan.t}) × p({plan.p}){cp} = {plan.devices} "
            f"devices but the cluster has {n}; every device must hold a share of the work"
        )
    _check_context_and_fp8(job, cluster, plan)
    check_stage_layout(
        sh.layers, plan.first_stage_layers, plan.last_stage_layers, plan.p, plan.v,
        plan.ends_in_split,
    )  # fmt: skip
    if sh.heads % plan.t:
        raise InvalidInput(
            f"tensor parallelism must divide the attention heads: "
            f"heads({sh.heads}) % t({plan.t}) = {sh.heads % plan.t}"
        )
    if sh.kv_heads % plan.t and plan.t % sh.kv_heads:
        raise InvalidInput(
            f"t must divide the KV heads or be a multiple of them: kv_heads({sh.kv_heads}) "
            f"and t({plan.t})"
        )
    if sh.ffn_hidden % plan.t:
        raise InvalidInput(
            f"tensor parallelism must divide the FFN width: "
            f"ffn_hidden({sh.ffn_hidden}) % t({plan.t}) = {sh.ffn_hidden % plan.t}"
        )
    chunks = plan.p * plan.v
    ends = 2 if plan.ends_in_split and plan.p > 1 else 0
    if chunks > sh.layers + ends:
        also = " + the embedding and the loss (2)" if ends else " (ends=on counts 2 more)"
        raise InvalidInput(
            f"every pipeline chunk needs a layer: p({plan.p}) × v({plan.v}) = {chunks} "
            f"> layers({sh.layers}){also}"
        )
    per_replica = plan.d * plan.micro_batch
    if job.global_batch % per_replica:
        raise InvalidInput(
            f"the global batch must split into whole micro-batches: global_batch"
            f"({job.global_batch}) % (d({plan.d}) × micro_batch({plan.micro_batch}) = "
            f"{per_replica}) = {job.global_batch % per_replica}"
        )
    m = job.global_batch // per_replica
    if plan.v > 1:
        if plan.p == 1:
            raise InvalidInput("interleaving (v > 1) needs pipeline parallelism (p > 1)")
        if m % plan.p:
            raise InvalidInput(
                f"the interleaved schedule needs micro-batches divisible by p: "
                f"m = global_batch/(d·b) = {m}; {m} % p({plan.p}) = {m % plan.p}"
            )
    check_dualpipe(plan, m)
    check_experts(sh, plan)
    if plan.shard and ((plan.d * plan.cp) % plan.shard or not plan.zero):
        raise InvalidInput(
            f"an HSDP shard group shards ZeRO state over shard of the d·cp ranks: zero must be "
            f"1-3 and shard divide d·cp: zero({plan.zero}), d·cp({plan.d * plan.cp}) % "
            f"shard({plan.shard}) = {(plan.d * plan.cp) % plan.shard}"
        )
    if plan.zero == 2 and plan.p > 1:
        raise InvalidInput(
            f"ZeRO-2 shards gradients, which pipeline parallelism accumulates over "
            f"micro-batches; with p({plan.p}) > 1 use zero=0, 1 or 3 (FSDP inside each stage)"
        )
    return _plan_notes(sh, cluster, plan, m)


def _plan_notes(sh, cluster, plan, m: int) -> list[str]:
    """Warnings for a valid plan that runs badly: uneven stages, tensor or context parallelism
    across nodes, sequence parallelism without t, fewer micro-batches than stages."""
    chunks = plan.p * plan.v
    notes = _stage_notes(sh.layers, plan)
    if not plan.first_stage_layers and sh.layers % chunks:
        most = math.ceil(sh.layers / chunks)
        notes.append(
            f"uneven stages: layers({sh.layers}) % (p({plan.p}) × v({plan.v}) = {chunks}) = "
            f"{sh.layers % chunks}; the fullest chunk has {most} layers and sets the pace"
        )
    if plan.t > cluster.devices_per_node:
        notes.append(
            f"tensor parallelism t={plan.t} spans nodes of {cluster.devices_per_node}: every "
            "layer's collectives cross the slower inter-node network"
        )
    if plan.cp > 1 and plan.t * plan.cp > cluster.devices_per_node:
        notes.append(
            f"the context-parallel ring (t={plan.t} × cp={plan.cp}) spans nodes of "
            f"{cluster.devices_per_node}: its K/V steps cross the slower inter-node network"
        )
    if plan.sequence_parallel and plan.t == 1:
        notes.append("sequence parallelism has no effect with t = 1")
    if plan.p > 1 and m < plan.p:
        notes.append(
            f"only m={m} micro-batches for p={plan.p} stages: the bubble (p-1)/m "
            f"= {(plan.p - 1) / m:.0%} of compute"
        )
    return notes


def _check_context_and_fp8(job, cluster, plan) -> None:
    """Context parallelism splits each sequence into 2·cp equal chunks (two per rank, so
    that causal attention's work is balanced, as Megatron-Core does); FP8 needs a device
    with an FP8 rate."""
    check_context_parallel(job.seq_len, plan.cp)
    check_fp8_params(plan.fp8, plan.fp8_params, plan.fp8_activations)
    if plan.fp8 != "off" and "fp8" not in cluster.device.peak_flops_per_s:
        have = ", ".join(sorted(cluster.device.peak_flops_per_s))
        raise InvalidInput(
            f"fp8={plan.fp8} needs FP8 tensor cores; {cluster.device.name} has {have}"
        )


def _stage_notes(layers: int, plan) -> list[str]:
    """A pinned layout whose middle stages cannot be equal: the fullest sets the pace."""
    rest = layers - plan.first_stage_layers - plan.last_stage_layers
    if not plan.first_stage_layers or plan.p < 3 or not rest % (plan.p - 2):
        return []
    return [
        f"uneven middle stages: {rest} layers over p-2 = {plan.p - 2} stages; the fullest "
        f"has {math.ceil(rest / (plan.p - 2))} and sets the pace"
    ]


def check_stage_layout(
    layers: int, first: int, last: int, p: int, v: int, ends: bool = False
) -> None:
    """An uneven layout (`first` and `last` stage layers) needs a pipeline, both counts, a
    layer per chunk on every stage, and layers to spare for the middle stages.

    With `ends` (the embedding and the loss counted in the split, Megatron-Core's
    ``--account-for-embedding-in-pipeline-split`` and ``--account-for-loss-in-pipeline-split``)
    the first chunk of the first stage may hold the embedding alone and the last chunk of the
    last stage the output layer and the loss alone: first and last need v - 1 layers (and one
    at least). Megatron-Core builds such a split from (layers + 2)/(p·v) per chunk, one fewer
    in those two (``transformer_block.get_num_layers_to_build``)."""
    if ends and p > 1 and not (first and last):
        raise InvalidInput(
            f"ends=on counts the embedding and the loss in the stage layout, which then needs "
            f"the first and the last stage's layers: first({first}), last({last}) "
            f"(stages=balanced or stages=F,M,...,M,L)"
        )
    if not first and not last:
        return
    if not first or not last:
        raise InvalidInput(
            f"an uneven layout gives both the first and the last stage's layers: first({first}),"
            f" last({last}) (or stages=F,M,...,M,L)"
        )
    if p < 2:
        raise InvalidInput("first and last stage layers need pipeline parallelism (p ≥ 2)")
    least = max(v - 1, 1) if ends else v
    if first < least or last < least:
        need = f"max(v({v}) - 1, 1) with ends=on" if ends else f"v({v})"
        raise InvalidInput(
            f"every chunk needs a layer: first({first}) and last({last}) must be ≥ {need}"
        )
    rest = layers - first - last
    if p == 2 and rest:
        raise InvalidInput(
            f"two stages hold every layer: first({first}) + last({last}) = {first + last} "
            f"but layers = {layers}"
        )
    if rest < (p - 2) * v:
        raise InvalidInput(
            f"every middle stage needs v({v}) layers: layers({layers}) - first({first}) - "
            f"last({last}) = {rest} < {(p - 2) * v} for {p - 2} middle stages"
        )


def check_dualpipe(plan, m: int) -> None:
    """DualPipe runs two pipelines of p stages in opposite directions over the same devices,
    m/2 micro-batches each, without interleaving."""
    if not plan.dualpipe:
        return
    if plan.p < 2 or plan.p % 2 or plan.v != 1 or m % 2 or m < plan.p:
        raise InvalidInput(
            f"dualpipe feeds m/2 micro-batches from each end of an even pipeline without "
            f"interleaving: p({plan.p}) must be even, v({plan.v}) 1 and m({m}) even and ≥ p"
        )


def check_fp8_params(fp8: str, fp8_params: bool, fp8_activations: bool = False) -> None:
    """Weights or activations kept in FP8 only make sense where the linear layers run in FP8."""
    if fp8_params and fp8 == "off":
        raise InvalidInput("fp8_params=on keeps FP8 weights for FP8 linear layers: pin fp8=linear")
    if fp8_activations and fp8 == "off":
        raise InvalidInput(
            "fp8_acts=on keeps activations in FP8 for FP8 linear layers: pin fp8=linear"
        )


def check_context_parallel(seq_len: int, cp: int) -> None:
    """Each of cp ranks takes two of 2·cp equal chunks of the sequence."""
    if cp > 1 and seq_len % (2 * cp):
        raise InvalidInput(
            f"context parallelism splits the sequence into 2·cp balanced chunks: "
            f"seq_len({seq_len}) % (2 × cp({cp})) = {seq_len % (2 * cp)}"
        )


def check_experts(sh, plan) -> None:
    """Expert parallelism needs routed experts; with MoE parallel folding (Liu et al. 2025,
    arXiv 2504.14960, section 3.1) the expert layers lay etp·ep over the t·cp·d ranks of a
    pipeline stage: ep divides the experts, etp the expert's FFN width, ep·etp those ranks."""
    etp = plan.etp or plan.t
    if plan.ep == 1 and etp == 1:
        return
    moe = sh.moe
    if not moe.routed:
        if plan.ep == 1 and not plan.etp:
            return  # t splits the dense FFN; no experts to split
        raise InvalidInput("expert parallelism (ep or etp > 1) needs a mixture-of-experts model")
    ranks = plan.t * plan.cp * plan.d
    if moe.experts % plan.ep or moe.moe_ffn % etp or ranks % (plan.ep * etp):
        raise InvalidInput(
            f"ep must divide the experts, etp the expert FFN width and ep·etp the t·cp·d ranks "
            f"of a stage: experts({moe.experts}) % ep({plan.ep}) = {moe.experts % plan.ep}, "
            f"expert ffn({moe.moe_ffn}) % etp({etp}) = {moe.moe_ffn % etp}, "
            f"t·cp·d({ranks}) % (ep·etp = {plan.ep * etp}) = {ranks % (plan.ep * etp)}"
        )
