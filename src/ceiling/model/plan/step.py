"""A training plan — data (d), tensor (t) and pipeline (p) parallelism, ZeRO sharding,
recomputation, sequence parallelism — and what it costs: memory per device, time per step,
MFU.

Notation: l layers, h hidden, a heads, q = a·head_dim, k = kv_heads·head_dim, f FFN width,
e active experts, V vocabulary, s sequence length, b micro-batch, B global batch (sequences),
m = B/(d·b) micro-batches per pipeline per step, v model chunks per device (interleaving).
A multiply-add counts as 2 FLOPs. Activations are 16-bit.

The per-piece formulas live in `parallel_costs`, the time of each piece in `parallel_time`;
`evaluate_arrays` here combines them into memory and step time. Everything accepts numpy
arrays for the plan fields (broadcasting), so
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
from ceiling.model.plan import pipeline as pipeline_stages
from ceiling.model.plan import recompute
from ceiling.model.plan.axes import AXES, Plan, plans_to_arrays
from ceiling.model.plan.communication import (
    OVERLAP_COST,
    data_parallel,
    linear_params_dev,
    model_parallel_comm,
    pipeline_sends_s,
    stage_compute,
)
from ceiling.model.plan.costs import (
    Shape,
    activation_bytes_per_token_layer,
    fp8_saved_input_bytes,
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
from ceiling.model.plan.rules import check_plan

__all__ = [
    "ATTENTION",
    "DEFAULT_ATTENTION",
    "OVERLAP_COST",
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
# The attention kernel assumed unless one is asked for (`--attention`), whatever the model and
# wherever it comes from (catalog, custom:, hf:): FlashAttention, or a kernel like it that keeps
# no s×s scores — what Megatron-Core with Transformer Engine, torchtitan (SDPA), NeMo and
# Hugging Face (sdpa) run today. "unfused" is Megatron-LM's 2021 kernels (Narayanan et al.).
DEFAULT_ATTENTION = "flash"

# Bytes per token per vocabulary entry (over t) the loss holds at its peak on the last stage.
LOSS_PEAK_BYTES_PER_VOCAB = {
    # Megatron-LM's vocab-parallel cross-entropy: the 16-bit logits upcast to fp32, softmax
    # and its gradient computed in place in that buffer (4); beside it the 16-bit logits in
    # the forward and the 16-bit gradient cast for the output layer in the backward (2).
    "fp32": 6.0,
    # PyTorch eager F.cross_entropy on upcast logits (torchtitan, Hugging Face Trainer):
    # log_softmax keeps its fp32 output (4); its backward holds that, the fp32 gradient
    # coming from nll_loss (4) and its own fp32 result (4).
    "eager": 12.0,
    # A fused cross-entropy kernel reading the 16-bit logits and writing the gradient over
    # them in place (Transformer Engine's parallel_cross_entropy, Liger Kernel's): no fp32
    # copy is ever whole.
    "fused": 2.0,
}
LOSS = tuple(LOSS_PEAK_BYTES_PER_VOCAB)

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


# ---- the whole plan ---------------------------------------------------------------------


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
    comp = stage_compute(job, cluster, x)
    mp = model_parallel_comm(cluster, x, comp)
    stage_mb = comp["compute_mb"] + mp["tp_mb"] + mp["cp_mb"] + mp["ep_mb"]

    # ---- pipeline: bubble and point-to-point sends ----
    pipeline_s, bubble_s, rebuild_mb = _pipeline(x, comp, mp, stage_mb)
    one_send = x.tokens_mb * x.sh.hidden * 2.0 / x.tf
    p2p_total, pp_spans = pipeline_sends_s(cluster, one_send, x.dg, x.tf, x.pf, x.vf, x.m)
    dp = data_parallel(job, cluster, x, comp["compute_mb"])

    # ---- optimizer update (memory-bound over this device's shard) ----
    # Adam's update plus one more read of the gradients for the global norm (clipping).
    shard = np.where(x.zero >= 1, x.dense_dev / x.dg + x.expert_dev / x.d_expert, x.params_dev)
    optimizer_s = shard * (ADAM_UPDATE_BYTES + 2.0 * dp["grad_elem"]) / cluster.memory_bytes_per_s

    # A synchronous step waits for the slowest of N devices; with independent per-device
    # variation sigma, the expected maximum lies about sigma·sqrt(2 ln N) above the mean.
    devices = x.dg * x.tf * x.pf
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
        "attention_s": comp["attention_mb"] * x.m,
        "fp8_matmul_s": comp["fp8_matmul_mb"] * x.m,
        "fp8_cast_s": comp["fp8_cast_mb"] * x.m,
        "elementwise_s": comp["elementwise_mb"] * x.m,
        "eager_kernels_s": comp["eager_mb"] * x.m,
        "tp_comm_s": mp["tp_mb"] * x.m,
        "cp_comm_s": mp["cp_mb"] * x.m,
        "ep_comm_s": mp["ep_mb"] * x.m,
        "tp_hidden_s": mp["tp_hidden_mb"] * x.m,
        "cp_hidden_s": mp["cp_hidden_mb"] * x.m,
        "dp_hidden_s": dp["dp_hidden"],
        "bubble_s": bubble_s,
        "head_s": comp["head_mb"] * x.m,  # output layer and loss (in matmul and elementwise)
        # Rebuilding activations, inside the compute and tensor-parallel terms.
        "recompute_s": x.m * rebuild_mb,
        "stage_layers": np.stack(np.broadcast_arrays(*x.stage_layers), axis=-1),
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
        "tp_spans_nodes": mp["tp_spans"] & (x.tf > 1),
        "dp_spans_nodes": dp["dp_spans"] & (x.dg > 1),
        "pp_spans_nodes": pp_spans & (x.pf > 1),
    }


def _pipeline(x: SimpleNamespace, comp: dict, mp: dict, stage_mb):
    """(the pipeline's time for a step, of it the last stage's idle time, the time a
    micro-batch spends rebuilding activations on the last stage).

    The other stages run their layers at the last stage's time per layer, without the output
    layer and the loss, and rebuild their own share of layers (recompute=layers:N rebuilds N
    of each stage, however many it holds); the slowest stage sets the pace
    (`pipeline_stages.pipeline_time`)."""
    rebuild_mb = comp["recompute_mb"] + mp["tp_mb"] * x.rc_collectives / (4.0 + x.rc_collectives)
    per_layer_mb = (stage_mb - comp["head_mb"] - rebuild_mb) / np.maximum(x.layers_dev, 1.0)
    last_rebuilt = recompute.layers_rebuilt(x.rc, x.layers_dev)

    def stage_mb_of(layers):
        by_layers = recompute.layers_rebuilt(x.rc, layers) / np.maximum(last_rebuilt, 1.0)
        share = np.where(x.rc >= recompute.LAYERS_BASE, by_layers, layers / x.layers_dev)
        return layers * per_layer_mb + rebuild_mb * share

    first_l, mid_l, _ = x.stage_layers
    times = (stage_mb_of(first_l), stage_mb_of(mid_l), stage_mb)
    # A device's first chunk: its share of the device's time by layers (the last device's
    # output layer and loss spread with them: exact for v = 1, an upper bound above).
    chunk0 = tuple(
        t * c / np.maximum(n, 1.0)
        for t, c, n in zip(
            times, pipeline_stages.chunk_layers(*x.stage_layers, x.vf), x.stage_layers, strict=True
        )
    )
    pipeline_s, bubble_s = pipeline_stages.pipeline_time(*times, x.pf, x.vf, x.m, chunk0)
    return pipeline_s, bubble_s, rebuild_mb


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
    cp = np.asarray(plans.get("cp", 1))
    switches = {
        a.key: np.asarray(plans.get(a.key, a.encode(a.default)))
        for a in AXES
        if a.key in ("fp8", "fp8_params", "kernels", "tp_overlap", "cp_overlap", "prefetch")
    }
    first, last = (np.asarray(plans.get(k, 0)) for k in ("first", "last"))
    # Time terms are the last stage's (its layers, the output layer and the loss); memory
    # takes each stage's own (`_memory`); `pipeline_stages` prices the other stages' times.
    stage_layers = pipeline_stages.stage_layers(sh.layers, pf, vf, first, last)
    layers_dev = stage_layers[2]
    rc_linear, rc_attention, rc_pointwise, rc_collectives = recompute.rebuilt_shares(
        sh, rc, layers_dev
    )
    emb = np.where(pf > 1, sh.params_embedding_stage, sh.params_embedding_single)
    dense_layer = sh.params_layer - sh.params_experts_layer
    dense_dev = (layers_dev * dense_layer + emb) / tf
    expert_dev = layers_dev * sh.params_experts_layer / (tf * epf)
    return SimpleNamespace(
        sh=sh, d=d, t=t, p=p, b=b, v=v, zero=zero, rc=rc, state=state, ep=ep, sp=sp,
        df=df, tf=tf, pf=pf, bf=bf, vf=vf, epf=epf,
        m=job.global_batch / (df * bf), tokens_mb=bf * job.seq_len / cp,
        layers_dev=layers_dev, dense_layer=dense_layer, dense_dev=dense_dev, emb=emb,
        stage_layers=stage_layers, rc_linear=rc_linear, rc_attention=rc_attention,
        rc_pointwise=rc_pointwise, rc_collectives=rc_collectives,
        expert_dev=expert_dev, params_dev=dense_dev + expert_dev,
        # Gradients are reduced, and ZeRO shards, over the d·cp ranks holding the same
        # weights (Megatron-Core's data-parallel group with context parallelism).
        cp=cp, cpf=cp.astype(float), dg=df * cp, d_expert=df * cp / epf,
        fp8=switches["fp8"] == 1,
        fp8_params=(switches["fp8"] == 1) & switches["fp8_params"].astype(bool),
        eager=switches["kernels"] == 1,
        tp_overlap=switches["tp_overlap"].astype(bool),
        cp_overlap=switches["cp_overlap"].astype(bool),
        prefetch=switches["prefetch"].astype(bool),
    )  # fmt: skip


def _memory(job: Job, cluster, x: SimpleNamespace) -> dict:
    """Bytes per device on the most loaded stage (`_stage_memory`): weights, gradients and
    optimizer state (ZeRO-sharded), activations of the micro-batches in flight with the
    loss's logits or a rebuilt layer at their peak, ZeRO-3 buffers."""
    sh = x.sh
    spb = state_bytes_per_param(x.state, x.zero, x.dg)
    spb_expert = state_bytes_per_param(x.state, x.zero, x.d_expert)
    experts_layer = sh.params_experts_layer / x.epf
    layer_state = x.layers_dev * (x.dense_layer * spb + experts_layer * spb_expert) / x.tf
    st = _stage_memory(job, x, spb, spb_expert)
    dense_dev, expert_dev = st["dense"], st["layers"] * experts_layer / x.tf
    state_bytes = dense_dev * spb + expert_dev * spb_expert
    pieces = zip(
        state_pieces_per_param(x.state, x.zero, x.dg),
        state_pieces_per_param(x.state, x.zero, x.d_expert),
        strict=True,
    )
    pieces = list(pieces)
    weight_bytes, grad_bytes, optim_bytes = (dense_dev * a + expert_dev * e for a, e in pieces)
    # ZeRO-3 holds the gathered 16-bit weights of the unit it runs and of the next: two
    # blocks, or at the loss the output layer with the last block (FSDP keeps the root
    # module's weights, the output layer among them, gathered from forward into backward).
    block = x.dense_layer + experts_layer
    head = sh.vocab * sh.hidden
    gathered = np.where(x.zero == 3, 2.0 * (block + np.maximum(block, head)) / x.tf, 0.0)
    # FP8 (Transformer Engine 1.x, linear.py) keeps each linear weight's 16-bit copy and, over
    # a step's micro-batches, its FP8 cast and that cast's transpose (Hopper's FP8 GEMMs take
    # one layout; the backward's dgrad needs the other): 2 bytes more. With fp8_params
    # (te.fp8_model_init) the weight is the FP8 tensor itself, 1 byte in place of 2, a view
    # into the distributed optimizer's uint8 parameter buffer (NeMo distributed_adam.py), and
    # only its transpose is cached (Float8Tensor.transpose_2d(cache=True)); the fp32 master
    # stays in the optimizer state (NeMo sets store_params for fp8_params).
    linear = linear_params_dev(x, st["layers"])
    fp8_weights = np.where(x.fp8, np.where(x.fp8_params, 1.0, 2.0) * linear, 0.0)
    kept_in_fp8 = np.where(x.fp8_params, linear * pieces[0][0] / 2.0, 0.0)
    weight_bytes, state_bytes = weight_bytes - kept_in_fp8, state_bytes - kept_in_fp8
    memory = state_bytes + st["activations"] + gathered + fp8_weights
    usable = cluster.memory_bytes * (1.0 - job.headroom)
    return {
        "layer_state_bytes": layer_state,
        "state_bytes": state_bytes,
        "weight_bytes": weight_bytes,
        "gradient_bytes": grad_bytes,
        "optimizer_bytes": optim_bytes,
        "gathered_weight_bytes": gathered,
        "fp8_weight_bytes": fp8_weights,
        "activation_bytes": st["activations"],
        "logits_bytes": st["loss"],
        "recompute_working_bytes": st["working"],
        "heaviest_stage": st["heaviest"],
        "layer_activation_bytes": st["first_in_flight"],
        "memory_bytes": memory,
        "usable_bytes": np.broadcast_to(usable, np.shape(memory)),
        "fits": memory <= usable,
    }


