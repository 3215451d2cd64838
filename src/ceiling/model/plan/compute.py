"""The compute of one training step on the most loaded device, per micro-batch: GEMMs (16-bit
or FP8, at their tile utilisation), attention kernels, memory-bound kernels (eager ones
apart), FP8 casts, and what of it rebuilds activations.

`step.evaluate_arrays` combines these with `communication`, `memory` and `pipeline`; every
function takes the plans' `Layout`. Notation and sources: see `ceiling.model.plan.step`;
per-piece formulas: `ceiling.model.plan.costs`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ceiling.model.decode_expected import GPU_KERNEL_FLOOR_S
from ceiling.model.plan import attention_kernels
from ceiling.model.plan.costs import (
    causal_attention_share,
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
from ceiling.model.plan.layout import Layout
from ceiling.model.plan.moe import (
    K0_BF16,
    K0_FP8,
    grouped_launch_floor_s,
    routed_gemm_efficiency,
    routing_bytes_per_token,
    tokens_per_expert,
)
from ceiling.model.roofline import ridge_point

# Bytes per token per vocabulary entry that the loss moves (forward 16, backward 8).
LOSS_BYTES_PER_VOCAB = 24


@dataclass(frozen=True)
class Compute:
    """Seconds per micro-batch on the most loaded stage (`_mb`), and FLOPs per token."""

    fwd_tok: float  # a layer's forward matmul FLOPs per token
    layer_hw_tok: np.ndarray  # a layer's FLOPs per token: forward, backward, recompute
    logits_hw_tok: float  # the output layer's FLOPs per token, forward and backward
    matmul_mb: np.ndarray  # 16-bit GEMMs (the output layer's included)
    attention_mb: np.ndarray
    fp8_matmul_mb: np.ndarray
    fp8_cast_mb: np.ndarray
    gemm_mb: np.ndarray  # every GEMM, 16-bit or FP8: what tensor-parallel traffic hides behind
    head_mb: np.ndarray  # the output layer and the loss: what the other stages do not run
    recompute_mb: np.ndarray  # rebuilding activations (inside the terms above)
    elementwise_mb: np.ndarray
    eager_mb: np.ndarray  # eager kernels' traffic beyond the fused ones'
    compute_mb: np.ndarray  # all of it


def stage_compute(job, cluster, x: Layout) -> Compute:
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
    per_dev = x.tokens_mb / x.plan.t
    rate16 = cluster.matmul_flops_per_s
    linear_s, logits_s = _gemm_seconds(cluster, x, linear_tok, logits_hw_tok, per_dev, full)
    attention_s = _attention_seconds(job, cluster, x, attn_tok, per_dev, rate16)
    mem = _memory_bound(job, cluster, x, per_dev, full)
    matmul_mb = np.where(x.fp8, 0.0, linear_s) + logits_s
    fp8_mb = np.where(x.fp8, linear_s, 0.0)
    return Compute(
        fwd_tok=fwd_tok,
        layer_hw_tok=layer_hw_tok,
        logits_hw_tok=logits_hw_tok,
        matmul_mb=matmul_mb,
        attention_mb=attention_s,
        fp8_matmul_mb=fp8_mb,
        fp8_cast_mb=mem.fp8_cast_mb,
        gemm_mb=linear_s + logits_s,
        head_mb=logits_s + x.tokens_mb * mem.loss_bytes_tok / cluster.memory_bytes_per_s,
        recompute_mb=linear_s * full / (3.0 + full)
        + attention_s * x.rc_attention / (3.0 + x.rc_attention)
        + x.tokens_mb * x.layers_dev * mem.ew_recompute / cluster.memory_bytes_per_s
        + np.where(x.eager, x.tokens_mb * x.layers_dev * x.rc_pointwise * mem.eager_fwd, 0.0)
        / cluster.memory_bytes_per_s,
        elementwise_mb=mem.elementwise_mb,
        eager_mb=mem.eager_mb,
        compute_mb=matmul_mb
        + attention_s
        + fp8_mb
        + mem.fp8_cast_mb
        + mem.elementwise_mb
        + mem.eager_mb,
    )


def _gemm_seconds(cluster, x: Layout, linear_tok, logits_hw_tok, per_dev, full):
    """(the linear layers' GEMMs, the output layer's) per micro-batch: every GEMM at the
    achieved rate of large GEMMs times its tile utilisation; the routed experts apart
    (`moe`): their grouped GEMMs see the rows routed to each expert, and the busiest expert
    rank sets the pace."""
    sh = x.sh
    rate16 = cluster.matmul_flops_per_s
    ridge = ridge_point(rate16, cluster.memory_bytes_per_s)
    sms = cluster.device.sms
    routed_tok = 2.0 * sh.moe.routed_matmul_per_token if sh.moe.routed else 0.0
    dense_sh = replace(sh, ffn_active=sh.moe.dense_ffn_width) if routed_tok else sh
    util, logits_util = _per_shape(
        x.tokens_mb,
        x.plan.t,
        lambda rows, t: (
            linear_gemm_efficiency(dense_sh, rows, t, sms, ridge),
            gemm_tile_utilisation(rows, sh.vocab / t, sms) if sms else np.ones_like(rows),
        ),
    )
    rate = np.where(x.fp8, fp8_rate(cluster), rate16)
    passes = per_dev * x.layers_dev * (3.0 + full)
    linear_s = passes * (linear_tok - routed_tok) / (rate * util)
    if routed_tok:
        rows = tokens_per_expert(
            per_dev, x.plan.ep, x.etp, sh.moe.top_k, sh.moe.experts, x.moe_imbalance
        )
        # Each pass's tiles lose their fixed part for its K, twice the K at FP8's rate.
        k0 = np.where(x.fp8, K0_FP8, K0_BF16)
        grouped = routed_gemm_efficiency(sh.moe, rows, x.plan.ep, x.etp, sms, ridge, k0)
        routed_s = passes * routed_tok * x.moe_imbalance / (rate * grouped)
        # ... and a grouped linear launches one GEMM per local expert: at least the launches.
        floor = grouped_launch_floor_s(sh.moe, x.plan.ep, 3.0 + full, GPU_KERNEL_FLOOR_S)
        routed_s = np.maximum(routed_s, x.layers_dev * sh.moe.moe_share * floor)
        linear_s = linear_s + routed_s
    logits_s = per_dev * logits_hw_tok / (rate16 * logits_util)
    return linear_s, logits_s


def _attention_seconds(job, cluster, x: Layout, attn_tok, per_dev, rate16):
    """Attention's score and value multiplies per micro-batch."""
    s = job.seq_len
    attn_flops = per_dev * x.layers_dev * attn_tok * (3.0 + x.rc_attention)
    if job.attention == "flash":
        # Causal blocks only, at the fused kernel's own rate for the s/cp queries a device
        # attends with (`attention_rate`).
        rate = attention_rate(job, cluster, x.sh, s / x.plan.cp)
        return attn_flops * causal_attention_share(s) / rate
    return attn_flops / rate16  # batched GEMMs over the whole s×s score matrix (masked after)


