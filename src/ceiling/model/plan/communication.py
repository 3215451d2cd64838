"""The communication of one training step on the most loaded device: each parallelism
axis's collectives (tensor, context, expert, data; pipeline sends) at the link they cross,
and what overlap hides of them.

`step.evaluate_arrays` combines these with `compute`, `memory` and `pipeline`; every function
takes the plans' `Layout`. Notation and sources: see `ceiling.model.plan.step`; per-piece
formulas: `ceiling.model.plan.costs`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ceiling.model.collectives import allreduce_s, p2p_s, ring_gather_s
from ceiling.model.plan.compute import Compute
from ceiling.model.plan.costs import cp_ring_bytes_per_layer
from ceiling.model.plan.layout import Layout
from ceiling.model.plan.moe import all_to_all_time, etp_gather_time

# Communication hidden behind compute is not free: collective kernels take SMs and memory
# bandwidth from the kernels they overlap. A modelling assumption: a fifth of the hidden
# time still lengthens the step.
OVERLAP_COST = 0.2
# SMs DeepEP's dispatch and combine kernels hold while hidden behind compute (DeepSeek-V3's
# 20 of the H800's 132; Megatron-Core's --moe-deepep-num-sms defaults to 20), and the SMs
# taken where a device's count is not known.
DEEPEP_SMS = 20
DEEPEP_REFERENCE_SMS = 132


@dataclass(frozen=True)
class ModelParallelComm:
    """Per micro-batch on the most loaded stage: exposed and hidden seconds."""

    tp_mb: np.ndarray  # tensor-parallel collectives left exposed
    tp_hidden_mb: np.ndarray
    cp_mb: np.ndarray  # the context-parallel K/V ring left exposed
    cp_hidden_mb: np.ndarray
    ep_mb: np.ndarray  # expert all-to-alls left exposed
    ep_hidden_mb: np.ndarray


@dataclass(frozen=True)
class DataParallelComm:
    """Per step: the data-parallel traffic (gradients, ZeRO gathers) and what stays exposed."""

    grad_elem: np.ndarray  # bytes per gradient element (fp32 or 16-bit)
    hidden: np.ndarray
    total: np.ndarray
    exposed: np.ndarray


def model_parallel_comm(cluster, x: Layout, comp: Compute) -> ModelParallelComm:
    """Per micro-batch: tensor-parallel collectives (2 forward, 2 backward, 2 more to
    recompute; all-gather + reduce-scatter with sequence parallelism, the same bytes), the
    context-parallel K/V ring, expert all-to-alls (dispatch and combine around each MoE
    block), and what of them is hidden behind compute.

    Overlap: tensor-parallel traffic hides behind the linear GEMMs that consume or produce
    it when `tp_overlap` is on (Megatron-Core/Transformer Engine userbuffers), all but the
    first of its t chunks; each ring
    step of K/V hides behind the attention of the chunk at hand when `cp_overlap` is on
    (Megatron-Core's ring attention always does). A share OVERLAP_COST of what is hidden
    still lengthens the step (the collectives take SMs and memory bandwidth)."""
    per_node, h = cluster.devices_per_node, x.sh.hidden
    tp_spans = x.plan.t > per_node
    tp_bw, tp_lat = link(cluster, tp_spans)
    n_coll = 4.0 + x.rc_collectives
    # Expert layers laid out apart from t (etp ≠ t, MoE parallel folding) take the sequence-
    # parallel shard straight into their all-to-all: only the attention half of their
    # collectives remains (Liu et al. 2025, arXiv 2504.14960, section 3.1).
    folded = np.where(x.etp != x.plan.t, 0.5 * x.sh.moe.moe_share, 0.0)
    n_coll = n_coll * (1.0 - folded)
    tp_mb = x.layers_dev * n_coll * allreduce_s(x.tokens_mb * h * 2.0, x.plan.t, tp_bw, tp_lat)
    # The overlap runs in t chunks (a ring exchange feeding a GEMM split in t): the first
    # chunk's traffic has no GEMM to hide behind, so at most (t-1)/t of it hides.
    hideable = tp_mb * (1.0 - 1.0 / x.plan.t)
    tp_hidden = np.where(x.plan.tp_overlap, np.minimum(hideable, comp.gemm_mb), 0.0)
    # Ranks are laid out t fastest, then cp: the ring spans nodes when t·cp exceeds one.
    cp_bw, cp_lat = link(cluster, x.plan.t * x.plan.cp > per_node)
    passes = 3.0 + x.rc_attention  # forward, backward (2), recomputed forward
    ring_bytes = cp_ring_bytes_per_layer(x.sh, x.tokens_mb, x.plan.t, x.plan.cp)
    steps = np.maximum(x.plan.cp - 1.0, 0.0)  # each a point-to-point send of 1/cp of the K/V
    send = p2p_s(ring_bytes / np.maximum(steps, 1.0), cp_bw, cp_lat)
    cp_mb = x.layers_dev * passes * steps * send
    cp_hidden = np.where(x.plan.cp_overlap, np.minimum(cp_mb, comp.attention_mb), 0.0)
    # Expert all-to-alls hide behind the other micro-batch's compute when two are interleaved
    # (DeepSeek-AI 2024, DeepSeek-V3 report section 3.2.1, DualPipe; Megatron-Core's 1F1B
    # all-to-all overlap): at most that compute, less what TP traffic already hides behind.
    # With one micro-batch there is no other to hide behind.
    ep_mb = expert_comm_mb(cluster, x)
    room = np.maximum(comp.compute_mb - tp_hidden - cp_hidden, 0.0)
    ep_hidden = np.where(x.plan.ep_overlap & (x.m >= 2), np.minimum(ep_mb, room), 0.0)
    ep_cost = hidden_cost_share(cluster, x.moe_dedup)
    return ModelParallelComm(
        tp_mb=tp_mb - (1.0 - OVERLAP_COST) * tp_hidden,
        tp_hidden_mb=tp_hidden,
        cp_mb=cp_mb - (1.0 - OVERLAP_COST) * cp_hidden,
        cp_hidden_mb=cp_hidden,
        ep_mb=ep_mb - (1.0 - ep_cost) * ep_hidden,
        ep_hidden_mb=ep_hidden,
    )


def hidden_cost_share(cluster, deepep):
    """Share of the expert all-to-alls' hidden time that still lengthens the step: the SMs
    their kernels hold from the compute they hide behind. DeepEP's kernels hold DEEPEP_SMS
    of the device's SMs (DeepSeek-V3 technical report, section 3.2.2: 20 of the H800's 132
    suffice for the cross-node all-to-all); NCCL's all-to-all, OVERLAP_COST."""
    sms = getattr(cluster.device, "sms", None) or DEEPEP_REFERENCE_SMS
    return np.where(deepep, DEEPEP_SMS / sms, OVERLAP_COST)


