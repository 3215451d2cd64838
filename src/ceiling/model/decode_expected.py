"""Expected decode speed: what a real engine pays beyond the ceiling's bytes / bandwidth.

The ceiling (`ceiling.model.decode`) is a strict bound: every byte at the datasheet
bandwidth, nothing else. A serving engine also pays, per decode step:

1. Bandwidth a streaming kernel actually reaches: a share of the datasheet figure on HBM
   (`BANDWIDTH_SHARE`, 0.80 over the published runs; an A100-80GB streams ≈1.7 of its
   2.039 TB/s); 1 when the bandwidth was measured on this machine.
2. A floor per kernel for `KERNELS_PER_LAYER` kernels per layer (norm, QKV, rotary,
   attention, output projection, residual, norm, gate/up, activation, down) plus a few
   outside the layers. Launched one by one (eager), each costs the launch-to-launch floor,
   measured on this machine (`ceiling bench overhead`) or an assumed `GPU_KERNEL_FLOOR_S`.
   Replayed from a CUDA graph — what vLLM, SGLang, TensorRT-LLM and gpt-fast's
   `reduce-overhead` compile do for decode on NVIDIA GPUs — the host's launch is gone and
   only the GPU's own gap between graph nodes remains (`GRAPH_KERNEL_GAP_S`).
3. Quantised weights: a 4-bit format with group size G stores its scales (and zero points)
   per G weights, read with them (`QUANT_FORMATS`: gpt-fast int4 groups of 32 with a 16-bit
   scale and zero; AWQ and GPTQ groups of 128; MXFP4 blocks of 32 sharing one 8-bit
   scale), and dequantises every weight on the vector units before the multiply:
   `DEQUANT_OPS` instructions per weight at the vector instruction rate, half the fp32
   FLOP peak (which counts a fused multiply-add as 2 FLOPs).
4. Tensor parallelism: two all-reduces per layer, latency α and bandwidth as the planner
   prices them (`ceiling.model.collectives`, via the decode ceiling's rows).
5. KV reads: the cache at the context, as in the ceiling, at the reachable bandwidth.

6. Compute: matrix-multiply FLOPs at the dense peak × the share large GEMMs reach on the
   device (`matmul_efficiency`, the planner's figure from clusters.toml, × its FP8 ratio
   for FP8 GEMMs); only large batches and prefill come near it.

The weight-streaming GEMMs and the attention over the cache are separate kernels that run
one after the other, so each is held by its own roof and their times add:

    step = max(weight bytes / bandwidth', GEMM FLOPs / GEMM rate)
           + max(KV bytes / bandwidth', attention FLOPs / attention rate)
           + dequantisation + kernels × (floor, or the graph gap) + all-reduces

(bandwidth' = bandwidth × share). At context 0 and batch 1 this is the single roofline.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from ceiling.errors import InvalidInput, UnsupportedOnDevice
from ceiling.vocabulary import dtype_bytes

# HBM streaming share of the datasheet figure: a declared fitted constant, what the refit rule
# gives over every published decode and serving run (0.80), near gpt-fast's A100 (≈1.7 of
# 2.039 TB/s, 0.83)
BANDWIDTH_SHARE = 0.80
KERNELS_PER_LAYER = 10
KERNELS_OUTSIDE_LAYERS = 4  # embedding, final norm, output head, sampling
GPU_KERNEL_FLOOR_S = 5e-6  # launch-to-launch time of a small kernel on a data-center GPU
# Inside a CUDA graph the host does not launch each kernel; the GPU still drains one node
# and starts the next. Assumption: about 1 µs, the order of the GPU-side dispatch gap
# between dependent kernels (a fifth of the eager floor above).
GRAPH_KERNEL_GAP_S = 1e-6
INT4_GROUP_SIZE = 32
SCALE_ZERO_BYTES = 4.0  # a 16-bit scale and a 16-bit zero point per group
DEQUANT_OPS = {"int4": 4.0, "int8": 2.0}  # unpack, convert, subtract zero, scale


@dataclass(frozen=True)
class QuantFormat:
    """A weight-only quantisation format: stored bits, group size, bytes of scales per group."""

    name: str
    dtype: str  # what the decode ceiling counts the weights as
    group_size: int
    scale_bytes: float  # per group: scales and zero points
    source: str


# The 4-bit formats `weights=` accepts by name, each with its layout's source.
QUANT_FORMATS = {
    "int4": QuantFormat(
        "int4", "int4", 32, SCALE_ZERO_BYTES,
        "gpt-fast quantize.py int4 (tinygemm): groupsize 32 by default, bf16 scale and zero",
    ),
    "awq": QuantFormat(
        "awq", "int4", 128, SCALE_ZERO_BYTES,
        "AutoAWQ / vLLM AWQ checkpoints: q_group_size 128, fp16 scale and zero per group",
    ),
    "gptq": QuantFormat(
        "gptq", "int4", 128, 2.5,
        "AutoGPTQ / vLLM GPTQ checkpoints: group_size 128, fp16 scale and a 4-bit packed zero",
    ),
    "mxfp4": QuantFormat(
        "mxfp4", "int4", 32, 1.0,
        "OCP Microscaling Formats (MX) v1.0: blocks of 32 FP4 (E2M1) values share one E8M0 scale",
    ),
}  # fmt: skip


def quant_format(weights: str | None) -> QuantFormat | None:
    """The 4-bit format a `weights` name means (int4, awq, gptq, mxfp4), or None for a dtype."""
    if weights is None:
        return None
    return QUANT_FORMATS.get(str(weights).strip().lower().replace("-", "").replace("_", ""))


@dataclass(frozen=True)
class EngineCosts:
    """What the expected figure assumes about the engine and device."""

    bandwidth_share: float = BANDWIDTH_SHARE
    per_kernel_s: float = GPU_KERNEL_FLOOR_S
    kernels_per_layer: float = KERNELS_PER_LAYER  # an eager forward: its ops, counted
    kernels_outside_layers: float = KERNELS_OUTSIDE_LAYERS
    group_size: int = INT4_GROUP_SIZE
    scale_bytes: float = SCALE_ZERO_BYTES  # per group of 4-bit weights
    cuda_graphs: bool = False  # kernels replayed from a graph: the graph gap, not the floor
    graph_kernel_s: float = GRAPH_KERNEL_GAP_S
    matmul_efficiency: float = 1.0  # share of the dense peak GEMMs reach
    attention_efficiency: float = 1.0  # share of the 16-bit peak fused attention reaches
    attention_peak_flops_per_s: float | None = None  # None: the multiplies' peak
    vector_peak_flops_per_s: float | None = None  # for dequantisation; None: not counted
    # the bandwidth bytes move at, when it is known better than the ceiling's × share (the
    # last-level cache's, measured, when the weights fit in it)
    memory_bandwidth_bytes_per_s: float | None = None
    # on a CPU, the measured GEMM rate by rows, as (rows, FLOP/s) knots (`model.gemm_rows`):
    # a serving iteration's GEMMs at their rows' rate, not at the peak; None: at the peak
    gemm_rows_rates: tuple[tuple[float, float], ...] | None = None

    def __post_init__(self) -> None:
        if not 0 < self.bandwidth_share <= 1:
            raise InvalidInput(f"bandwidth share must be in (0, 1], got {self.bandwidth_share}")
        if self.per_kernel_s < 0 or self.group_size < 1:
            raise InvalidInput("per-kernel time must be ≥ 0 and the group size ≥ 1")
        if not 0 < self.matmul_efficiency <= 1:
            raise InvalidInput(f"matmul efficiency must be in (0, 1], got {self.matmul_efficiency}")

    @property
    def kernel_s(self) -> float:
        """What each kernel costs beyond its work: the graph gap, or the launch floor."""
        return self.graph_kernel_s if self.cuda_graphs else self.per_kernel_s


@dataclass(frozen=True)
class ExpectedRow:
    batch: int
    quant_bytes: float  # scales and zero points read beside the weights
    memory_s: float  # all bytes at the reachable bandwidth
    compute_s: float  # all FLOPs at their rates
    gemm_s: float  # the weight-streaming multiplies: max(bytes, FLOPs) of their roof
    attention_s: float  # the attention over the cache: max(bytes, FLOPs) of its roof
    dequant_s: float
    activation_s: float  # activations between the GEMMs (`activation_bytes_per_token`)
    kernels: int
    launch_s: float
    comm_s: float
    step_s: float
    tokens_per_s: float
    ceiling_tokens_per_s: float
    limited_by: str  # the largest term: memory, compute, dequantisation, launches, all-reduce


# Output tiles inference GEMM kernels choose among (rows × columns): the training tiles of
# the planner (`ceiling.model.plan.costs.GEMM_TILES`) and the 64-row tiles CUTLASS and
# cuBLAS use for skinny GEMMs, so that a batch of a few tokens pads to 64 rows, not 128.
INFERENCE_GEMM_TILES = ((64, 128), (128, 128), (128, 256), (256, 128))
# A GEMM of a few rows (decode at a small batch) runs as a skinny, split-K kernel (cuBLAS's
# GEMV and small-M paths, Marlin, tinygemm): it pads its rows only to the tensor cores' MMA
# instruction, 16 rows (mma.m16n8k16), and splits the long reduction over the SMs, so its
# columns do not quantise into waves. Up to this many rows such kernels are chosen.
SKINNY_ROWS = 16
MMA_ROWS = 16


SPLIT_K_MIN = 256  # a split-K slice keeps at least this much of the reduction


@functools.lru_cache(maxsize=65536)
def tile_utilisation(rows, cols, sms: int | None, k: int | None = None) -> float:
    """Useful share of an M×N GEMM's tiles over `sms` SMs: a skinny GEMM (≤ SKINNY_ROWS rows)
    pads only to the MMA's 16 rows; otherwise padding and wave quantisation, best over
    INFERENCE_GEMM_TILES (the planner's `gemm_tile_utilisation` with these tiles). Given the
    reduction length `k`, a GEMM of fewer tiles than SMs splits its reduction over the idle
    ones (split-K / stream-K, as cuBLAS and CUTLASS do for such shapes), in slices of at least
    SPLIT_K_MIN."""
    if not sms:
        return 1.0
    if rows <= SKINNY_ROWS:
        return rows / (math.ceil(rows / MMA_ROWS) * MMA_ROWS)
    best = 0.0
    for tm, tn in INFERENCE_GEMM_TILES:
        tr, tc = math.ceil(rows / tm), math.ceil(cols / tn)
        tiles = tr * tc
        splits = max(1, min(sms // tiles, int(k) // SPLIT_K_MIN)) if k else 1
        waves = math.ceil(tiles * splits / sms)
        best = max(best, rows * cols / (tiles * tm * tn) * tiles * splits / (waves * sms))
    return best


def gemm_seconds(cfg, tp: int, tokens: float, sampled: float, rate: float, sms) -> float:
    """The multiplies of a forward pass over `tokens` tokens (`sampled` of them through the
    output head) on one of `tp` devices, each GEMM at `rate` × its tile utilisation, layer
    kind by layer kind (their FLOPs sum to 2·tokens·`params_blocks_matmul_active`):
    every layer's attention projections (QKV and output; MLA's compressions and
    up-projections as one GEMM of their width); a dense layer's FFN up (and gate) and down;
    a mixture-of-experts layer's routed experts, each over tokens × k / E rows, the reached
    experts' tiles sharing the SMs, its shared experts over every token, and its router."""
    if tokens <= 0:
        return 0.0
    h = cfg.hidden
    attention = sum(
        fl / tile_utilisation(r, c, sms, round(k))
        for r, c, k, fl in _attention_gemms(cfg, tp, tokens)
    )
    per_layer = cfg.layers * attention
    if cfg.dense_ffn_layers:
        per_layer += cfg.dense_ffn_layers * _ffn_seconds(cfg, tp, tokens, cfg.ffn_hidden, 1, sms)
    if cfg.moe_layers:
        e, experts = cfg.active_experts, cfg.experts
        per_expert = max(tokens * e / experts, 1.0)
        reached = experts_reached(cfg, tokens)
        moe = _ffn_seconds(cfg, tp, per_expert, cfg.expert_ffn_hidden, reached, sms,
                           flop_rows=tokens * e)  # fmt: skip
        if cfg.shared_experts:
            width = cfg.shared_experts * cfg.shared_expert_ffn_hidden
            moe += _ffn_seconds(cfg, tp, tokens, width, 1, sms)
        gate = 1 if cfg.shared_expert_gate else 0
        moe += 2.0 * tokens * h * (experts + gate) / tp  # the router (and a shared gate)
        per_layer += cfg.moe_layers * moe
    head = 2.0 * sampled * cfg.vocab * h / tp
    head_u = tile_utilisation(max(sampled, 1), cfg.vocab / tp, sms, h)
    head_s = head / head_u if sampled else 0.0
    return (per_layer + head_s) / rate