@dataclass(frozen=True)
class _MemoryBound:
    """The memory-bound kernels of a micro-batch (seconds) and the bytes a token they need
    that other terms read again."""

    elementwise_mb: Any
    eager_mb: Any
    fp8_cast_mb: Any
    ew_recompute: Any
    eager_fwd: Any
    loss_bytes_tok: Any


def _memory_bound(job, cluster, x: Layout, per_dev, full) -> _MemoryBound:
    """Elementwise kernels (the loss, the experts' routing), eager PyTorch's unfused extra
    traffic and the FP8 casts, per micro-batch at the memory bandwidth."""
    sh, bw = x.sh, cluster.memory_bytes_per_s
    ew_fwd, ew_bwd, ew_scores = layer_elementwise_bytes_per_token(
        sh, job.seq_len, x.plan.t, x.sp, job.attention, job.dropout
    )
    ew_recompute = x.rc_pointwise * (ew_fwd - ew_scores) + x.rc_attention * ew_scores
    # The loss on the last stage: 16-bit logits written and read, upcast to fp32, softmax read
    # and written (16·V bytes per token forward), its gradient 8·V back; split over t.
    loss_bytes_tok = LOSS_BYTES_PER_VOCAB * sh.vocab / x.plan.t
    ew_bytes_mb = x.tokens_mb * (x.layers_dev * (ew_fwd + ew_bwd + ew_recompute) + loss_bytes_tok)
    # Routing a device's tokens (its sequence-parallel shard): router, permutation and back.
    route_fwd, route_bwd = routing_bytes_per_token(sh.moe, x.plan.ep)
    route_tok = sh.moe.moe_share * ((1.0 + x.rc_pointwise) * route_fwd + route_bwd)
    ew_bytes_mb = ew_bytes_mb + per_dev * x.layers_dev * route_tok
    # Eager PyTorch: each pointwise op its own kernel, its input and output through HBM
    # (`eager_kernels`); the rebuilt ones again in the backward.
    eager_fwd, eager_bwd = eager_extra_bytes_per_token(sh, x.plan.t, x.sp, job.dropout)
    eager_tok = (1.0 + x.rc_pointwise) * eager_fwd + eager_bwd
    eager_mb = np.where(x.eager, x.tokens_mb * x.layers_dev * eager_tok, 0.0)
    cast_fwd, cast_bwd = fp8_cast_bytes_per_token(sh, x.plan.t)
    cast_tok = (1.0 + full) * cast_fwd + cast_bwd
    weight_casts = fp8_weight_cast_bytes(x.linear_params(), x.fp8_params) / x.m
    amax = x.layers_dev * fp8_amax_bytes_per_layer()
    fp8_cast_mb = (
        np.where(x.fp8, (x.tokens_mb * x.layers_dev * cast_tok + weight_casts + amax), 0.0) / bw
    )
    return _MemoryBound(
        ew_bytes_mb / bw, eager_mb / bw, fp8_cast_mb, ew_recompute, eager_fwd, loss_bytes_tok
    )


def attention_rate(job, cluster, sh, seq_dev):
    """FLOP/s of the fused attention kernel over a layer's forward and backward: the
    published curve of the job's kernel at this head dim and per-device length on devices
    that have one (`attention_kernels`), else the device's one measured share of its peak
    (`clusters.toml` attention_efficiency)."""
    if cluster.attention_measured or not attention_kernels.has_curves(cluster.device):
        return cluster.peak_flops_per_s * cluster.attention_efficiency
    kernel = job.attention_kernel
    if kernel == "auto":
        kernel = attention_kernels.default_kernel(job.framework)
    share = attention_kernels.attention_share(kernel, sh.head_dim, seq_dev)
    return cluster.peak_flops_per_s * share


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
