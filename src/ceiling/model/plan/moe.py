"""Mixture-of-experts terms of a training plan: what routing a token to its experts costs
beyond the expert FLOPs themselves.

A routed MoE layer runs, per micro-batch on one device (Megatron-Core's MoE layer with the
alltoall or DeepEP "flex" dispatcher; Liu et al. 2025, "MoE Parallel Folding", arXiv
2504.14960, section 3):

1. the router: a GEMM h × E (counted in the linear FLOPs: `TransformerConfig.params_router`)
   and its softmax/sigmoid and top-k over the E logits in fp32 (memory-bound);
2. permutation: each token copied once per chosen expert (top-k copies), grouped by
   destination rank; after the dispatch the received rows sorted by local expert; the
   reverse (unpermutation) and the weighted sum of the k outputs after the combine;
3. the dispatch and combine all-to-alls over the ep ranks of the expert-parallel group, each
   byte on the link it crosses (NVLink inside a node, the NIC across nodes); DeepEP-style
   node-limited routing sends a token once per destination node, to at most N nodes
   (DeepSeek-AI 2024, DeepSeek-V3 technical report, section 3.2.2: M = 4 nodes);
4. the experts' grouped GEMM: each local expert multiplies the rows routed to it — a few
   hundred tokens each for fine-grained experts — so its output tiles are partly empty and its
   tiles fill the SMs in few waves (tile and wave quantisation, `grouped_gemm_efficiency`);
   its K loops are short (K = the expert's width, a few hundred) against each tile's fixed
   part (`k_loop_share`), and Transformer Engine launches one GEMM per local expert
   (`grouped_launch_floor_s`);
5. the busiest expert rank sets the pace: its rows over the even share (`IMBALANCE`).

Parallel folding (arXiv 2504.14960, section 3.1): the expert layers take their own layout,
ETP × EP × expert-DP over the same t·cp·d ranks of a pipeline stage that the attention splits
as TP × CP × DP, so ep·etp must divide t·cp·d (not d alone), and the expert weights' gradients
reduce (and their optimizer state shards) over the t·cp·d/(ep·etp) ranks that hold them.

Every function accepts numpy arrays for the plan fields.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ceiling.model.collectives import ring_gather_s

# The busiest expert rank's routed rows over the even share, by default. Dropless routing with
# an auxiliary balance loss leaves the experts unevenly loaded; token-dropping routers cap
# every expert at a capacity factor times its share (Fedus et al. 2021, Switch Transformer,
# section 2.2: 1.0-1.25; Megatron-Core's --moe-expert-capacity-factor). We take the capacity
# factor 1.25 as the default skew of the busiest rank; `Job.moe_imbalance` replaces it with a
# measured one (1.0: forced balance, as Megatron-Core's --moe-router-force-load-balancing).
IMBALANCE = 1.25

# How the dispatch and combine move tokens between the expert ranks: "alltoall" (NCCL's
# all-to-all: every one of a token's k copies sent to its rank, Megatron-Core's alltoall
# dispatcher) or "deepep" (DeepEP's kernels, Megatron-Core's flex dispatcher: a token crosses
# the network once per destination node and is forwarded inside it over NVLink).
DISPATCHERS = ("alltoall", "deepep")

# Routing logits, probabilities and their gradients are fp32 (Megatron-Core's
# --moe-router-dtype fp32, the DeepSeek-V3 and Qwen3 recipes): bytes per element.
_ROUTER_ELEMENT = 4.0
# A top-k choice is kept as a probability (fp32) and an index (int64): bytes per choice.
_ROUTER_CHOICE = 12.0
# The auxiliary balance loss's passes over the fp32 logits (`routing_bytes_per_token`).
_AUX_LOSS_PASSES = 3.0


@dataclass(frozen=True)
class Moe:
    """A model's expert layout: the numbers the MoE terms need (per model, not per plan)."""

    experts: int  # routed experts per MoE layer (1: a dense model)
    top_k: int  # routed experts per token
    moe_ffn: int  # FFN width of one routed expert
    shared: int  # shared experts every token passes through (0: none)
    shared_ffn: int  # FFN width of one shared expert
    dense_ffn: int  # FFN width of a dense layer (first-k dense, or between MoE layers)
    moe_layers: int  # layers with routed experts
    layers: int
    ffn_mats: int  # 2 (GELU: up, down) or 3 (SwiGLU: gate, up, down)
    hidden: int
    bias: bool
    # Group-limited routing (DeepSeek's n_group, topk_group): the experts in `groups` groups,
    # a token's experts from at most `groups_per_token` of them (0: any).
    groups: int = 1
    groups_per_token: int = 0

    @property
    def routed(self) -> bool:
        return self.experts > 1 and self.moe_layers > 0

    @property
    def moe_share(self) -> float:
        """Share of the layers that route (1 for Mixtral, 58/61 for DeepSeek-V3)."""
        return self.moe_layers / self.layers if self.routed else 0.0

    @property
    def params_routed_expert(self) -> float:
        """One routed expert's FFN weights (and biases)."""
        return _ffn_params(self.ffn_mats, self.hidden, self.moe_ffn, self.bias)

    @property
    def params_routed_layer(self) -> float:
        """Routed experts' weights per layer, averaged over all layers (dense ones at 0)."""
        return self.experts * self.params_routed_expert * self.moe_share if self.routed else 0.0

    @property
    def routed_matmul_per_token(self) -> float:
        """Routed-expert weights a token multiplies per layer, averaged over all layers."""
        return self.top_k * self.ffn_mats * self.hidden * self.moe_ffn * self.moe_share

    @property
    def ffn_active_width(self) -> float:
        """FFN width a token passes through per layer, averaged over the layers: k routed
        experts and the shared ones in MoE layers, the dense FFN elsewhere."""
        if not self.routed:
            return float(self.dense_ffn * max(self.top_k, 1))
        moe = self.top_k * self.moe_ffn + self.shared * self.shared_ffn
        dense = self.dense_ffn * (self.layers - self.moe_layers)
        return (moe * self.moe_layers + dense) / self.layers

    @property
    def dense_ffn_width(self) -> float:
        """FFN width outside the routed experts per layer, averaged: shared experts in the MoE
        layers, the dense FFN in the others (what runs as ordinary tensor-parallel GEMMs)."""
        return self.ffn_active_width - self.top_k * self.moe_ffn * self.moe_share


