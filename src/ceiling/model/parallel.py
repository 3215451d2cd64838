"""A training plan — data (d), tensor (t) and pipeline (p) parallelism, ZeRO sharding,
recomputation, sequence parallelism — and what it costs: memory per device, time per step,
MFU.

Notation: l layers, h hidden, a heads, q = a·head_dim, k = kv_heads·head_dim, f FFN width,
e active experts, V vocabulary, s sequence length, b micro-batch, B global batch (sequences),
m = B/(d·b) micro-batches per pipeline per step, v model chunks per device (interleaving).
A multiply-add counts as 2 FLOPs. Activations are 16-bit.

The per-piece formulas live in `parallel_costs`; `evaluate_arrays` here combines them into
memory and step time. Everything accepts numpy arrays for the plan fields (broadcasting), so
the search in `plan_search` evaluates thousands of plans in one pass through the same code
that `evaluate_plan` uses for one.

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
from types import SimpleNamespace

import numpy as np

from ceiling.errors import InvalidInput
from ceiling.model import plan_axes
from ceiling.model.collectives import all_to_all_s, allreduce_s, p2p_s, ring_gather_s
from ceiling.model.parallel_costs import (
    Shape,
    activation_bytes_per_token_layer,
    in_flight_layers,
    layer_attention_flops_per_token,
    layer_elementwise_bytes_per_token,
    layer_forward_flops_per_token,
    layers_per_device,
    megatron_hw_flops_per_step,
    shape_of,
    state_bytes_per_param,
    state_pieces_per_param,
)
from ceiling.model.plan_axes import AXES, RECOMPUTE, STATE_BYTES
from ceiling.model.plan_rules import check_plan

__all__ = [
    "ATTENTION",
    "RECOMPUTE",
    "STATE_BYTES",
    "Job",
    "Plan",
    "PlanResult",
    "Shape",
    "activation_bytes_per_token_layer",
    "bubble_fraction",
    "check_plan",
    "evaluate_arrays",
    "evaluate_plan",
    "in_flight_layers",
    "layer_attention_flops_per_token",
    "layer_elementwise_bytes_per_token",
    "layer_forward_flops_per_token",
    "layers_per_device",
    "megatron_hw_flops_per_step",
    "result_from_arrays",
    "shape_of",
    "state_bytes_per_param",
]

ATTENTION = ("unfused", "flash")

# Bytes per parameter of the fp32 Adam update: read master weights, momentum, variance (3×4)
# and the gradient; write the three back (3×4) and the 16-bit weights (2).
ADAM_UPDATE_BYTES = 26

# Communication hidden behind compute is not free: collective kernels take SMs and memory
# bandwidth from the kernels they overlap. A modelling assumption: a fifth of the hidden
# time still lengthens the step.
OVERLAP_COST = 0.2

# Mixture-of-experts capacity factor: tokens an expert is sized for over its even share.
MOE_CAPACITY_FACTOR = 1.25

# Bytes per token per vocabulary entry that the loss moves (forward 16, backward 8).
LOSS_BYTES_PER_VOCAB = 24


@dataclass(frozen=True)
class Plan:
    """How one training step is split over d·t·p devices."""

    d: int
    t: int
    p: int
    micro_batch: int = 1
    v: int = 1  # model chunks per device; > 1 is the interleaved 1F1B schedule
    zero: int = 0  # 0 plain data parallel, 1 optimizer, 2 + gradients, 3 + weights (FSDP)
    recompute: str = "selective"
    sequence_parallel: bool = True
    state_bytes_per_param: int = 18
    ep: int = 1  # expert parallelism: experts spread over ep of the d data-parallel ranks

    def __post_init__(self) -> None:
        for axis in AXES:
            axis.check(getattr(self, axis.field))

    @property
    def devices(self) -> int:
        return self.d * self.t * self.p

    def describe(self) -> str:
        return plan_axes.describe(self)

    def to_json(self) -> dict:
        return plan_axes.plan_fields(self)


@dataclass(frozen=True)
class Job:
    """What is trained: the model, the global batch and sequence length, and kernel choices."""

    model: object  # ceiling.model.transformer.TransformerConfig
    global_batch: int  # sequences per optimizer step
    seq_len: int
    attention: str = "unfused"  # "flash": no s×s scores in memory (FlashAttention)
    dropout: bool = True  # dropout masks after attention, its scores and the MLP
    headroom: float = 0.10  # share of device memory kept free (allocator, buffers, context)
    overlap_dp: bool = True  # gradient reduction overlaps the last micro-batch's backward
    token_budget: float | None = None

    def __post_init__(self) -> None:
        for name in ("global_batch", "seq_len"):
            val = getattr(self, name)
            if not isinstance(val, int) or isinstance(val, bool) or val < 1:
                raise InvalidInput(f"{name} must be a positive integer, got {val!r}")
        if self.attention not in ATTENTION:
            raise InvalidInput(
                f"attention must be one of {', '.join(ATTENTION)}, got {self.attention!r}"
            )
        if not 0 <= self.headroom < 1:
            raise InvalidInput(f"memory headroom must be in [0, 1), got {self.headroom!r}")
        if self.token_budget is not None and not self.token_budget > 0:
            raise InvalidInput(f"token budget must be > 0, got {self.token_budget!r}")


# ---- the whole plan ---------------------------------------------------------------------

RECOMPUTE_CODE = {name: code for code, name in enumerate(RECOMPUTE)}


def evaluate_arrays(job: Job, cluster, plans: Mapping) -> dict:
    """Evaluate plans given as arrays (or scalars) keyed by axis (`plan_axes`: d, t, p,
    micro_batch, v, ep, zero, recompute as its code, sp, state_bytes); returns a dict of arrays.

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
    x = _layout(job, plans)
    mem = _memory(job, cluster, x)
    comp = _compute(job, cluster, x)
    tp_mb, ep_mb, tp_spans = _model_parallel_comm(cluster, x)
    stage_mb = comp["compute_mb"] + tp_mb + ep_mb

    # ---- pipeline: bubble and point-to-point sends ----
    pipeline_s = (x.m + (x.pf - 1.0) / x.vf) * stage_mb
    bubble_s = (x.pf - 1.0) / x.vf * stage_mb
    one_send = x.tokens_mb * x.sh.hidden * 2.0 / x.tf
    p2p_total, pp_spans = _pipeline_sends_s(cluster, one_send, x.df, x.tf, x.pf, x.vf, x.m)
    dp = _data_parallel(job, cluster, x, comp["compute_mb"])

    # ---- optimizer update (memory-bound over this device's shard) ----
    # Adam's update plus one more read of the gradients for the global norm (clipping).
    shard = np.where(x.zero >= 1, x.dense_dev / x.df + x.expert_dev / x.d_expert, x.params_dev)
    optimizer_s = shard * (ADAM_UPDATE_BYTES + 2.0 * dp["grad_elem"]) / cluster.memory_bytes_per_s

    # A synchronous step waits for the slowest of N devices; with independent per-device
    # variation sigma, the expected maximum lies about sigma·sqrt(2 ln N) above the mean.
    devices = x.df * x.tf * x.pf
    sync_s = (pipeline_s + p2p_total) * cluster.step_jitter * np.sqrt(2.0 * np.log(devices))
    step_s = pipeline_s + p2p_total + dp["dp_exposed"] + optimizer_s + sync_s
    tokens = float(job.global_batch) * job.seq_len
    # Model FLOPs: 6 per weight a token multiplies plus 12·l·q·s for attention (PaLM,
    # Appendix B) — the hardware count without recomputation, so HFU ≥ MFU always holds.
    model_flops = tokens * (x.sh.layers * 3.0 * comp["fwd_tok"] + comp["logits_hw_tok"])
    hw_flops_total = tokens * (x.sh.layers * comp["layer_hw_tok"] + comp["logits_hw_tok"])
    peak = cluster.peak_flops_per_s
    return {
        "d": x.d,
        "t": x.t,
        "p": x.p,
        "micro_batch": x.b,
        "v": x.v,
        "ep": x.ep,
        "zero": x.zero,
        "recompute_code": x.rc,
        "sequence_parallel": x.sp,
        "micro_batches": x.m,
        "params_per_device": x.params_dev,
        **mem,
        "matmul_s": comp["matmul_mb"] * x.m,
        "elementwise_s": comp["elementwise_mb"] * x.m,
        "tp_comm_s": tp_mb * x.m,
        "ep_comm_s": ep_mb * x.m,
        "bubble_s": bubble_s,
        "p2p_s": p2p_total,
        "dp_comm_s": dp["dp_total"],
        "dp_exposed_s": dp["dp_exposed"],
        "optimizer_s": optimizer_s,
        "straggler_s": sync_s,
        "step_s": step_s,
        "tokens_per_s": tokens / step_s,
        "mfu": model_flops / (step_s * devices * peak),
        "hfu": hw_flops_total / (step_s * devices * peak),
        "hw_flops_per_device_per_s": hw_flops_total / (step_s * devices),
        "tp_spans_nodes": tp_spans & (x.tf > 1),
        "dp_spans_nodes": dp["dp_spans"] & (x.df > 1),
        "pp_spans_nodes": pp_spans & (x.pf > 1),
    }


