"""The plans one pass evaluates, as arrays (one entry per plan), and what every cost term
needs from them: micro-batches, tokens per micro-batch, the layers and parameters of the most
loaded device, what recomputation rebuilds.

`Layout.plan` holds every axis of `axes.AXES` under its Plan field name, so a new axis reaches
the terms (`memory`, `compute`, `communication`, `pipeline`) without a line here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, make_dataclass

import numpy as np

from ceiling.model.plan import moe, pipeline, recompute
from ceiling.model.plan.axes import AXES, FP8, KERNELS, Axis
from ceiling.model.plan.costs import Shape, shape_of
from ceiling.model.plan.moe import DISPATCHERS

# Every axis as an array, named as its Plan field: counts as floats (for the arithmetic),
# switches as bools, choices and recompute policies as their codes (`Axis.encode`).
PlanArrays = make_dataclass(
    "PlanArrays",
    [(a.field, np.ndarray) for a in AXES],
    frozen=True,
    namespace={"__module__": __name__, "__doc__": "Every plan axis as an array."},
)


def _column(a: Axis, plans: Mapping) -> np.ndarray:
    values = np.asarray(plans.get(a.key, a.encode(a.default)))
    if a.is_switch:
        return values.astype(bool)
    return values if a.choices or a.codec is not None else values.astype(float)


@dataclass(frozen=True)
class Layout:
    """The plans' axes and what every term needs, per plan (numpy arrays, broadcasting)."""

    sh: Shape
    plan: PlanArrays  # every axis, by its Plan field name
    sp: np.ndarray  # sequence parallelism in effect: on, and t > 1
    fp8: np.ndarray  # the linear layers' GEMMs in FP8
    fp8_params: np.ndarray  # FP8 linear weights kept in FP8 only (fp8 on as well)
    eager: np.ndarray  # every pointwise op its own kernel (kernels=eager)
    m: np.ndarray  # micro-batches per pipeline per step: B/(d·b)
    tokens_mb: np.ndarray  # tokens of a micro-batch on one context-parallel rank: b·s/cp
    # Layers on the first, a middle and the last device; the last is the most loaded in time
    # (its layers, the output layer and the loss), `layers_dev`.
    stage_layers: tuple[np.ndarray, np.ndarray, np.ndarray]
    layers_dev: np.ndarray
    # What the backward rebuilds (`recompute.rebuilt_shares`): share of the linear FLOPs, of
    # the layers' attention cores, of their pointwise kernels; collectives per layer.
    rc_linear: np.ndarray
    rc_attention: np.ndarray
    rc_pointwise: np.ndarray
    rc_collectives: np.ndarray
    # Embedding (and untied head) parameters on an end device; with DualPipe both the table
    # and an untied output layer (stages 0 and p-1 share the end devices; DeepSeek-V3's
    # multi-token-prediction module shares them too).
    emb: np.ndarray
    copies: np.ndarray  # copies of a stage's layers a device holds: 2 with DualPipe, else 1
    dense_layer: float  # a layer's parameters that are not experts
    dense_dev: np.ndarray  # the most loaded device's dense parameters (over t)
    etp: np.ndarray  # expert tensor parallelism in effect (the etp axis, 0 meaning t)
    expert_dev: np.ndarray  # its routed experts' parameters (over ep·etp)
    dg: np.ndarray  # ranks holding the same weights, over which gradients reduce: d·cp
    dz: np.ndarray  # of them, the ZeRO shard group (HSDP: `shard`; else all dg)
    d_expert: np.ndarray  # the same for routed expert weights: t·cp·d/(ep·etp)
    moe_imbalance: float  # the busiest expert rank's rows over the even share (1: dense)
    moe_dedup: np.ndarray  # DeepEP's dispatch (the dispatcher axis): once per destination node
    moe_node_limit: int  # at most this many destination nodes (0: no limit)

    @property
    def params_dev(self) -> np.ndarray:
        return self.dense_dev + self.expert_dev

    def linear_params(self, layers=None):
        """Linear-layer weights on the most loaded device, or on one holding `layers` layers
        (all its experts included), every copy it holds (`copies`)."""
        sh = self.sh
        held = (self.layers_dev if layers is None else layers) * self.copies
        experts = sh.params_experts_layer / (self.plan.ep * self.etp)
        return held * (self._dense_matmul() / self.plan.t + experts)

    def dense_linear_params(self):
        """The linear weights of the dense (not expert) part of the most loaded device."""
        return self.copies * self.layers_dev * self._dense_matmul() / self.plan.t

    def _dense_matmul(self) -> float:
        """A layer's linear weights outside the routed experts (attention, router, shared
        experts, dense FFN), averaged over the layers."""
        sh = self.sh
        routed = sh.moe.routed_matmul_per_token if sh.moe is not None and sh.moe.routed else 0.0
        return sh.params_layer_matmul_active - routed