def _attention_gemms(cfg, tp: int, tokens: float) -> list[tuple[float, float, float, float]]:
    """(rows, columns per device, reduction length, FLOPs per device) of a layer's attention
    projections: QKV and output for MHA/GQA; MLA's as one GEMM of their total width."""
    h = cfg.hidden
    if cfg.attention == "mla":
        cols = cfg.params_attention_matmul / h / tp
        return [(tokens, cols, h, 2.0 * tokens * cfg.params_attention_matmul / tp)]
    q, kv = cfg.q_dim, cfg.kv_dim
    return [
        (tokens, (q + 2 * kv) / tp, h, 2.0 * tokens * h * (q + 2 * kv) / tp),
        (tokens, h, q / tp, 2.0 * tokens * q * h / tp),
    ]


def _ffn_seconds(cfg, tp, rows, width, copies, sms, flop_rows=None) -> float:
    """FLOPs over tile utilisation of `copies` FFNs of `width` side by side (the experts a
    batch reaches), each over `rows` rows, `flop_rows` token rows in all (default rows):
    up (and gate, one GEMM) then down, split over `tp` devices."""
    h = cfg.hidden
    flop_rows = rows if flop_rows is None else flop_rows
    up = (1 if cfg.ffn_kind == "gelu" else 2) * width / tp  # gated: gate and up together
    up_s = 2.0 * flop_rows * h * up / tile_utilisation(rows, up * copies, sms, h)
    down = width / tp
    down_s = 2.0 * flop_rows * down * h / tile_utilisation(rows, h * copies, sms, round(down))
    return up_s + down_s