def _layout(job: Job, plans: Mapping) -> SimpleNamespace:
    """The plans' axes as arrays, and what every term needs: micro-batches m, tokens per
    micro-batch, and the parameters of the most loaded device (its stage's layers plus an
    embedding table or output head; experts split over t and ep, their gradients reduced
    over d/ep replicas)."""
    sh = shape_of(job.model)
    keys = ("d", "t", "p", "micro_batch", "v", "zero", "recompute", "state_bytes", "ep")
    d, t, p, b, v, zero, rc, state, ep = (np.asarray(plans[k]) for k in keys)
    sp = np.asarray(plans["sp"], dtype=bool) & (t > 1)
    df, tf, pf, bf, vf, epf = (a.astype(float) for a in (d, t, p, b, v, ep))
    layers_dev = layers_per_device(sh.layers, pf, vf)
    emb = np.where(pf > 1, sh.params_embedding_stage, sh.params_embedding_single)
    dense_layer = sh.params_layer - sh.params_experts_layer
    dense_dev = (layers_dev * dense_layer + emb) / tf
    expert_dev = layers_dev * sh.params_experts_layer / (tf * epf)
    return SimpleNamespace(
        sh=sh, d=d, t=t, p=p, b=b, v=v, zero=zero, rc=rc, state=state, ep=ep, sp=sp,
        df=df, tf=tf, pf=pf, bf=bf, vf=vf, epf=epf,
        m=job.global_batch / (df * bf), tokens_mb=bf * job.seq_len,
        layers_dev=layers_dev, dense_layer=dense_layer, dense_dev=dense_dev,
        expert_dev=expert_dev, params_dev=dense_dev + expert_dev, d_expert=df / epf,
    )  # fmt: skip