def layout_of(job, plans: Mapping) -> Layout:
    """The Layout of plans given as candidate arrays keyed by axis (`axes.plans_to_arrays`,
    `search.enumerate_plans`); an axis left out takes its default."""
    sh = shape_of(job.model)
    x = PlanArrays(**{a.field: _column(a, plans) for a in AXES})
    stage_layers = pipeline.stage_layers(
        sh.layers, x.p, x.v, x.first_stage_layers, x.last_stage_layers
    )
    layers_dev = stage_layers[2]
    rc_linear, rc_attention, rc_pointwise, rc_collectives = recompute.rebuilt_shares(
        sh, x.recompute, layers_dev
    )
    copies = np.where(x.dualpipe, 2.0, 1.0)
    emb = np.where(x.p > 1, sh.params_embedding_stage, sh.params_embedding_single)
    emb = emb * np.where(sh.tied_embeddings, 1.0, copies)
    dense_layer = sh.params_layer - sh.params_experts_layer
    fp8 = x.fp8 == FP8.index("linear")
    etp = np.where(x.etp == 0, x.t, x.etp)
    return Layout(
        sh=sh,
        plan=x,
        sp=x.sequence_parallel & (x.t > 1),
        fp8=fp8,
        fp8_params=fp8 & x.fp8_params,
        eager=x.kernels == KERNELS.index("eager"),
        m=job.global_batch / (x.d * x.micro_batch),
        tokens_mb=x.micro_batch * job.seq_len / x.cp,
        stage_layers=stage_layers,
        layers_dev=layers_dev,
        rc_linear=rc_linear,
        rc_attention=rc_attention,
        rc_pointwise=rc_pointwise,
        rc_collectives=rc_collectives,
        emb=emb,
        copies=copies,
        dense_layer=dense_layer,
        dense_dev=(copies * layers_dev * dense_layer + emb) / x.t,
        etp=etp,
        expert_dev=copies * layers_dev * sh.params_experts_layer / (x.ep * etp),
        # Gradients are reduced, and ZeRO shards, over the d·cp ranks holding the same
        # weights (Megatron-Core's data-parallel group with context parallelism); the routed
        # experts' over the t·cp·d/(ep·etp) ranks of their expert-data-parallel group (MoE
        # parallel folding, arXiv 2504.14960, section 3.1).
        dg=x.d * x.cp,
        dz=np.where(x.shard == 0, x.d * x.cp, x.shard),
        d_expert=x.t * x.d * x.cp / (x.ep * etp),
        moe_imbalance=_imbalance(job, sh),
        moe_dedup=x.dispatcher == DISPATCHERS.index("deepep"),
        moe_node_limit=job.moe_node_limit,
    )


def _imbalance(job, sh: Shape) -> float:
    if sh.moe is None or not sh.moe.routed:
        return 1.0
    return float(job.moe_imbalance if job.moe_imbalance is not None else moe.IMBALANCE)