def activation_bytes_per_token(cfg, tp: int, act_bytes: float) -> float:
    """Bytes one token's activations move through memory, per device, in the kernels
    between the GEMMs and the attention (neither of which counts them: a GEMM's activations
    hide under its weights or its FLOPs). Counted kernel by kernel, per layer, in units of
    one activation vector of the width named:
      norm and residual: each layer reads the residual stream and the sublayer's output and
        writes both back before attention and before the FFN (fused add + RMSNorm):
        8 × hidden, on every device (the residual stream is not split by tensor parallelism);
      rotary embedding: reads and writes the queries and keys, 2 × (q + kv) / tp (MLA: only
        their rotary parts, the heads' a·d_rope / tp and the one shared key's d_rope);
      the FFN's activation: reads the gate and up outputs and writes their product,
        3 × ffn / tp (2 × for a GELU FFN, no gate; a MoE layer: of its k routed and its
        shared experts' widths);
      a MoE layer's token permutation, as TensorRT-LLM's expand and finalize kernels run
        it: copies each token to its k experts (reads 1, writes k) and sums their outputs
        back (reads k, writes 1): 2 × (k + 1) × hidden (an engine that gathers the rows
        inside the GEMM, as vLLM's fused MoE does, moves about half of it).
    At a large batch of prompt tokens these are a sizeable share of an iteration once
    tensor parallelism has split the GEMMs and not the residual stream.

    The planner counts the same kernels of a training step in
    `plan.costs.layer_elementwise_bytes_per_token` and `plan.moe.routing_bytes_per_token`,
    as Megatron runs them: norms and bias-dropout-residual adds unfused (20·h a layer
    forward, not 8·h), dropout masks, a backward, and all-to-all dispatch for experts. The
    two counts are kept apart for those differences; a change to one kernel's traffic
    belongs in both."""
    h, passes = cfg.hidden, cfg.ffn_mats  # gated: gate and up read, product written
    if cfg.attention == "mla":
        rope = cfg.heads * cfg.qk_rope_head_dim / tp + cfg.qk_rope_head_dim
    else:
        rope = (cfg.q_dim + cfg.kv_dim) / tp
    total = cfg.layers * (8 * h + 2 * rope) + cfg.dense_ffn_layers * passes * cfg.ffn_hidden / tp
    if cfg.moe_layers:
        k = cfg.active_experts
        width = k * cfg.expert_ffn_hidden + cfg.shared_experts * cfg.shared_expert_ffn_hidden
        total += cfg.moe_layers * (passes * width / tp + 2 * (k + 1) * h)
    return total * act_bytes