def _memory(job: Job, cluster, x: SimpleNamespace) -> dict:
    """Bytes per device: weights, gradients and optimizer state (ZeRO-sharded), activations
    of the micro-batches in flight (with the fp32 logits of the last stage), ZeRO-3 buffers."""
    sh, s = x.sh, job.seq_len
    spb = state_bytes_per_param(x.state, x.zero, x.df)
    spb_expert = state_bytes_per_param(x.state, x.zero, x.d_expert)
    state_bytes = x.dense_dev * spb + x.expert_dev * spb_expert
    pieces = zip(
        state_pieces_per_param(x.state, x.zero, x.df),
        state_pieces_per_param(x.state, x.zero, x.d_expert),
        strict=True,
    )
    weight_bytes, grad_bytes, optim_bytes = (x.dense_dev * a + x.expert_dev * e for a, e in pieces)
    experts_layer = sh.params_experts_layer / x.epf
    layer_state = x.layers_dev / x.tf * (x.dense_layer * spb + experts_layer * spb_expert)
    act_tok = activation_bytes_per_token_layer(sh, s, x.tf, x.sp, x.rc, job.attention, job.dropout)
    activations = act_tok * x.tokens_mb * in_flight_layers(sh.layers, x.pf, x.vf, x.m)
    # Full recompute rebuilds one layer at a time: its whole activation set is live once.
    whole = activation_bytes_per_token_layer(sh, s, x.tf, x.sp, 0, job.attention, job.dropout)
    working = np.where(x.rc == 2, whole * x.tokens_mb, 0.0)
    # Logits in fp32 for the loss (last stage; with p = 1 the same device).
    logits = 4.0 * x.tokens_mb * sh.vocab / x.tf
    # The last stage holds one micro-batch per chunk of the last round, (v-1)·p + 1 chunks.
    chunks_held = np.where(x.vf > 1, (x.vf - 1) * x.pf + 1, 1)
    last_stage_acts = act_tok * x.tokens_mb * x.layers_dev / x.vf * chunks_held
    act_peak = np.where(
        x.pf > 1, np.maximum(activations, last_stage_acts + logits), activations + logits
    )
    act_peak = act_peak + working
    # ZeRO-3 holds the gathered 16-bit weights of the layer it runs and of the next (prefetch).
    gathered = np.where(x.zero == 3, 2 * 2.0 * (x.dense_layer + experts_layer) / x.tf, 0.0)
    memory = state_bytes + act_peak + gathered
    usable = cluster.memory_bytes * (1.0 - job.headroom)
    return {
        "layer_state_bytes": layer_state,
        "state_bytes": state_bytes,
        "weight_bytes": weight_bytes,
        "gradient_bytes": grad_bytes,
        "optimizer_bytes": optim_bytes,
        "gathered_weight_bytes": gathered,
        "activation_bytes": act_peak,
        "layer_activation_bytes": activations,
        "memory_bytes": memory,
        "usable_bytes": np.broadcast_to(usable, np.shape(memory)),
        "fits": memory <= usable,
    }