def _ffn_params(mats: int, hidden: int, width: int, bias: bool) -> float:
    return float(mats * hidden * width + ((mats - 1) * width + hidden if bias else 0))


def moe_of(model) -> Moe:
    """The one place the planner reads a config's mixture-of-experts fields.

    Fields a config may not have yet read as their dense default: shared experts (0), the
    routed expert's width (`moe_ffn_hidden`, else `ffn_hidden`), the shared expert's width,
    the first k dense layers and MoE every n-th layer (`moe_layers`)."""
    experts = int(model.experts)
    top_k = int(model.active_experts)
    mats = 2 if model.ffn_kind == "gelu" else 3
    moe_ffn = int(getattr(model, "moe_ffn_hidden", None) or model.ffn_hidden)
    shared = int(getattr(model, "shared_experts", 0) or 0)
    shared_ffn = int(getattr(model, "shared_ffn_hidden", None) or moe_ffn)
    moe_layers = getattr(model, "moe_layers", None)
    if moe_layers is None:
        moe_layers = model.layers if experts > 1 else 0
    # A dense model's FFN is its "one active expert"; a MoE model's dense layers (if any) use
    # ffn_hidden, the routed experts moe_ffn_hidden.
    return Moe(
        experts=experts,
        top_k=top_k,
        moe_ffn=moe_ffn,
        shared=shared,
        shared_ffn=shared_ffn,
        dense_ffn=int(model.ffn_hidden),
        moe_layers=int(moe_layers),
        layers=int(model.layers),
        ffn_mats=mats,
        hidden=int(model.hidden),
        bias=bool(getattr(model, "bias", False)),
        groups=int(getattr(model, "expert_groups", 1) or 1),
        groups_per_token=int(getattr(model, "expert_groups_per_token", None) or 0),
    )


# ---- the grouped GEMM -------------------------------------------------------------------

# Output tile of the grouped GEMM (rows × columns): CUTLASS grouped GEMM and Transformer
# Engine's te.GroupedLinear on Hopper use 128-row tiles (the wgmma M per warpgroup pair);
# a persistent kernel schedules every expert's tiles over the SMs together.
GROUPED_TILE = (128, 128)

