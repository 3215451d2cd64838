"""Host-bound layers: the CPU time an eager training step spends launching a layer's kernels,
and what of it the GPU waits for.

Megatron-Core with Transformer Engine (and eager PyTorch generally) launches every kernel from
the host through Python and PyTorch's dispatcher; the GPU runs them from a queue. While a
layer's kernels take longer on the GPU than to launch, the host runs ahead and its time is
hidden; when launching them takes longer (small GEMMs, many tiny routing and quantisation
kernels of a fine-grained mixture of experts), the GPU waits between kernels: the layer is
host-bound (Megatron-LM, docs/discussions/deepseek-v3-gb200-optimization, section 2: "the CPU
kernel launch speed cannot keep up with the kernel execution speed on GPU", from Python code,
PyTorch's own host logic — a torch.empty launches no kernel yet costs microseconds — and the
launches; fusing kernels and CUDA graphs are the cures it names).

A mixture-of-experts layer also synchronises the host with the device once per forward: the
dispatcher copies the tokens each expert receives to the host (Megatron-Core's alltoall
dispatcher sizes its all-to-all with them, DeepEP returns its received counts as a host list,
and Transformer Engine's GroupedLinear takes each expert's rows as a host list); the same
document's section 3.1 names this device-host sync, made to learn the tokens per expert, as
what keeps the MoE model from CUDA graphs. The host therefore cannot run ahead past a MoE
layer: each layer's forward takes the longer of its host and GPU times, and after the sync the
GPU idles while the host launches the permutation and the dispatch (`routed_kernels`' third
count).

This module counts the kernels one layer launches per micro-batch and pass (forward, backward)
— `layer_kernels` — as Megatron-Core's layers with Transformer Engine run them; `host_extra_s`
turns counts and the layer's GPU time into the time the GPU waits. Every function takes numpy
arrays for the plan fields.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ceiling.model.plan.moe import DISPATCHERS

# Host seconds per kernel of an eager step: the CUDA runtime's launch event on the CPU takes
# 5-20 µs a kernel in PyTorch traces (Holistic Trace Analysis, docs/source/features/
# cuda_kernel_launch_stats.rst, "Short GPU kernels": the usual CPU-side launch time); 10 µs is
# the middle of that range (its geometric mean). The Python and
# PyTorch dispatch around each op come on top of the launch, so this is a low estimate of an
# eager stack's host time a kernel; a figure measured on the user's own machine
# (`measure.host_costs`, `ceiling bench overhead`: seconds a dispatched op) replaces it through
# `Job.host_kernel_s` (--host-kernel-us).
HOST_S_PER_KERNEL = 10e-6

# The router and the dispatcher's preprocessing (routing map, top-k, probabilities, the
# auxiliary loss and its statistics, tokens per expert and the all-to-all's splits), kernels
# one MoE layer's forward launches (Megatron-LM docs/discussions/deepseek-v3-gb200-
# optimization, sections 2.1.4 and 2.2.1, Megatron-Core with the alltoall dispatcher): 72
# unfused, 31 with --moe-router-fusion (Transformer Engine's fused router kernels); DeepEP's
# fused preprocessing (the flex dispatcher) brings the fused router and preprocessing to 17.
# DeepEP with the unfused router: the 72 less the 31 - 17 = 14 kernels DeepEP's preprocessing
# saves, 58. The counts are DeepSeek-V3's router (sigmoid scores, group-limited top-k, expert
# bias, sequence-wise auxiliary loss), applied to every routed model: a plain softmax top-k
# router launches somewhat fewer.
ROUTER_KERNELS = {("alltoall", False): 72, ("alltoall", True): 31, ("deepep", True): 17}
ROUTER_KERNELS[("deepep", False)] = ROUTER_KERNELS[("alltoall", False)] - (
    ROUTER_KERNELS[("alltoall", True)] - ROUTER_KERNELS[("deepep", True)]
)

# Token permutation before the dispatch and unpermutation after the combine (Megatron-Core
# moe_utils.permute/unpermute): unfused, the routing map transposed and made contiguous, the
# token indices built (arange, expand, masked_select), the rows gathered (index_select) and
# the probabilities selected: 6 kernels; the reverse scales by the probabilities, allocates the
# output (zeros), adds the rows back (scatter_add) and casts: 4. Fused (--moe-permute-fusion,
# Transformer Engine's moe_permute/moe_unpermute): the row map and the gather, 2; one kernel
# back.
PERMUTE_KERNELS = {False: (6, 4), True: (2, 1)}
# Sorting the received rows by local expert and back (ep > 1 and more than one local expert):
# unfused a concatenation of the chunks of tokens and of probabilities, 2 each way; fused
# (Transformer Engine's moe_sort_chunks_by_index) 1.
SORT_KERNELS = {False: 2, True: 1}

# An attention block of Megatron-Core with Transformer Engine (fused kernels), forward: the
# norm fused with the QKV GEMM (2), rotary on Q and K (2), the fused attention (1), the output
# projection (1), bias-dropout-add (1). Backward: the add's gradient (1), the output
# projection's data and weight gradients (2), the attention's backward (FlashAttention's
# preprocessing, main kernel and dQ conversion: 3), rotary (2), QKV's two gradients (2), the
# norm's backward and its weight-gradient reduction (2), the residual gradients added (1).
ATTENTION_KERNELS = (7, 13)
# RMSNorm on each head's queries and keys (Qwen3's, Megatron-Core's --qk-layernorm): a norm on
# Q and one on K, each backward with its weight-gradient reduction.
QK_NORM_KERNELS = (2, 4)
# A dense FFN: norm fused with FC1 (2), the fused activation (1), FC2 (1), bias-dropout-add
# (1); backward: 1 + 2 + 1 + 2 + 2 (norm) + 1.
DENSE_FFN_KERNELS = (5, 9)
# Eager pointwise ops in place of fused ones (kernels=eager, `eager_kernels`): RMSNorm as 7 ops
# (float, pow, mean, add eps, rsqrt, mul, type_as, * weight less the fused one), rotary as 6 a
# tensor (float, view_as_complex, mul, view_as_real, flatten, type_as) for Q and K, repeat_kv
# (K and V) and the output's contiguous copy (3), and the residual add split from dropout (1)
# in the attention block; the backward about twice as many.
EAGER_ATTENTION_EXTRA = (7 + 10 + 3 + 1, 2 * (7 + 10 + 3 + 1))
EAGER_FFN_EXTRA = (7 + 1 + 1, 2 * (7 + 1 + 1))  # RMSNorm, SwiGLU's two kernels, residual
# A MoE layer's FFN beside the router, the permutations and the experts' GEMMs: its norm (1),
# the fused activation (1), bias-dropout-add (1); backward: the norm (2), activation (1), the
# add and the residual gradients (2).
MOE_FFN_KERNELS = (3, 5)
# FP8 (Transformer Engine): each linear's input quantised in the forward (the first, after a
# norm, fused into it) and its output gradient cast and transposed in the backward; a grouped
# linear quantises all its experts' inputs in one multi-tensor launch.
FP8_CASTS_PER_LINEAR = (1, 1)
# Captured parts replayed as CUDA graphs (Megatron-Core's --cuda-graph-impl transformer_engine
# --cuda-graph-scope attn moe_router moe_preprocess, and mlp for dense layers; the same
# document, section 2.3): one graph launch a part and pass. The routed experts, permutation and
# all-to-alls stay eager (their shapes change every step with the routing).
GRAPH_LAUNCHES = 1


def measured_kernel_s(measured) -> float | None:
    """Host seconds a kernel a GPU's machine profile measured (`ceiling bench overhead`
    saves `overhead.host_costs`: seconds of host an aten op of an eager training step's
    forward and backward, `measure.host_costs`), their mean; None when it has none or the
    profile is not a GPU's (a CPU's host cost launches no GPU kernel)."""
    if getattr(measured, "kind", None) != "cuda":
        return None
    return _host_cost(measured, ("forward_s", "backward_s"))


def measured_forward_op_s(measured) -> float | None:
    """Host seconds an aten op of an eager forward the machine profile measured, on any
    device (on a CPU the host's time an op beside its work); None when it has none."""
    return _host_cost(measured, ("forward_s",))


# A view's host time over an op's in an eager forward where the profile has no view figure:
# measured 1.6 of 18.8 µs on a 2-core EPYC guest (`measure.host_costs`), rounded up
VIEW_SHARE = 0.1


def measured_view_share(measured) -> float | None:
    """The host's time a view over its time an op of an eager forward, as the machine profile
    measured them; None when it has not both."""
    op, view = _host_cost(measured, ("forward_s",)), _host_cost(measured, ("forward_view_s",))
    return None if op is None or view is None else min(view / op, 1.0)


def _host_cost(measured, phases_named: tuple[str, ...]) -> float | None:
    overhead = (getattr(measured, "extra", None) or {}).get("overhead")
    costs = overhead.get("host_costs") if isinstance(overhead, dict) else None
    if not isinstance(costs, dict):
        return None
    phases = [costs.get(name) for name in phases_named]
    if not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < 1 for v in phases
    ):
        return None
    return sum(phases) / len(phases)