def experts_reached(cfg, tokens: float) -> float:
    from ceiling.model.decode import experts_touched

    return experts_touched(cfg, max(round(tokens), 1))


def expected_rows(
    ceiling, layers: int, costs: EngineCosts, compute_s: dict | None = None, cfg=None, sms=None
) -> list[ExpectedRow]:
    """Expected speed beside each row of a DecodeCeiling that fits in memory (`layers`: the
    model's); `compute_s`: a better compute time per batch (matmuls at their measured
    rates); `cfg` and `sms`: the model and the device's SM count, for GEMMs at their tile
    utilisation."""
    weights = ceiling.dtypes.weights
    w_bytes = {"int4": 0.5, "int8": 1.0}.get(weights)
    kernels = layers * costs.kernels_per_layer + costs.kernels_outside_layers
    out = []
    for r in (row for row in ceiling.rows if row.fits):
        # the weights dequantised before the multiply: every weight read when the weights
        # are integers, else the routed experts a model stores in fewer bits (MXFP4)
        read = getattr(r, "weights_read", 0.0) or (r.weight_bytes / w_bytes if w_bytes else 0.0)
        narrow = getattr(r, "narrow_weights_read", 0.0)
        quantised = read if w_bytes else narrow
        # a 4-bit format's scales, for the weights it stores (experts stored narrower than
        # the format keep their own)
        fmt_weights = quantised - narrow
        quant = fmt_weights * costs.scale_bytes / costs.group_size if weights == "int4" else 0.0
        bandwidth = (
            costs.memory_bandwidth_bytes_per_s
            or ceiling.bandwidth_bytes_per_s * costs.bandwidth_share
        )
        w_mem = (r.weight_bytes + quant) / bandwidth
        kv_mem = (r.bytes_per_step - r.weight_bytes) / bandwidth
        peak = ceiling.peak_flops_per_s
        attn_rate = (costs.attention_peak_flops_per_s or peak) * costs.attention_efficiency
        attn_c = r.attention_flops / attn_rate
        rate = peak * costs.matmul_efficiency
        if cfg is not None:
            gemm_c = gemm_seconds(cfg, ceiling.tp, r.batch, r.batch, rate, sms)
        else:
            gemm_c = (r.flops_per_step - r.attention_flops) / rate
        if compute_s and r.batch in compute_s:  # measured matmul rates: one compute figure
            gemm_c, attn_c = compute_s[r.batch], 0.0
        act = 0.0
        if cfg is not None:
            act_bytes = dtype_bytes(ceiling.dtypes.activations)
            act = r.batch * activation_bytes_per_token(cfg, ceiling.tp, act_bytes) / bandwidth
        gemm, attention = max(w_mem, gemm_c), max(kv_mem, attn_c)
        memory, compute = w_mem + kv_mem + act, gemm_c + attn_c
        dequant = 0.0
        if quantised and costs.vector_peak_flops_per_s:
            ops = fmt_weights * DEQUANT_OPS.get(weights, 0.0) + narrow * DEQUANT_OPS["int4"]
            dequant = ops / vector_ops_per_s(costs)
        launch = kernels * costs.kernel_s
        step = gemm + attention + act + dequant + launch + r.comm_time_s
        terms = {
            "memory": memory,
            "compute": compute,
            "dequantisation": dequant,
            "launches": launch,
            "all-reduce": r.comm_time_s,
        }
        out.append(
            ExpectedRow(
                batch=r.batch,
                quant_bytes=quant,
                memory_s=memory,
                compute_s=compute,
                gemm_s=gemm,
                attention_s=attention,
                dequant_s=dequant,
                activation_s=act,
                kernels=kernels,
                launch_s=launch,
                comm_s=r.comm_time_s,
                step_s=step,
                tokens_per_s=r.batch / step,
                ceiling_tokens_per_s=r.tokens_per_s,
                limited_by=max(terms, key=lambda k: terms[k]),
            )
        )
    return out