def expert_comm_mb(cluster, x: Layout):
    """Per micro-batch: the routed experts' dispatch and combine all-to-alls (forward, their
    gradients backward, again where the backward rebuilds the layer), each byte on the link
    it crosses and the busiest rank's share setting the time (`moe.all_to_all_time`), and the
    expert-tensor-parallel gathers; 0 for a dense model."""
    moe = x.sh.moe
    if moe is None or not moe.routed:
        return np.zeros(np.shape(x.tokens_mb))
    tokens_dev = x.tokens_mb / x.plan.t
    ep, etp = x.plan.ep, x.etp
    a2a = x.moe_imbalance * all_to_all_time(
        moe, tokens_dev, ep, etp, cluster.devices_per_node, cluster.link(False),
        cluster.link(True), x.moe_dedup, x.moe_node_limit,
    )  # fmt: skip
    # With etp = t the routed rows are gathered over the tensor-parallel ranks as the dense
    # MLP's are (in the tensor-parallel collectives); any other etp > 1 gathers them apart.
    etp_bw, etp_lat = link(cluster, etp > cluster.devices_per_node)
    apart = (etp != x.plan.t) & (etp > 1)
    gathers = np.where(apart, etp_gather_time(moe, tokens_dev, etp, etp_bw, etp_lat), 0.0)
    gathers = x.moe_imbalance * gathers
    rebuilt = x.rc_collectives / 2.0  # full recompute runs the layer's forward again
    per_layer = (4.0 + 2.0 * rebuilt) * a2a + (2.0 + rebuilt) * gathers
    return x.layers_dev * moe.moe_share * per_layer