# A GEMM's output tile costs its K loop plus a fixed part (filling the operand pipeline,
# the epilogue that converts and writes the tile): rate(K) = R·K/(K + K0). Two rows of the
# same shape but K (DeepGEMM README, deepseek-ai/DeepGEMM, 2025-02, "Normal GEMMs for dense
# models", FP8 on H800 = the H100 SXM's SMs, M = 4096, N = 7168): 1358 TFLOP/s at
# K = 16384, 1025 at K = 2048, give K0 = 797 (`fixed_tile_k`); the table's other rows at
# M = 4096 follow within 6 % (K = 512: 590, 1536: 990, 7168: 1304). 16-bit GEMMs run the
# K loop at half the FP8 tensor rate for the same fixed part: half the K0.
K_LOOP_ROWS = ((16384, 1358.0), (2048, 1025.0))
# Shares are taken relative to K = 4096, at most 1: the planner's large-GEMM efficiency is
# the share training shapes reach (H100 SXM: 0.75, `clusters.toml`), below the MAMF table's
# largest-shape 0.803, and the 16-bit K loop gives 0.75/0.803 of the longest-K rate at
# K ≈ 4300. Dense layers' GEMMs (K = the hidden size, thousands) keep that efficiency; the
# routed experts' short K loops (K = their width, a few hundred) lose the rest.
K_LOOP_REFERENCE = 4096


def fixed_tile_k(rows=K_LOOP_ROWS) -> float:
    """K0 of rate(K) = R·K/(K + K0) through two (K, rate) rows of one M × N shape:
    r1/r2 = k1·(k2 + K0) / (k2·(k1 + K0))."""
    (k1, r1), (k2, r2) = rows
    return k1 * k2 * (r1 - r2) / (r2 * k1 - r1 * k2)


K0_FP8 = fixed_tile_k()
K0_BF16 = K0_FP8 / 2.0


def k_loop_share(inner, k0):
    """Share of the large-GEMM rate a GEMM with inner dimension K reaches for its tiles'
    fixed part: (K/(K + K0)) / (Kref/(Kref + K0)), at most 1 (`K_LOOP_ROWS`)."""
    k = np.asarray(inner, dtype=float)
    k0 = np.asarray(k0, dtype=float)
    ref = K_LOOP_REFERENCE / (K_LOOP_REFERENCE + k0)
    return np.minimum(1.0, k / (k + k0) / ref)


def tokens_per_expert(tokens_dev, ep, etp, top_k, experts, imbalance):
    """Rows one expert multiplies on the busiest rank per micro-batch: the ep·etp ranks of
    the expert group send it their tokens' copies routed there (tokens × top-k / experts each,
    evenly), the busiest rank `imbalance` times the even share."""
    tokens = np.asarray(tokens_dev, dtype=float)
    group = np.asarray(ep, dtype=float) * np.asarray(etp, dtype=float)
    return tokens * group * top_k / experts * imbalance