def vector_ops_per_s(costs: EngineCosts) -> float:
    """Dequantisation instructions per second: the fp32 FLOP peak counts a fused
    multiply-add as 2 FLOPs, while unpacking, converting and scaling issue one instruction
    per lane each."""
    return costs.vector_peak_flops_per_s / 2.0


def graphs_by_default(spec) -> bool:
    """Whether serving engines replay decode from CUDA graphs on this device: on NVIDIA GPUs
    (vLLM, SGLang, TensorRT-LLM capture decode batches by default; gpt-fast compiles with
    `mode="reduce-overhead"`). Elsewhere (CPUs; AMD GPUs, whose HIP graph replay in the
    releases of the published runs still dispatched node by node) each kernel pays the floor."""
    return getattr(spec, "kind", "") == "gpu" and str(getattr(spec, "vendor", "")) == "NVIDIA"


def costs_for(
    spec,
    per_kernel_s: float | None = None,
    weights: str | None = None,
    compute: str = "bf16",
    gemm_rows_rates: tuple[tuple[float, float], ...] | None = None,
    kernels: tuple[float, float] | None = None,
) -> EngineCosts:
    """The engine costs on a device: its bandwidth at the streaming share unless it was
    measured here (a machine profile's device), the given per-kernel floor (measured: the
    kernels are launched eagerly, as here) or the assumed one, CUDA graphs where engines use
    them, dequantisation at its vector rate, the scales of the 4-bit format `weights` names
    (default gpt-fast int4), GEMMs in the `compute` dtype at the planner's share of its peak
    and attention at the planner's attention share of the 16-bit peak (a measured device's
    peak is already what its kernels reach). `kernels`: (per layer, outside the layers) in
    place of the fused engine's count (an eager forward's ops, counted)."""
    measured = str(getattr(spec, "key", "")).startswith("measured")
    per_layer, outside = kernels or (KERNELS_PER_LAYER, KERNELS_OUTSIDE_LAYERS)
    try:
        vector = spec.peak("fp32")
    except UnsupportedOnDevice:  # no fp32 figure: dequantisation is not counted
        vector = None
    fmt = quant_format(weights) or QUANT_FORMATS["int4"]
    return EngineCosts(
        bandwidth_share=1.0 if measured else bandwidth_share(),
        per_kernel_s=GPU_KERNEL_FLOOR_S if per_kernel_s is None else per_kernel_s,
        group_size=fmt.group_size,
        scale_bytes=fmt.scale_bytes,
        cuda_graphs=per_kernel_s is None and not measured and graphs_by_default(spec),
        matmul_efficiency=1.0 if measured else matmul_share(spec, compute),
        attention_efficiency=1.0 if measured else attention_share(spec),
        attention_peak_flops_per_s=_sixteen_bit_peak(spec),
        vector_peak_flops_per_s=vector,
        gemm_rows_rates=gemm_rows_rates,
        kernels_per_layer=per_layer,
        kernels_outside_layers=outside,
    )