def _compute(job: Job, cluster, x: SimpleNamespace) -> dict:
    """Per micro-batch on the slowest stage: matmuls (recomputation counted, expert capacity
    padding included) and memory-bound kernels (the loss on the last stage included)."""
    sh, s, rc = x.sh, job.seq_len, x.rc
    fwd_tok = layer_forward_flops_per_token(sh, s)
    attn_tok = layer_attention_flops_per_token(sh, s)
    recompute_tok = np.where(rc == 2, fwd_tok, np.where(rc == 1, attn_tok, 0.0))
    layer_hw_tok = 3.0 * fwd_tok + recompute_tok  # forward, backward (2×), recompute
    logits_hw_tok = 6.0 * sh.hidden * sh.vocab  # forward 2hV + backward 4hV, never recomputed
    hw_flops_mb = x.tokens_mb * (x.layers_dev * layer_hw_tok + logits_hw_tok) / x.tf
    ew_fwd, ew_bwd, ew_scores = layer_elementwise_bytes_per_token(
        sh, s, x.tf, x.sp, job.attention, job.dropout
    )
    ew_recompute = np.where(rc == 2, ew_fwd, np.where(rc == 1, ew_scores, 0.0))
    # The loss on the last stage: 16-bit logits written and read, upcast to fp32, softmax read
    # and written (16·V bytes per token forward), its gradient 8·V back; split over t.
    loss_bytes_tok = LOSS_BYTES_PER_VOCAB * sh.vocab / x.tf
    ew_bytes_mb = x.tokens_mb * (x.layers_dev * (ew_fwd + ew_bwd + ew_recompute) + loss_bytes_tok)
    # Experts run with a capacity: each processes up to capacity_factor × its even share of
    # tokens, padded, so the busiest sets the pace (Fedus et al. 2021, Switch Transformer).
    expert_tok = 2.0 * sh.active_experts * sh.params_experts_layer / sh.experts
    padded_tok = (MOE_CAPACITY_FACTOR - 1.0) * expert_tok * (3.0 + np.where(rc == 2, 1.0, 0.0))
    padded_mb = x.tokens_mb * x.layers_dev * padded_tok / x.tf
    matmul_mb = (hw_flops_mb + padded_mb) / cluster.matmul_flops_per_s
    elementwise_mb = ew_bytes_mb / cluster.memory_bytes_per_s
    return {
        "fwd_tok": fwd_tok,
        "layer_hw_tok": layer_hw_tok,
        "logits_hw_tok": logits_hw_tok,
        "matmul_mb": matmul_mb,
        "elementwise_mb": elementwise_mb,
        "compute_mb": matmul_mb + elementwise_mb,
    }


def _model_parallel_comm(cluster, x: SimpleNamespace):
    """Per micro-batch: tensor-parallel all-reduces (2 forward, 2 backward, 2 more to
    recompute) and expert all-to-alls (dispatch and combine around each MoE block); and
    whether the tensor-parallel group spans nodes."""
    per_node, h, collectives = cluster.devices_per_node, x.sh.hidden, x.rc == 2
    tp_spans = x.tf > per_node
    tp_bw, tp_lat = _link(cluster, tp_spans)
    n_coll = 4.0 + np.where(collectives, 2.0, 0.0)
    tp_mb = x.layers_dev * n_coll * allreduce_s(x.tokens_mb * h * 2.0, x.tf, tp_bw, tp_lat)
    ep_bw, ep_lat = _link(cluster, x.tf * x.epf > per_node)
    routed = MOE_CAPACITY_FACTOR * x.tokens_mb * x.sh.active_experts * h * 2.0 / x.tf
    a2a = all_to_all_s(routed, x.epf, ep_bw, ep_lat)
    ep_mb = x.layers_dev * n_coll * a2a
    return tp_mb, ep_mb, tp_spans