def data_parallel(job, cluster, x: Layout, compute_mb) -> DataParallelComm:
    """Gradient reduction (all-reduce, or reduce-scatter + all-gather with ZeRO; per
    micro-batch gathers with ZeRO-3) over d (experts over their expert-data-parallel group),
    and the part not hidden. HSDP (`shard`): the ZeRO collectives run inside shard groups of
    dz ranks, and each step all-reduces the gradient shards across the dg/dz replicas
    (torchtitan's HSDP: FSDP's reduce-scatter, then an all-reduce over the replicate mesh)."""
    dp_spans = x.plan.t * x.dg > cluster.devices_per_node
    all_bw, all_lat = link(cluster, dp_spans)
    bw, lat = link(cluster, x.plan.t * x.dz > cluster.devices_per_node)
    grad_elem = np.where(x.plan.state_bytes_per_param == 16, 2.0, 4.0)
    g_dense, g_expert = x.dense_dev * grad_elem, x.expert_dev * grad_elem
    # Updated weights are gathered in 16 bits, or in FP8 where kept in FP8 (fp8_params: the
    # distributed optimizer gathers the FP8 bytes, NeMo's param_sync_dtype uint8).
    fp8_kept = np.where(x.fp8_params, x.dense_linear_params(), 0.0)
    w_dense, w_expert = x.dense_dev * 2.0 - fp8_kept, x.expert_dev * 2.0
    d, de = x.dz, x.d_expert
    allreduce = allreduce_s(g_dense, x.dg, all_bw, all_lat) + allreduce_s(g_expert, de, bw, lat)
    replicas = x.dg / x.dz
    across = np.where(replicas > 1, allreduce_s(g_dense / x.dz, replicas, all_bw, all_lat), 0.0)
    reduce_scatter = ring_gather_s(g_dense, d, bw, lat) + ring_gather_s(g_expert, de, bw, lat)
    reduce_scatter = reduce_scatter + across
    all_gather = ring_gather_s(w_dense, d, bw, lat) + ring_gather_s(w_expert, de, bw, lat)
    rs_ag = reduce_scatter + all_gather
    # ZeRO-3 gathers the weights before each forward and backward of every micro-batch and
    # reduce-scatters gradients after each backward; that traffic hides behind compute.
    # Without prefetching (`fsdp_prefetch` off) each gather waits for the layer it feeds.
    z3_mb = 2.0 * all_gather + reduce_scatter - across
    z3_hidden = np.where(x.plan.fsdp_prefetch, np.minimum(z3_mb, compute_mb), 0.0)
    z3_exposed = x.m * (z3_mb - (1.0 - OVERLAP_COST) * z3_hidden) + across
    # With a pipeline (`memory.held_stage_bytes`) the stage's weights are gathered once a step,
    # prefetched behind the first micro-batch's compute, and its gradients reduce-scattered
    # once after the last backward, every layer's together: not hidden.
    staged = x.plan.p > 1
    z3_total = np.where(staged, all_gather + reduce_scatter, x.m * z3_mb + across)
    once_hidden = np.where(x.plan.fsdp_prefetch, np.minimum(all_gather, compute_mb), 0.0)
    once_exposed = all_gather - (1.0 - OVERLAP_COST) * once_hidden + reduce_scatter
    z3_exposed = np.where(staged, once_exposed, z3_exposed)
    z3_hidden_total = np.where(staged, once_hidden, x.m * z3_hidden)
    zero = x.plan.zero
    dp_total = np.where(zero == 0, allreduce, np.where(zero == 3, z3_total, rs_ag))
    grad_reduce = np.where(zero == 0, allreduce, reduce_scatter)
    window = (2.0 / 3.0) * compute_mb if job.overlap_dp else 0.0
    hidden = np.minimum(grad_reduce, window)
    dp_exposed = np.where(
        zero == 3,
        z3_exposed,
        grad_reduce
        - hidden
        + OVERLAP_COST * hidden
        + (rs_ag - np.where(zero == 0, rs_ag, grad_reduce)),
    )
    return DataParallelComm(
        grad_elem=grad_elem,
        hidden=np.where(zero == 3, z3_hidden_total, hidden),
        total=dp_total,
        exposed=dp_exposed,
    )


def pipeline_sends_s(cluster, nbytes, df, tf, pf, vf, m):
    """Point-to-point sends on the pipeline's critical path, each hop at its own link, and
    whether any hop crosses nodes.

    Ranks are laid out t fastest, then d, then p (Megatron's order): neighbouring stages are
    g = t·d ranks apart, so of the p-1 hops from stage 0 to stage p-1, ⌊(p-1)·g / node⌋ cross
    a node boundary (all of them once g fills a node). Filling and draining the pipeline
    crosses every hop once each way; in the steady state each of the m·v micro-batch chunks
    waits on the slowest hop, forward and backward (an interleaved schedule's wrap-around hop,
    last device to first, crosses nodes when the pipeline spans more than one). Megatron
    splits each send over the t ranks of a stage (scatter-gather): `nbytes` is one rank's part.
    """
    per_node = cluster.devices_per_node
    g = tf * df
    crossing = np.minimum(pf - 1.0, np.floor((pf - 1.0) * g / per_node))
    intra = p2p_s(nbytes, *cluster.link(False))
    inter = p2p_s(nbytes, *cluster.link(True))
    wraps = (vf > 1) & (pf * g > per_node)
    spans = (crossing > 0) | wraps
    fill = (pf - 1.0 - crossing) * intra + crossing * inter
    sends = np.where(pf > 1, 2.0 * (m * vf * np.where(spans, inter, intra) + fill), 0.0)
    return sends, spans


def link(cluster, spans_nodes):
    """Achieved collective bandwidth and per-step latency, across nodes where `spans_nodes`."""
    inter, intra = cluster.link(True), cluster.link(False)
    return np.where(spans_nodes, inter[0], intra[0]), np.where(spans_nodes, inter[1], intra[1])