def bandwidth_share() -> float:
    """The HBM streaming share of the datasheet bandwidth (a declared fitted constant)."""
    from ceiling.model import fitted

    return fitted.value("decode.bandwidth_share", BANDWIDTH_SHARE)


def matmul_share(spec, compute: str = "bf16") -> float:
    """The share of the dense peak large GEMMs reach on the device (clusters.toml): the
    16-bit share, times the published FP8/16-bit ratio for FP8 GEMMs."""
    from ceiling.model.cluster import node_defaults

    d = node_defaults(getattr(spec, "key", "default"))
    share = float(d["matmul_efficiency"])
    if compute == "fp8":
        share = min(1.0, share * float(d.get("fp8_matmul_ratio", 1.0)))
    return share


def attention_share(spec) -> float:
    """The share of the 16-bit peak fused attention kernels reach (clusters.toml)."""
    from ceiling.model.cluster import node_defaults

    # as the planner reads it: the device's entry, else the generic default's
    d = node_defaults(getattr(spec, "key", "default"))
    return float(d.get("attention_efficiency", node_defaults("default")["attention_efficiency"]))


def _sixteen_bit_peak(spec) -> float | None:
    """Attention multiplies in 16 bits (an FP8 KV cache is widened first)."""
    for d in ("bf16", "fp16", "fp32"):
        if d in spec.peak_flops_per_s:
            return spec.peak(d)
    return None