@dataclass(frozen=True)
class HostOptions:
    """What sets a layer's kernel count: the stack's fusions and CUDA graphs."""

    cuda_graphs: bool = False
    router_fusion: bool = True
    permute_fusion: bool = True
    kernel_s: float = HOST_S_PER_KERNEL


def _block_kernels(base, eager_extra, t, sp, fp8, eager, graphs: bool):
    """Kernels of one block (its own `base` (forward, backward) count) per micro-batch, with
    its tensor-parallel collectives, FP8 casts and eager extras: (forward, backward)."""
    t = np.asarray(t, dtype=float)
    if graphs:
        return np.full_like(t, GRAPH_LAUNCHES), np.full_like(t, GRAPH_LAUNCHES)
    # Tensor parallelism: an all-gather before the first linear and a reduce-scatter after
    # the last with sequence parallelism, one all-reduce without; the backward mirrors them.
    tp = np.where(t > 1, np.where(sp, 2.0, 1.0), 0.0)
    fwd = base[0] + tp + np.where(fp8, FP8_CASTS_PER_LINEAR[0], 0.0)
    bwd = base[1] + tp + np.where(fp8, 2.0 * FP8_CASTS_PER_LINEAR[1], 0.0)
    return fwd + np.where(eager, eager_extra[0], 0.0), bwd + np.where(eager, eager_extra[1], 0.0)