def grouped_gemm_efficiency(rows, local_experts, cols, inner, sms, ridge=None, k0=0.0):
    """Share of the large-GEMM rate a grouped GEMM reaches: `local_experts` GEMMs of `rows`
    × `cols` × `inner` each, over its three passes (forward, data gradient, weight gradient).

    Tile quantisation: an expert's rows fill ⌈M/128⌉ tiles, the last partly (M / (⌈M/128⌉·128)
    of the rows computed are real); wave quantisation: the experts' tiles together run in
    ⌈tiles/SMs⌉ waves, the last partly full (tiles / (waves·SMs)). Below the ridge (`ridge`,
    FLOP/byte) a GEMM that streams each expert's weights for few rows is memory-bound: its
    intensity M·N·K/(M·K + K·N + M·N) over the ridge. The weight-gradient GEMMs (K = the rows)
    share the memory bound, their outputs (the weights) fill whole tiles. Each pass loses its
    tiles' fixed part for its own K (`k_loop_share`, `k0` = 0: none): the forward's K is
    `inner`, the data gradient's `cols`, the weight gradient's the rows."""
    rows = np.asarray(rows, dtype=float)
    local = np.asarray(local_experts, dtype=float)
    cols, inner = np.asarray(cols, dtype=float), np.asarray(inner, dtype=float)
    tm, tn = GROUPED_TILE
    row_tiles = np.ceil(np.maximum(rows, 1.0) / tm)
    padding = rows / (row_tiles * tm)
    tiles = row_tiles * np.ceil(cols / tn) * local
    waves = np.ceil(tiles / sms) if sms else 1.0
    fill = tiles / (waves * sms) if sms else 1.0
    fwd = padding * fill
    wgrad_tiles = np.ceil(inner / tm) * np.ceil(cols / tn) * local
    wgrad = wgrad_tiles / (np.ceil(wgrad_tiles / sms) * sms) if sms else np.ones_like(fwd)
    if ridge is not None:
        intensity = rows * cols * inner / (rows * inner + inner * cols + rows * cols)
        roof = np.minimum(1.0, intensity / ridge)
        fwd, wgrad = np.minimum(fwd, roof), np.minimum(wgrad, roof)
    # Forward and data-gradient GEMMs have the forward's output, the weight gradient its own.
    dgrad = fwd * k_loop_share(cols, k0)
    fwd = fwd * k_loop_share(inner, k0)
    wgrad = wgrad * k_loop_share(np.maximum(rows, 1.0), k0)
    return 1.0 / ((1.0 / fwd + 1.0 / dgrad + 1.0 / wgrad) / 3.0)


def routed_gemm_efficiency(moe: Moe, rows, ep, etp, sms, ridge=None, k0=0.0):
    """The routed experts' grouped GEMMs, FLOP-weighted: up (with the gate) M × (mats-1)·F/etp
    × h, down M × h × F/etp, with E/ep local experts."""
    etp = np.asarray(etp, dtype=float)
    local = moe.experts / np.asarray(ep, dtype=float)
    f = moe.moe_ffn / etp
    up_share = (moe.ffn_mats - 1) / moe.ffn_mats
    up = grouped_gemm_efficiency(rows, local, (moe.ffn_mats - 1) * f, moe.hidden, sms, ridge, k0)
    down = grouped_gemm_efficiency(rows, local, moe.hidden, f, sms, ridge, k0)
    return 1.0 / (up_share / up + (1.0 - up_share) / down)


# Transformer Engine's te.GroupedLinear (Megatron-Core's TEGroupedMLP, TE 1.x-2.x on Hopper)
# issues one cuBLAS GEMM per local expert for each of its passes (general_grouped_gemm, spread
# over a few streams): the host launches them one by one, so a grouped linear pass takes at
# least its local experts × the launch-to-launch floor of a small kernel
# (`decode_expected.GPU_KERNEL_FLOOR_S`). Two grouped linears per expert FFN (up with the gate,
# down).
GROUPED_LINEARS = 2


def grouped_launch_floor_s(moe: Moe, ep, passes, floor_s):
    """Seconds one MoE layer's grouped GEMMs take at least per micro-batch: `passes` passes
    (forward, data and weight gradient, a recomputed forward) of GROUPED_LINEARS grouped
    linears, each E/ep GEMM launches of `floor_s`."""
    local = moe.experts / np.asarray(ep, dtype=float)
    return GROUPED_LINEARS * np.asarray(passes, dtype=float) * local * floor_s


# ---- memory-bound routing kernels --------------------------------------------------------


def routing_bytes_per_token(moe: Moe, ep):
    """HBM bytes the routing kernels of one MoE layer move per token on the device that
    routes it: (forward, backward), before the moe_share average.

    Router (Megatron-Core TopKRouter, fp32): logits written, softmax read and written, top-k
    read, k choices written; the auxiliary balance loss scores the logits again (softmax read
    and written, moe_utils.compute_routing_scores_for_aux_loss) and sums the scores over the
    tokens (read): 7 passes over the E logits; its backward about the same. Permutation
    (Megatron-Core moe_utils.permute/unpermute): the token read (2h) and its k copies
    written (2hk); with ep > 1 and more than one local expert the received rows sorted by
    local expert (read and write, 4hk); unpermutation mirrors both and reduces the k weighted
    outputs to one (2hk read, 2h written). The backward moves the same bytes the other way."""
    h, k, e = moe.hidden, moe.top_k, moe.experts
    ep = np.asarray(ep, dtype=float)
    router = (4.0 + _AUX_LOSS_PASSES) * e * _ROUTER_ELEMENT + k * _ROUTER_CHOICE
    sort = np.where((ep > 1) & (e / ep > 1), 4.0 * h * k, 0.0)
    permute = 2.0 * h + 2.0 * h * k + sort
    unpermute = sort + 2.0 * h * k + 2.0 * h
    forward = router + permute + unpermute
    return forward, forward