def decoder_matmuls(cfg, batch: int) -> list[tuple[tuple[int, int, int], int]]:
    """(M, N, K) and count of the matmuls of one decode step of the built-in decoder: per
    layer Q, KV, output, FFN up (gate and up together when gated) and down; the head."""
    up = 2 * cfg.ffn_hidden if cfg.ffn_kind == "swiglu" else cfg.ffn_hidden
    per_layer = [
        (cfg.q_dim, cfg.hidden),
        (2 * cfg.kv_dim, cfg.hidden),
        (cfg.hidden, cfg.q_dim),
        (up, cfg.hidden),
        (cfg.hidden, cfg.ffn_hidden),
    ]
    out = [((batch, n, k), cfg.layers) for n, k in per_layer]
    return [*out, ((batch, cfg.vocab, cfg.hidden), 1)]


def compute_with_rates(cfg, ceiling, rates: dict) -> dict[int, float]:
    """Compute time per batch: the decoder's matmuls at their measured rates, the rest
    (attention over the cache, elementwise) at the peak."""
    out = {}
    for r in ceiling.rows:
        matmuls = decoder_matmuls(cfg, r.batch)
        if any(shape not in rates for shape, _ in matmuls):
            continue
        flops = sum(2.0 * m * n * k * count for (m, n, k), count in matmuls)
        at_rates = sum(2.0 * m * n * k * count / rates[(m, n, k)] for (m, n, k), count in matmuls)
        rest = max(r.flops_per_step - flops, 0.0) / ceiling.peak_flops_per_s
        out[r.batch] = at_rates + rest
    return out


def decode_bars(batch: int, ceiling_tokens_per_s: float, expected: ExpectedRow, measured_s: float):
    """From the ceiling to a measured decode step, in bars that sum to `measured_s`."""
    from ceiling.model.waterfall import Bar

    at_ceiling = batch / ceiling_tokens_per_s
    moved = max(expected.memory_s, expected.compute_s) + expected.comm_s
    bars = [
        Bar("the ceiling (bytes at the roof bandwidth, FLOPs at peak)", at_ceiling, "nothing"),
        Bar(
            "bytes at the bandwidth reached (cache or DRAM), beyond the ceiling",
            moved - at_ceiling,
            "smaller weights (int8/int4), a larger batch to share each read",
        ),
        Bar("dequantisation", expected.dequant_s, "a fused dequantising kernel"),
        Bar(
            f"per-op overhead ({expected.kernels} ops × the per-op floor)",
            expected.launch_s,
            "CUDA graphs or torch.compile: fewer, fused ops",
        ),
        Bar(
            "unexplained (measured − expected)",
            measured_s - expected.step_s,
            "threads, small kernels below their roof, a busy machine",
        ),
    ]
    return [b for b in bars if b.seconds or b.name != "dequantisation"]