def _stage_memory(job: Job, x: SimpleNamespace, spb, spb_expert) -> dict:
    """The first, a middle and the last pipeline device: each one's parameters and its
    activations at its peak; the heaviest of them (0, 1, 2) and its figures.

    The first stage holds the embedding and the most micro-batches in flight, the last the
    output layer and, at the loss, its logits (LOSS_PEAK_BYTES_PER_VOCAB); a middle stage may
    hold more layers. Rebuilding a layer in the backward makes its whole activation set live
    once — after the loss's buffers are freed, so the last stage peaks at the larger of the
    two."""
    sh, s = x.sh, job.seq_len
    kept = activation_bytes_per_token_layer(sh, s, x.tf, x.sp, x.rc, job.attention, job.dropout)
    # FP8 linear layers keep their inputs for the backward as the FP8 cast (1 byte, not 2).
    kept = kept - np.where(x.fp8, fp8_saved_input_bytes(sh, x.tf, x.sp) * (1 - x.rc_linear), 0)
    kept_full = activation_bytes_per_token_layer(sh, s, x.tf, x.sp, 2, job.attention, job.dropout)
    whole = activation_bytes_per_token_layer(sh, s, x.tf, x.sp, 0, job.attention, job.dropout)
    working = np.where(recompute.rebuilds_whole_layers(x.rc), whole * x.tokens_mb, 0.0)
    loss = LOSS_PEAK_BYTES_PER_VOCAB[job.loss] * x.tokens_mb * sh.vocab / x.tf

    def in_flight(layers, held):
        rebuilt = recompute.layers_rebuilt(x.rc, layers)
        return held * x.tokens_mb * (rebuilt * kept_full + (layers - rebuilt) * kept)

    first_l, mid_l, last_l = x.stage_layers
    held = pipeline_stages.held_per_layer(x.pf, x.vf, x.m)
    flights = [in_flight(n, h) for n, h in zip(x.stage_layers, held, strict=True)]
    emb = x.emb / x.tf
    dense = (first_l * x.dense_layer / x.tf + emb, mid_l * x.dense_layer / x.tf,
             last_l * x.dense_layer / x.tf + emb)  # fmt: skip
    acts = (flights[0] + working, flights[1] + working, flights[2] + np.maximum(loss, working))
    experts_layer = sh.params_experts_layer / x.epf
    totals = [
        d * spb + n * experts_layer / x.tf * spb_expert + a
        for d, n, a in zip(dense, x.stage_layers, acts, strict=True)
    ]
    totals[0] = np.where(x.pf > 1, totals[0], 0.0)
    totals[1] = np.where(x.pf > 2, totals[1], 0.0)
    heaviest = np.argmax(np.broadcast_arrays(*totals), axis=0)

    def pick(values):
        return np.choose(heaviest, np.broadcast_arrays(*values))

    loss_peaks = (heaviest == 2) & (loss >= working)
    return {
        "heaviest": heaviest,
        "dense": pick(dense),
        "layers": pick(x.stage_layers),
        "activations": pick(acts),
        "loss": np.where(loss_peaks, loss, 0.0),
        "working": np.where(loss_peaks, 0.0, working),
        "first_in_flight": flights[0],
    }


# ---- one plan, validated and explained --------------------------------------------------


# The parts of a plan's memory per device and of its step time, as PlanResult keeps them.
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
    # Communication hidden behind compute (not in `time`, whose parts sum to the step):
    # tensor-parallel, context-parallel ring, data-parallel (gradients, ZeRO-3 gathers).
    hidden: dict[str, float] = field(default_factory=dict)
    # Layers on the first, a middle and the last pipeline device; the stage whose memory is
    # the peak (`memory` is that stage's).
    stages: dict = field(default_factory=dict)
    recompute_s: float = 0.0  # rebuilding activations: inside `time`, not added to it
    recompute_detail: dict = field(default_factory=dict)  # what is kept, what rebuilt

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
            "why_slower": why_slower or None,
            "notes": list(self.notes),
        }


def evaluate_plan(job: Job, cluster, plan: Plan) -> PlanResult:
    notes = check_plan(job, cluster, plan)
    r = evaluate_arrays(job, cluster, plans_to_arrays([plan]))
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


def bubble_fraction(p: int, m: int, v: int = 1) -> float:
    """Pipeline bubble over ideal compute: (p-1)/(v·m)."""
    return (p - 1) / (v * m)