# ---- the dispatch and combine all-to-alls ---------------------------------------------


def expected_nodes(top_k, nodes):
    """Distinct nodes, other than its own, a token's top-k experts lie on when spread evenly
    over `nodes` nodes: (n-1)·(1 - (1 - 1/n)^k)."""
    n = np.maximum(np.asarray(nodes, dtype=float), 1.0)
    return (n - 1.0) * (1.0 - (1.0 - 1.0 / n) ** top_k)


def group_node_limit(moe: Moe, nodes):
    """Nodes a token's experts can lie on under group-limited routing, the experts laid in
    order over the expert group's `nodes` nodes: a group spans max(nodes/groups, 1) of them,
    so `groups_per_token` groups reach at most that many times over (DeepSeek-V3: 4 of 8
    groups, one a node on EP64's 8 nodes: at most 4 nodes); inf without group limits."""
    nodes = np.asarray(nodes, dtype=float)
    if moe.groups <= 1 or not moe.groups_per_token or moe.groups_per_token >= moe.groups:
        return np.full_like(nodes, np.inf)
    return moe.groups_per_token * np.maximum(nodes / moe.groups, 1.0)


def all_to_all_time(moe: Moe, tokens_dev, ep, etp, per_node, intra, inter, dedup, node_limit=0):
    """Seconds of one dispatch (or combine) all-to-all of a device's routed tokens, 16-bit.

    The ep ranks of the group are etp apart (Megatron-Core orders expert ranks ETP, EP,
    expert-DP), g = node/etp of them per node when the group spans nodes. A token's k copies
    go to experts spread evenly over the group: (g-1)/ep of them over NVLink, (ep-g)/ep over
    the NIC (NCCL's all-to-all sends every copy). DeepEP (`dedup`) sends each token once per
    destination node — the expected distinct other nodes of k evenly routed copies, at most
    `node_limit` (node-limited routing, DeepSeek-V3 section 3.2.2: 4) and the model's group
    limit (`group_node_limit`) — and forwards it inside
    the node over NVLink. Both links work at once (NCCL posts all peers' sends together): the slower
    sets the time, plus one start-up each."""
    tokens = np.asarray(tokens_dev, dtype=float)
    ep, etp = np.asarray(ep, dtype=float), np.asarray(etp, dtype=float)
    row = 2.0 * moe.hidden
    copies = tokens * moe.top_k * row
    span = ep * etp > per_node
    in_node = np.where(span, np.maximum(per_node / etp, 1.0), ep)
    nodes = ep / in_node
    intra_bytes = copies * (in_node - 1.0) / ep
    nccl_inter = copies * (ep - in_node) / ep
    limit = np.minimum(node_limit if node_limit else np.inf, group_node_limit(moe, nodes))
    deepep_inter = tokens * row * np.minimum(expected_nodes(moe.top_k, nodes), limit)
    inter_bytes = np.where(span, np.where(dedup, deepep_inter, nccl_inter), 0.0)
    (intra_bw, intra_lat), (inter_bw, inter_lat) = intra, inter
    t_intra = np.where(ep > 1, intra_bytes / intra_bw + intra_lat, 0.0)
    t_inter = np.where(span, inter_bytes / inter_bw + inter_lat, 0.0)
    return np.maximum(t_intra, t_inter)


def etp_gather_time(moe: Moe, tokens_dev, etp, bw, lat):
    """Expert tensor parallelism: the routed rows gathered over the etp ranks before the
    experts and reduce-scattered after (Megatron-Core's expert TP group), one of each."""
    rows = np.asarray(tokens_dev, dtype=float) * moe.top_k * 2.0 * moe.hidden
    etp = np.asarray(etp, dtype=float)
    return 2.0 * ring_gather_s(rows * etp, etp, bw, lat)
