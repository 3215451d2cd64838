"""Memory per device of a training plan, on its heaviest pipeline stage: weights, gradients
and optimizer state (ZeRO-sharded), activations of the micro-batches in flight with the
loss's logits or a rebuilt layer at their peak, ZeRO-3 gathers and FP8 weight copies.

Every function takes the plans' `Layout`. Notation and sources: see `ceiling.model.plan.step`;
per-piece formulas: `ceiling.model.plan.costs`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ceiling.model.plan import pipeline, recompute
from ceiling.model.plan.costs import (
    activation_bytes_per_token_layer,
    fp8_activation_savings,
    state_bytes_per_param,
    state_pieces_per_param,
)
from ceiling.model.plan.layout import Layout

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


@dataclass(frozen=True)
class Memory:
    """Bytes per device on the heaviest stage, its parts, and whether it fits."""

    layer_state_bytes: np.ndarray  # weights, gradients and optimizer state of the layers
    state_bytes: np.ndarray  # = weight + gradient + optimizer
    weight_bytes: np.ndarray
    gradient_bytes: np.ndarray
    optimizer_bytes: np.ndarray
    gathered_weight_bytes: np.ndarray  # ZeRO-3's gathered layers
    fp8_weight_bytes: np.ndarray  # FP8 weight copies (or transposes)
    activation_bytes: np.ndarray  # at the peak, logits or a rebuilt layer included
    logits_bytes: np.ndarray  # of them the loss's, when it sets the peak
    recompute_working_bytes: np.ndarray  # of them a rebuilt layer's, when it sets the peak
    heaviest_stage: np.ndarray  # 0 first, 1 middle, 2 last
    layer_activation_bytes: np.ndarray  # the first stage's micro-batches in flight
    memory_bytes: np.ndarray
    usable_bytes: np.ndarray
    fits: np.ndarray


@dataclass(frozen=True)
class StageMemory:
    """The heaviest of the first, a middle and the last device, and its figures."""

    heaviest: np.ndarray  # 0, 1, 2
    dense: np.ndarray  # its dense parameters
    layers: np.ndarray
    activations: np.ndarray
    loss: np.ndarray
    working: np.ndarray
    first_in_flight: np.ndarray


def memory(job, cluster, x: Layout) -> Memory:
    """Bytes per device on the most loaded stage (`_stage_memory`): weights, gradients and
    optimizer state (ZeRO-sharded), activations of the micro-batches in flight with the
    loss's logits or a rebuilt layer at their peak, ZeRO-3 buffers."""
    sh = x.sh
    spb = state_bytes_per_param(x.plan.state_bytes_per_param, x.plan.zero, x.dz)
    spb_expert = state_bytes_per_param(x.plan.state_bytes_per_param, x.plan.zero, x.d_expert)
    # A layer's routed experts on one device: split over the ep·etp ranks of the expert group.
    experts_layer = sh.params_experts_layer / (x.plan.ep * x.etp)
    layer_state = (
        x.copies * x.layers_dev * (x.dense_layer * spb / x.plan.t + experts_layer * spb_expert)
    )
    st = _stage_memory(job, x, spb, spb_expert)
    dense_dev, expert_dev = st.dense, x.copies * st.layers * experts_layer
    state_bytes = dense_dev * spb + expert_dev * spb_expert
    pieces = zip(
        state_pieces_per_param(x.plan.state_bytes_per_param, x.plan.zero, x.dz),
        state_pieces_per_param(x.plan.state_bytes_per_param, x.plan.zero, x.d_expert),
        strict=True,
    )
    pieces = list(pieces)
    weight_bytes, grad_bytes, optim_bytes = (dense_dev * a + expert_dev * e for a, e in pieces)
    # ZeRO-3 holds the gathered 16-bit weights of the unit it runs and of the next: two
    # blocks, or at the loss the output layer with the last block (FSDP keeps the root
    # module's weights, the output layer among them, gathered from forward into backward).
    block = x.dense_layer / x.plan.t + experts_layer
    head = sh.vocab * sh.hidden / x.plan.t
    fsdp = x.plan.zero == 3
    gathered = np.where(fsdp, 2.0 * (block + np.maximum(block, head)), 0.0)
    gathered = np.where(
        fsdp & (x.plan.p > 1), held_stage_bytes(x, dense_dev + expert_dev), gathered
    )
    # FP8 (Transformer Engine 1.x, linear.py) keeps each linear weight's 16-bit copy and, over
    # a step's micro-batches, its FP8 cast and that cast's transpose (Hopper's FP8 GEMMs take
    # one layout; the backward's dgrad needs the other): 2 bytes more. With fp8_params
    # (te.fp8_model_init) the weight is the FP8 tensor itself, 1 byte in place of 2, a view
    # into the distributed optimizer's uint8 parameter buffer (NeMo distributed_adam.py), and
    # only its transpose is cached (Float8Tensor.transpose_2d(cache=True)); the fp32 master
    # stays in the optimizer state (NeMo sets store_params for fp8_params).
    linear = x.linear_params(st.layers)
    fp8_weights = np.where(x.fp8, np.where(x.fp8_params, 1.0, 2.0) * linear, 0.0)
    # FSDP casts its shard (torchao's float8 all-gather: the shard cast before the gather,
    # the gathered FP8 weights in the gathered buffers counted above): no whole FP8 copy.
    fp8_weights = np.where(fsdp, fp8_weights / x.dz, fp8_weights)
    kept_in_fp8 = np.where(x.fp8_params, linear * pieces[0][0] / 2.0, 0.0)
    weight_bytes, state_bytes = weight_bytes - kept_in_fp8, state_bytes - kept_in_fp8
    memory = state_bytes + st.activations + gathered + fp8_weights
    usable = cluster.memory_bytes * (1.0 - job.headroom)
    return Memory(
        layer_state_bytes=layer_state,
        state_bytes=state_bytes,
        weight_bytes=weight_bytes,
        gradient_bytes=grad_bytes,
        optimizer_bytes=optim_bytes,
        gathered_weight_bytes=gathered,
        fp8_weight_bytes=fp8_weights,
        activation_bytes=st.activations,
        logits_bytes=st.loss,
        recompute_working_bytes=st.working,
        heaviest_stage=st.heaviest,
        layer_activation_bytes=st.first_in_flight,
        memory_bytes=memory,
        usable_bytes=np.broadcast_to(usable, np.shape(memory)),
        fits=memory <= usable,
    )