def attention_kernels(t, sp, fp8, eager, graphs: bool, qk_norm: bool = False):
    """Kernels of one attention block per micro-batch: (forward, backward)."""
    base = ATTENTION_KERNELS
    if qk_norm and not graphs:
        base = (base[0] + QK_NORM_KERNELS[0], base[1] + QK_NORM_KERNELS[1])
    return _block_kernels(base, EAGER_ATTENTION_EXTRA, t, sp, fp8, eager, graphs)


def dense_ffn_kernels(t, sp, fp8, eager, graphs: bool):
    """Kernels of one dense FFN (or a shared expert's, its norm included) per micro-batch."""
    return _block_kernels(DENSE_FFN_KERNELS, EAGER_FFN_EXTRA, t, sp, fp8, eager, graphs)


def routed_kernels(moe, ep, etp, fp8, opts: HostOptions, dispatcher=0):
    """Kernels of one MoE layer's routed part per micro-batch (router to combine):
    (forward, backward, of the forward those launched after the dispatcher's host sync before
    the dispatch's all-to-all).

    Forward: the router and preprocessing (`ROUTER_KERNELS`; one graph launch when captured),
    permutation (`PERMUTE_KERNELS`), the dispatch all-to-all (ep > 1), the sort by local
    expert, each grouped linear's one GEMM per local expert (Transformer Engine's GroupedLinear
    launches them one by one; E/ep experts, two grouped linears), the sort back, the combine,
    unpermutation. Expert tensor parallelism (etp > 1) gathers the rows and scatters them back
    (2). Backward: the router's autograd nodes, about as many as its forward kernels (none
    when captured: its backward graph, one launch); the permutations reversed; both
    all-to-alls; each grouped linear's data and weight gradient per local expert."""
    ep = np.asarray(ep, dtype=float)
    etp = np.asarray(etp, dtype=float)
    local = moe.experts / ep
    fused = bool(opts.router_fusion)
    deepep = np.asarray(dispatcher) == DISPATCHERS.index("deepep")
    router = np.where(
        deepep, ROUTER_KERNELS[("deepep", fused)], ROUTER_KERNELS[("alltoall", fused)]
    )
    router = GRAPH_LAUNCHES if opts.cuda_graphs else router
    perm, unperm = PERMUTE_KERNELS[bool(opts.permute_fusion)]
    a2a = np.where(ep > 1, 1.0, 0.0)
    sort = np.where((ep > 1) & (local > 1), SORT_KERNELS[bool(opts.permute_fusion)], 0.0)
    gather = np.where(etp > 1, 2.0, 0.0)
    casts = np.where(fp8, 2.0 * FP8_CASTS_PER_LINEAR[0], 0.0)
    gemms = 2.0 * local  # GROUPED_LINEARS of `moe`: up (with the gate) and down
    after_sync = perm + a2a
    fwd = router + after_sync + 2.0 * sort + gather + gemms + casts + a2a + unperm
    casts_bwd = np.where(fp8, 2.0 * FP8_CASTS_PER_LINEAR[1], 0.0)
    bwd = router + unperm + perm + 2.0 * a2a + 2.0 * sort + gather + 2.0 * gemms + casts_bwd
    return fwd, bwd, after_sync


