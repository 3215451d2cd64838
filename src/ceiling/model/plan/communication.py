"""The time of one training step's pieces on the most loaded device: GEMMs (16-bit or FP8,
at their tile utilisation), attention kernels, memory-bound kernels, FP8 casts, and the
communication of each parallelism axis with what overlap hides of it.

`parallel.evaluate_arrays` combines these into the step; every function takes the plans'
layout (`parallel._layout`: numpy arrays, one entry per plan). Notation and sources: see
`ceiling.model.plan.step`; per-piece formulas: `ceiling.model.plan.costs`.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from ceiling.model.collectives import all_to_all_s, allreduce_s, p2p_s, ring_gather_s
from ceiling.model.plan.costs import (
    causal_attention_share,
    cp_ring_bytes_per_layer,
    fp8_amax_bytes_per_layer,
    fp8_cast_bytes_per_token,
    fp8_weight_cast_bytes,
    gemm_tile_utilisation,
    layer_attention_flops_per_token,
    layer_elementwise_bytes_per_token,
    layer_forward_flops_per_token,
    linear_gemm_efficiency,
)
from ceiling.model.plan.eager_kernels import eager_extra_bytes_per_token
from ceiling.model.roofline import ridge_point

# Communication hidden behind compute is not free: collective kernels take SMs and memory
# bandwidth from the kernels they overlap. A modelling assumption: a fifth of the hidden
# time still lengthens the step.
OVERLAP_COST = 0.2

# Mixture-of-experts capacity factor: tokens an expert is sized for over its even share.
MOE_CAPACITY_FACTOR = 1.25

# Bytes per token per vocabulary entry that the loss moves (forward 16, backward 8).
LOSS_BYTES_PER_VOCAB = 24


def stage_compute(job, cluster, x: SimpleNamespace) -> dict:
    """Per micro-batch on the slowest stage: linear-layer GEMMs (16-bit, or FP8 with the
    casts they need), attention, the output layer (recomputation counted, expert capacity
    padding included) and memory-bound kernels (the loss on the last stage included)."""
    sh, s = x.sh, job.seq_len
    fwd_tok = layer_forward_flops_per_token(sh, s)
    attn_tok = layer_attention_flops_per_token(sh, s)
    linear_tok = fwd_tok - attn_tok
    full = x.rc_linear  # share of the linear layers' forward run again (`recompute`)
    recompute_tok = full * linear_tok + x.rc_attention * attn_tok
    layer_hw_tok = 3.0 * fwd_tok + recompute_tok  # forward, backward (2×), recompute
    logits_hw_tok = 6.0 * sh.hidden * sh.vocab  # forward 2hV + backward 4hV, never recomputed
    per_dev = x.tokens_mb / x.tf
    hw_flops_mb = per_dev * (x.layers_dev * layer_hw_tok + logits_hw_tok)
    # Experts run with a capacity: each processes up to capacity_factor × its even share of
    # tokens, padded, so the busiest sets the pace (Fedus et al. 2021, Switch Transformer).
    expert_tok = 2.0 * sh.active_experts * sh.params_experts_layer / sh.experts
    padded_tok = (MOE_CAPACITY_FACTOR - 1.0) * expert_tok * (3.0 + full)
    linear_flops = per_dev * x.layers_dev * ((3.0 + full) * linear_tok + padded_tok)
    # Every GEMM runs at the achieved rate of large GEMMs times its tile utilisation.
    rate16 = cluster.matmul_flops_per_s
    ridge = ridge_point(rate16, cluster.memory_bytes_per_s)
    sms = cluster.device.sms
    util, logits_util = _per_shape(
        x.tokens_mb,
        x.tf,
        lambda rows, t: (
            linear_gemm_efficiency(sh, rows, t, sms, ridge),
            gemm_tile_utilisation(rows, sh.vocab / t, sms) if sms else np.ones_like(rows),
        ),
    )
    rate8 = fp8_rate(cluster)
    linear_s = linear_flops / (np.where(x.fp8, rate8, rate16) * util)
    logits_s = per_dev * logits_hw_tok / (rate16 * logits_util)
    attn_flops = per_dev * x.layers_dev * attn_tok * (3.0 + x.rc_attention)
    if job.attention == "flash":
        # Causal blocks only, at the fused kernel's own rate.
        attention_s = (
            attn_flops
            * causal_attention_share(s)
            / (cluster.peak_flops_per_s * cluster.attention_efficiency)
        )
    else:  # batched GEMMs over the whole s×s score matrix (masked after)
        attention_s = attn_flops / rate16
    ew_fwd, ew_bwd, ew_scores = layer_elementwise_bytes_per_token(
        sh, s, x.tf, x.sp, job.attention, job.dropout
    )
    ew_recompute = x.rc_pointwise * (ew_fwd - ew_scores) + x.rc_attention * ew_scores
    # The loss on the last stage: 16-bit logits written and read, upcast to fp32, softmax read
    # and written (16·V bytes per token forward), its gradient 8·V back; split over t.
    loss_bytes_tok = LOSS_BYTES_PER_VOCAB * sh.vocab / x.tf
    ew_bytes_mb = x.tokens_mb * (x.layers_dev * (ew_fwd + ew_bwd + ew_recompute) + loss_bytes_tok)
    elementwise_mb = ew_bytes_mb / cluster.memory_bytes_per_s
    # Eager PyTorch: each pointwise op its own kernel, its input and output through HBM
    # (`eager_kernels`); the rebuilt ones again in the backward.
    eager_fwd, eager_bwd = eager_extra_bytes_per_token(sh, x.tf, x.sp, job.dropout)
    eager_tok = (1.0 + x.rc_pointwise) * eager_fwd + eager_bwd
    eager_mb = np.where(x.eager, x.tokens_mb * x.layers_dev * eager_tok, 0.0)
    eager_mb = eager_mb / cluster.memory_bytes_per_s
    cast_fwd, cast_bwd = fp8_cast_bytes_per_token(sh, x.tf)
    cast_tok = (1.0 + full) * cast_fwd + cast_bwd
    weight_casts = fp8_weight_cast_bytes(linear_params_dev(x), x.fp8_params) / x.m
    amax = x.layers_dev * fp8_amax_bytes_per_layer()
    fp8_cast_mb = (
        np.where(x.fp8, (x.tokens_mb * x.layers_dev * cast_tok + weight_casts + amax), 0.0)
        / cluster.memory_bytes_per_s
    )
    matmul_mb = np.where(x.fp8, 0.0, linear_s) + logits_s
    fp8_mb = np.where(x.fp8, linear_s, 0.0)
    return {
        "fwd_tok": fwd_tok,
        "layer_hw_tok": layer_hw_tok,
        "logits_hw_tok": logits_hw_tok,
        "hw_flops_mb": hw_flops_mb,
        "matmul_mb": matmul_mb,
        "attention_mb": attention_s,
        "fp8_matmul_mb": fp8_mb,
        "fp8_cast_mb": fp8_cast_mb,
        "gemm_mb": linear_s + logits_s,
        # The output layer and the loss: the part of the last stage the others do not run.
        "head_mb": logits_s + x.tokens_mb * loss_bytes_tok / cluster.memory_bytes_per_s,
        # What the backward spends rebuilding activations (inside the terms above).
        "recompute_mb": linear_s * full / (3.0 + full)
        + attention_s * x.rc_attention / (3.0 + x.rc_attention)
        + x.tokens_mb * x.layers_dev * ew_recompute / cluster.memory_bytes_per_s
        + np.where(x.eager, x.tokens_mb * x.layers_dev * x.rc_pointwise * eager_fwd, 0.0)
        / cluster.memory_bytes_per_s,
        "elementwise_mb": elementwise_mb,
        "eager_mb": eager_mb,
        "compute_mb": matmul_mb + attention_s + fp8_mb + fp8_cast_mb + elementwise_mb + eager_mb,
    }


def fp8_rate(cluster) -> float:
    """Achieved FP8 GEMM rate: the FP8 peak at FP8 GEMMs' own share of it (a profile's
    measured share, or the 16-bit share scaled by the device's published FP8/16-bit ratio:
    `ClusterSpec.fp8_efficiency`); the 16-bit rate where the device has no FP8 (`check_plan`
    refuses such plans)."""
    peaks = cluster.device.peak_flops_per_s
    return peaks.get("fp8", 0.0) * cluster.fp8_efficiency or cluster.matmul_flops_per_s


def _per_shape(rows, t, fn):
    """fn(rows, t) -> arrays, computed once per distinct (rows, t) of the plans (a search
    has thousands of plans but a few dozen GEMM shapes) and spread back over them."""
    rows, t = np.broadcast_arrays(np.asarray(rows, dtype=float), np.asarray(t, dtype=float))
    if rows.size < 64:
        return fn(rows, t)
    # One number per shape (t < 2**20; both whole numbers, exact in a float64 below 2**53).
    _, first, back = np.unique(
        rows.ravel() * 2.0**20 + t.ravel(), return_index=True, return_inverse=True
    )
    picked = fn(rows.ravel()[first], t.ravel()[first])
    return tuple(np.asarray(v)[back.ravel()].reshape(rows.shape) for v in picked)


def linear_params_dev(x: SimpleNamespace, layers=None):
    """Linear-layer weights on the most loaded device, or on one holding `layers` layers (all
    its experts included)."""
    sh = x.sh
    experts = sh.params_experts_layer * (1.0 / x.epf - sh.active_experts / sh.experts)
    held = x.layers_dev if layers is None else layers
    return held * (sh.params_layer_matmul_active + experts) / x.tf


def dense_linear_params_dev(x: SimpleNamespace):
    """The linear weights of the dense (not expert) part of the most loaded device."""
    sh = x.sh
    active_experts = sh.params_experts_layer * sh.active_experts / sh.experts
    return x.layers_dev * (sh.params_layer_matmul_active - active_experts) / x.tf


def model_parallel_comm(cluster, x: SimpleNamespace, comp: dict) -> dict:
    """Per micro-batch: tensor-parallel collectives (2 forward, 2 backward, 2 more to
    recompute; all-gather + reduce-scatter with sequence parallelism, the same bytes), the
    context-parallel K/V ring, expert all-to-alls (dispatch and combine around each MoE
    block); what of them is hidden behind compute, and whether the TP group spans nodes.

    Overlap: tensor-parallel traffic hides behind the linear GEMMs that consume or produce
    it when `tp_overlap` is on (Megatron-Core/Transformer Engine userbuffers), all but the
    first of its t chunks; each ring
    step of K/V hides behind the attention of the chunk at hand when `cp_overlap` is on
    (Megatron-Core's ring attention always does). A share OVERLAP_COST of what is hidden
    still lengthens the step (the collectives take SMs and memory bandwidth)."""
    per_node, h = cluster.devices_per_node, x.sh.hidden
    tp_spans = x.tf > per_node
    tp_bw, tp_lat = link(cluster, tp_spans)
    n_coll = 4.0 + x.rc_collectives
    tp_mb = x.layers_dev * n_coll * allreduce_s(x.tokens_mb * h * 2.0, x.tf, tp_bw, tp_lat)
    # The overlap runs in t chunks (a ring exchange feeding a GEMM split in t): the first
    # chunk's traffic has no GEMM to hide behind, so at most (t-1)/t of it hides.
    hideable = tp_mb * (1.0 - 1.0 / x.tf)
    tp_hidden = np.where(x.tp_overlap, np.minimum(hideable, comp["gemm_mb"]), 0.0)
    # Ranks are laid out t fastest, then cp: the ring spans nodes when t·cp exceeds one.
    cp_bw, cp_lat = link(cluster, x.tf * x.cpf > per_node)
    passes = 3.0 + x.rc_attention  # forward, backward (2), recomputed forward
    ring_bytes = cp_ring_bytes_per_layer(x.sh, x.tokens_mb, x.tf, x.cpf)
    steps = np.maximum(x.cpf - 1.0, 0.0)  # each a point-to-point send of 1/cp of the K/V
    send = p2p_s(ring_bytes / np.maximum(steps, 1.0), cp_bw, cp_lat)
    cp_mb = x.layers_dev * passes * steps * send
    cp_hidden = np.where(x.cp_overlap, np.minimum(cp_mb, comp["attention_mb"]), 0.0)
    ep_bw, ep_lat = link(cluster, x.tf * x.epf > per_node)
    routed = MOE_CAPACITY_FACTOR * x.tokens_mb * x.sh.active_experts * h * 2.0 / x.tf
    a2a = all_to_all_s(routed, x.epf, ep_bw, ep_lat)
    return {
        "tp_mb": tp_mb - (1.0 - OVERLAP_COST) * tp_hidden,
        "tp_hidden_mb": tp_hidden,
        "cp_mb": cp_mb - (1.0 - OVERLAP_COST) * cp_hidden,
        "cp_hidden_mb": cp_hidden,
        "ep_mb": x.layers_dev * n_coll * a2a,
        "tp_spans": tp_spans,
    }


def data_parallel(job, cluster, x: SimpleNamespace, compute_mb) -> dict:
    """Gradient reduction (all-reduce, or reduce-scatter + all-gather with ZeRO; per
    micro-batch gathers with ZeRO-3) over d (experts over d/ep), and the part not hidden."""
    dp_spans = x.tf * x.dg > cluster.devices_per_node
    bw, lat = link(cluster, dp_spans)
    grad_elem = np.where(x.state == 18, 4.0, 2.0)
    g_dense, g_expert = x.dense_dev * grad_elem, x.expert_dev * grad_elem
    # Updated weights are gathered in 16 bits, or in FP8 where kept in FP8 (fp8_params: the
    # distributed optimizer gathers the FP8 bytes, NeMo's param_sync_dtype uint8).
    fp8_kept = np.where(x.fp8_params, dense_linear_params_dev(x), 0.0)
    w_dense, w_expert = x.dense_dev * 2.0 - fp8_kept, x.expert_dev * 2.0
    d, de = x.dg, x.d_expert
    allreduce = allreduce_s(g_dense, d, bw, lat) + allreduce_s(g_expert, de, bw, lat)
    reduce_scatter = ring_gather_s(g_dense, d, bw, lat) + ring_gather_s(g_expert, de, bw, lat)
    all_gather = ring_gather_s(w_dense, d, bw, lat) + ring_gather_s(w_expert, de, bw, lat)
    rs_ag = reduce_scatter + all_gather
    # ZeRO-3 gathers the weights before each forward and backward of every micro-batch and
    # reduce-scatters gradients after each backward; that traffic hides behind compute.
    # Without prefetching (`fsdp_prefetch` off) each gather waits for the layer it feeds.
    z3_mb = 2.0 * all_gather + reduce_scatter
    z3_hidden = np.where(x.prefetch, np.minimum(z3_mb, compute_mb), 0.0)
    z3_exposed = x.m * (z3_mb - (1.0 - OVERLAP_COST) * z3_hidden)
    zero = x.zero
    dp_total = np.where(zero == 0, allreduce, np.where(zero == 3, x.m * z3_mb, rs_ag))
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
    return {
        "grad_elem": grad_elem,
        "dp_hidden": np.where(zero == 3, x.m * z3_hidden, hidden),
        "dp_total": dp_total,
        "dp_exposed": dp_exposed,
        "dp_spans": dp_spans,
    }


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