def held_stage_bytes(x: Layout, stage_params):
    """FSDP with a pipeline, as torchtitan runs it (torch.distributed.pipelining's
    PipelineStage over fully_shard): the stage's weights are not resharded after the forward
    (torchtitan's apply_fsdp: no per-micro-batch all-gathers) nor after any backward but the
    last (set_reshard_after_backward(False)), and the gradients are not reduce-scattered
    until then (set_requires_gradient_sync(False)): the stage holds its whole 16-bit weights
    and its unsharded gradients, accumulated in the reduce dtype (fp32: 4 bytes; 2 with 16-bit
    gradients, state_bytes=16), from the first micro-batch to the last."""
    grads = np.where(x.plan.state_bytes_per_param == 16, 2.0, 4.0)
    return stage_params * (2.0 + grads)


def _stage_memory(job, x: Layout, spb, spb_expert) -> StageMemory:
    """The first, a middle and the last pipeline device: each one's parameters and its
    activations at its peak; the heaviest of them (0, 1, 2) and its figures.

    The first stage holds the embedding and the most micro-batches in flight, the last the
    output layer and, at the loss, its logits (LOSS_PEAK_BYTES_PER_VOCAB); a middle stage may
    hold more layers. Rebuilding a layer in the backward makes its whole activation set live
    once — after the loss's buffers are freed, so the last stage peaks at the larger of the
    two."""
    sh, s = x.sh, job.seq_len
    kept = activation_bytes_per_token_layer(
        sh, s, x.plan.t, x.sp, x.plan.recompute, job.attention, job.dropout
    )
    # FP8 linear layers keep their inputs for the backward as the FP8 cast (1 byte, not 2);
    # fp8_acts keeps more in FP8 (`fp8_activation_savings`).
    kept = kept - fp8_activation_savings(
        sh, x.plan.t, x.sp, x.plan.recompute, x.rc_linear, x.fp8, x.plan.fp8_activations
    )
    kept_full = activation_bytes_per_token_layer(
        sh, s, x.plan.t, x.sp, 2, job.attention, job.dropout
    )
    whole = activation_bytes_per_token_layer(sh, s, x.plan.t, x.sp, 0, job.attention, job.dropout)
    working = np.where(recompute.rebuilds_whole_layers(x.plan.recompute), whole * x.tokens_mb, 0.0)
    loss = LOSS_PEAK_BYTES_PER_VOCAB[job.loss] * x.tokens_mb * sh.vocab / x.plan.t

    def in_flight(layers, held):
        rebuilt = recompute.layers_rebuilt(x.plan.recompute, layers)
        return held * x.tokens_mb * (rebuilt * kept_full + (layers - rebuilt) * kept)

    first_l, mid_l, last_l = x.stage_layers
    held = pipeline.held_per_layer(x.plan.p, x.plan.v, x.m, x.stage_layers)
    # DualPipe: every device holds p + 1 micro-batches of one stage's layers (technical
    # report, Table 2): device k, p - k of the forward direction and k + 1 of the reverse.
    held = tuple(np.where(x.plan.dualpipe, x.plan.p + 1.0, h) for h in held)
    flights = [in_flight(n, h) for n, h in zip(x.stage_layers, held, strict=True)]
    emb = x.emb / x.plan.t
    dense_layer = x.copies * x.dense_layer / x.plan.t
    dense = (first_l * dense_layer + emb, mid_l * dense_layer, last_l * dense_layer + emb)
    # With DualPipe the first device also ends the reverse pipeline: it computes the loss.
    first_loss = np.where(x.plan.dualpipe, np.maximum(loss, working), working)
    acts = (flights[0] + first_loss, flights[1] + working, flights[2] + np.maximum(loss, working))
    experts_layer = sh.params_experts_layer / (x.plan.ep * x.etp)
    totals = [
        d * spb + x.copies * n * experts_layer * spb_expert + a
        for d, n, a in zip(dense, x.stage_layers, acts, strict=True)
    ]
    totals[0] = np.where(x.plan.p > 1, totals[0], 0.0)
    totals[1] = np.where(x.plan.p > 2, totals[1], 0.0)
    heaviest = np.argmax(np.broadcast_arrays(*totals), axis=0)

    def pick(values):
        return np.choose(heaviest, np.broadcast_arrays(*values))

    loss_peaks = ((heaviest == 2) | ((heaviest == 0) & x.plan.dualpipe)) & (loss >= working)
    return StageMemory(
        heaviest=heaviest,
        dense=pick(dense),
        layers=pick(x.stage_layers),
        activations=pick(acts),
        loss=np.where(loss_peaks, loss, 0.0),
        working=np.where(loss_peaks, 0.0, working),
        first_in_flight=flights[0],
    )