def _data_parallel(job: Job, cluster, x: SimpleNamespace, compute_mb) -> dict:
    """Gradient reduction (all-reduce, or reduce-scatter + all-gather with ZeRO; per
    micro-batch gathers with ZeRO-3) over d (experts over d/ep), and the part not hidden."""
    dp_spans = x.tf * x.df > cluster.devices_per_node
    bw, lat = _link(cluster, dp_spans)
    grad_elem = np.where(x.state == 18, 4.0, 2.0)
    g_dense, g_expert = x.dense_dev * grad_elem, x.expert_dev * grad_elem
    w_dense, w_expert = x.dense_dev * 2.0, x.expert_dev * 2.0
    d, de = x.df, x.d_expert
    allreduce = allreduce_s(g_dense, d, bw, lat) + allreduce_s(g_expert, de, bw, lat)
    reduce_scatter = ring_gather_s(g_dense, d, bw, lat) + ring_gather_s(g_expert, de, bw, lat)
    all_gather = ring_gather_s(w_dense, d, bw, lat) + ring_gather_s(w_expert, de, bw, lat)
    rs_ag = reduce_scatter + all_gather
    # ZeRO-3 gathers the weights before each forward and backward of every micro-batch and
    # reduce-scatters gradients after each backward; that traffic hides behind compute.
    z3_mb = 2.0 * all_gather + reduce_scatter
    z3_exposed = x.m * (
        np.maximum(0.0, z3_mb - compute_mb) + OVERLAP_COST * np.minimum(z3_mb, compute_mb)
    )
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
        "dp_total": dp_total,
        "dp_exposed": dp_exposed,
        "dp_spans": dp_spans,
    }


def _pipeline_sends_s(cluster, nbytes, df, tf, pf, vf, m):
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


def _link(cluster, spans_nodes):
    """Achieved collective bandwidth and per-step latency, across nodes where `spans_nodes`."""
    inter, intra = cluster.link(True), cluster.link(False)
    return np.where(spans_nodes, inter[0], intra[0]), np.where(spans_nodes, inter[1], intra[1])


# ---- one plan, validated and explained --------------------------------------------------


# The parts of a plan's memory per device and of its step time, as PlanResult keeps them.
MEMORY_TERMS = (
    "state_bytes",
    "weight_bytes",
    "gradient_bytes",
    "optimizer_bytes",
    "gathered_weight_bytes",
    "activation_bytes",
    "layer_activation_bytes",
    "layer_state_bytes",
    "params_per_device",
)
TIME_TERMS = (
    "matmul_s",
    "elementwise_s",
    "tp_comm_s",
    "ep_comm_s",
    "bubble_s",
    "p2p_s",
    "dp_exposed_s",
    "optimizer_s",
    "straggler_s",
)


@dataclass(frozen=True)
class PlanResult:
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

    def to_json(self, why_slower: str = "") -> dict:
        """The plan's axes (from `plan_axes`), then what it costs."""
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
            "dp_comm_total_s": self.dp_comm_s,
            "tokens_per_s": self.tokens_per_s,
            "mfu": self.mfu,
            "hfu": self.hfu,
            "hw_tflops_per_device": self.hw_tflops_per_device,
            "time_to_train_s": self.time_to_train_s,
            "why_slower": why_slower or None,
            "notes": list(self.notes),
        }


def evaluate_plan(job: Job, cluster, plan: Plan) -> PlanResult:
    notes = check_plan(job, cluster, plan)
    r = evaluate_arrays(job, cluster, {a.key: a.encode(getattr(plan, a.field)) for a in AXES})
    return result_from_arrays(job, plan, r, 0 if np.ndim(r["step_s"]) else None, notes)


def result_from_arrays(job: Job, plan: Plan, r: dict, i, notes=()) -> PlanResult:
    def g(key):
        val = r[key] if i is None else np.broadcast_to(r[key], np.shape(r["step_s"]))[i]
        return float(val)

    tps = g("tokens_per_s")
    return PlanResult(
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
    )


def bubble_fraction(p: int, m: int, v: int = 1) -> float:
    """Pipeline bubble over ideal compute: (p-1)/(v·m)."""
    return (p - 1) / (v * m)