def layer_kernels(sh, x, opts: HostOptions, qk_norm: bool = False):
    """Kernels one layer launches per micro-batch, averaged over the layers (dense and MoE
    by their share): (forward, backward, launched after a MoE layer's host sync)."""
    graphs = opts.cuda_graphs
    attn_f, attn_b = attention_kernels(x.plan.t, x.sp, x.fp8, x.eager, graphs, qk_norm)
    moe = sh.moe
    if moe is None or not moe.routed:
        ffn_f, ffn_b = dense_ffn_kernels(x.plan.t, x.sp, x.fp8, x.eager, graphs)
        zero = np.zeros_like(attn_f)
        return attn_f + ffn_f, attn_b + ffn_b, zero
    share = moe.moe_share
    dense_f, dense_b = dense_ffn_kernels(x.plan.t, x.sp, x.fp8, x.eager, graphs)
    rout_f, rout_b, after = routed_kernels(moe, x.plan.ep, x.etp, x.fp8, opts, x.plan.dispatcher)
    moe_f, moe_b = MOE_FFN_KERNELS
    if moe.shared:  # shared experts: a dense FFN beside the routed ones (its own norm left out)
        moe_f = moe_f + dense_f - 1.0
        moe_b = moe_b + dense_b - 2.0
    fwd = attn_f + share * (rout_f + moe_f) + (1.0 - share) * dense_f
    bwd = attn_b + share * (rout_b + moe_b) + (1.0 - share) * dense_b
    return fwd, bwd, share * after


def host_extra_s(host_fwd, host_bwd, after_sync, gpu_layer, rebuilt):
    """Seconds a layer's GPU waits for its host per micro-batch, beyond its GPU time.

    The forward takes the longer of its host time and its GPU time plus the host time after
    the MoE sync (`after_sync`, the GPU idle while the permutation and dispatch are
    launched); the backward (the rebuilt share `rebuilt` of the forward run again inside it,
    host and GPU) the longer of its two. The GPU time `gpu_layer` splits over the passes as
    the GEMMs' FLOPs: forward 1, backward 2, rebuilding `rebuilt`. A dense model has no sync
    and its host could run ahead from the forward into the backward; taking each pass apart
    prices it as a MoE layer's, a little above what it waits."""
    passes = 3.0 + rebuilt
    gpu_fwd = gpu_layer / passes
    gpu_bwd = gpu_layer * (2.0 + rebuilt) / passes
    fwd = np.maximum(host_fwd - gpu_fwd, after_sync)
    bwd_host = host_bwd + rebuilt * host_fwd
    bwd = np.maximum(bwd_host - gpu_bwd, rebuilt * after_sync)
    return fwd + np.maximum(bwd, 0.0)
