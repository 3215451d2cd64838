"""What one piece of a training step costs: parameters, bytes of state and activations,
FLOPs, memory traffic of the non-matmul kernels, and ring collectives.

Pure formulas over a transformer's shape; every one accepts numpy arrays for the plan
fields (t, sp, recompute, ...), so `step.evaluate_arrays` prices thousands of plans at
once. Notation and sources: see `ceiling.model.plan.step`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ceiling.model.attention import attention_flops
from ceiling.model.plan.moe import Moe, moe_of
from ceiling.model.plan.recompute import (
    LAYERS_BASE,
    OPS_BASE,
    attention_widths_saved,
    mla_latent_bytes,
    ops_activation_bytes,
    ops_kept,
    routed_copy_bytes,
)

# ---- shapes ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    """The numbers of a TransformerConfig that cost memory, FLOPs and traffic."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn_hidden: int
    ffn_mats: int  # 2 for GELU (up, down), 3 for SwiGLU (gate, up, down)
    vocab: int
    experts: int
    active_experts: int
    params_layer: float  # all experts
    params_experts_layer: float  # the experts' FFNs of one block (0 for a dense model)
    params_layer_matmul_active: float  # weights a token multiplies in one block
    params_embedding_stage: float  # table (+ untied head when p = 1) (+ learned positions)
    params_embedding_single: float  # all embedding parameters when p = 1
    params_total: float
    tied_embeddings: bool
    q_dim: int  # heads × head_dim (TransformerConfig.q_dim)
    kv_dim: int  # kv_heads × head_dim
    rmsnorm: bool = True  # RMSNorm (written as ops in eager PyTorch) or LayerNorm (one kernel)
    rotary: bool = True  # rotary embedding applied to Q and K (not learned positions)
    # attention's score and value widths (TransformerConfig.attention_widths; MLA's differ
    # from q_dim), and the share of blocks that attend within a window of `window` keys
    score_dim: int = 0  # 0: q_dim
    value_dim: int = 0  # 0: q_dim
    local_share: float = 0.0
    window: float = float("inf")
    # FFN width a token passes through per layer, averaged over the layers (`Moe`): f for a
    # dense model, k routed experts' plus the shared ones' for a mixture-of-experts.
    ffn_active: float = 0.0
    moe: Moe | None = None  # the expert layout (routed experts, shared, dense layers)
    # Multi-head latent attention (DeepSeek-V2 section 2.1; 0: not MLA): the query latent's
    # width (0 also where the query is not compressed), the key-value latent's, and the rotary
    # key's that every head shares.
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    rope_dim: int = 0


def shape_of(model) -> Shape:
    positions = model.max_seq * model.hidden if model.learned_positions else 0
    moe = moe_of(model)
    return Shape(
        layers=model.layers,
        hidden=model.hidden,
        heads=model.heads,
        kv_heads=model.kv_heads,
        head_dim=model.head_dim,
        # a MoE model's FFN is its routed expert's (dense first layers and shared experts
        # count in the per-block means below)
        ffn_hidden=model.expert_ffn_hidden if model.experts > 1 else model.ffn_hidden,
        ffn_mats=2 if model.ffn_kind == "gelu" else 3,
        vocab=model.vocab,
        experts=model.experts,
        active_experts=model.active_experts,
        params_layer=float(model.params_layer),
        params_experts_layer=moe.params_routed_layer,
        params_layer_matmul_active=float(model.params_layer_matmul_active),
        # With p > 1 the first stage holds the table (and positions), the last the head
        # (a copy of the table when tied) and the final norm; either way about V·h.
        params_embedding_stage=float(model.vocab * model.hidden + positions + model.params_norm),
        params_embedding_single=float(model.params_embedding + model.params_norm),
        params_total=float(model.params_total),
        tied_embeddings=model.tied_embeddings,
        q_dim=model.q_dim,
        kv_dim=model.kv_dim,
        rmsnorm=model.norm == "rmsnorm",
        rotary=not model.learned_positions,
        score_dim=model.attention_widths[0],
        value_dim=model.attention_widths[1],
        local_share=model.local_layers / model.layers,
        window=float(model.sliding_window or float("inf")),
        ffn_active=moe.ffn_active_width,
        moe=moe,
        **_mla_ranks(model),
    )


def _mla_ranks(model) -> dict:
    if model.attention != "mla":
        return {}
    return dict(
        q_lora_rank=model.q_lora_rank or 0,
        kv_lora_rank=model.kv_lora_rank,
        rope_dim=model.qk_rope_head_dim,
    )


# ---- memory ---------------------------------------------------------------------------


def state_bytes_per_param(convention, zero, d):
    """Bytes of weights + gradients + optimizer state per parameter on one device.

    16: 2 (16-bit weights) + 2 (16-bit gradients) + 12 (fp32 master, momentum, variance).
    18: gradients kept in fp32 (4). 14: fp32 gradients, the Adam moments in BF16 (fp32 master
    4 + 2 + 2 = 8; DeepSeek-V3 technical report, section 3.3.2). ZeRO stage 1 shards the
    optimizer state over d, 2 also the gradients, 3 also the weights (ZeRO-1: 4 + 12/d,
    ZeRO-2: 2 + 14/d, ZeRO-3: 16/d for 16 B/param).
    """
    weights, grads, optim = state_pieces_per_param(convention, zero, d)
    return weights + grads + optim


def state_pieces_per_param(convention, zero, d):
    """(weights, gradients, optimizer state) bytes per parameter on one device."""
    convention, zero, d = np.asarray(convention), np.asarray(zero), np.asarray(d, dtype=float)
    grad = np.where(convention == 16, 2.0, 4.0)
    adam = np.where(convention == 14, 8.0, 12.0)
    weights = np.where(zero >= 3, 2.0 / d, 2.0)
    grads = np.where(zero >= 2, grad / d, grad)
    optim = np.where(zero >= 1, adam / d, adam)
    return weights, grads, optim


def activation_bytes_per_token_layer(sh: Shape, seq_len, t, sp, recompute, attention, dropout):
    """Bytes one layer keeps for the backward pass, per token of a micro-batch, one device.

    Korthikanti et al. 2022 Table 2 for GPT (q = k = h, f = 4h, GELU): s·b·h·(34 + 5·a·s/h)
    unsplit; tensor parallelism divides the 24·sbh of Q, K, V, the projection input and the
    FFN, and the 5·a·s²·b of the scores, by t; sequence parallelism divides the remaining
    10·sbh (layer-norm inputs, block inputs, dropout masks) too; selective recompute drops the
    scores; full recompute keeps only the block input, 2·sbh. Here: K and V have width k
    (grouped-query attention, never below one head per device), the FFN keeps 2·f per matrix
    input per active expert, and FlashAttention keeps no scores (only fp32 row statistics).
    Multi-head latent attention keeps Q and K of a·(d_nope + d_rope), V and the output of a·d_v
    (`recompute.attention_widths_saved`) and its two latents with their norms' outputs
    (`recompute.mla_latent_bytes`).
    `recompute`: 0 none, 1 selective, 2 full, or a `recompute` module code (arrays allowed).

    Checked term by term against the fused kernels of Megatron-Core with Transformer Engine,
    which keep the same tensors: a fused layer norm + GEMM (LayerNormLinear, LayerNormMLP)
    keeps the norm's input (with its fp32 mean and inverse deviation, 8 bytes per token, not
    counted) and its output for the weight gradient — with sequence parallelism the sequence
    shard, gathered again in the backward; the attention kernel keeps Q, K and V (after the
    rotary embedding; the fused QKV GEMM's own output is not kept apart) and its output, which
    is the output projection's input, counted once; the MLP keeps FC1's output and the
    activation's output (FC2's input); the fused bias-dropout-add keeps a 1-byte mask; fused
    attention dropout regenerates its mask from the RNG state. The loss's logits are priced
    apart (`memory.LOSS_PEAK_BYTES_PER_VOCAB`).
    """
    t = np.asarray(t, dtype=float)
    sp = np.asarray(sp, dtype=bool) & (t > 1)
    h = sh.hidden
    drop = 1.0 if dropout else 0.0
    q, k, v, o = attention_widths_saved(sh, t)
    # Unsplit pieces: two layer-norm inputs, their outputs (the attention and MLP inputs),
    # two dropout masks.
    unsplit = 2 * h + 2 * h + 2 * h + 2 * h + 2 * drop * h
    split = (
        2 * (q + k + v)  # Q, K, V as the attention kernel keeps them
        + 2 * o  # its output, the output projection's input
        + mla_latent_bytes(sh)  # MLA: the latents, their norms' inputs and outputs
        + 2 * sh.ffn_mats * sh.ffn_active / t  # FFN matrix inputs
        + routed_copy_bytes(sh) / t  # the experts' inputs: a token's k copies after dispatch
    )
    if attention == "flash":
        scores = 4.0 * sh.heads / t  # fp32 log-sum-exp per row
        selective_drop = 0.0
    else:
        # softmax output 2, dropout mask 1 and dropout output 2 bytes per score
        scores = (2.0 + 3.0 * drop) * sh.heads * np.asarray(seq_len, dtype=float) / t
        selective_drop = scores
    unsplit_dev = np.where(sp, unsplit / t, unsplit)
    full = unsplit_dev + split + scores
    rc = np.asarray(recompute)
    kept_input = np.where(sp, 2.0 * h / t, 2.0 * h)
    ops = ops_activation_bytes(sh, seq_len, t, sp, rc, attention, dropout)
    kept = np.where(rc == 2, kept_input, np.where(rc == 1, full - selective_drop, full))
    # ops:... keeps the chosen outputs; layers:N counts as none here (`memory.memory`
    # rebuilds N layers of each stage).
    return np.where((rc >= OPS_BASE) & (rc < LAYERS_BASE), ops, kept)


def layers_per_device(layers, p, v):
    """Layers on the most loaded device: v chunks of ceil(l/(p·v)) layers (l/p when even)."""
    p, v = np.asarray(p, dtype=float), np.asarray(v, dtype=float)
    return np.ceil(layers / (p * v) - 1e-9) * v


def in_flight_layers(layers, p, v, m):
    """Layers' worth of activations the first pipeline stage holds at its peak.

    1F1B: min(p, m) micro-batches of its l/p layers (= l when m ≥ p). Interleaved: that
    times 1 + (p-1)/(p·v) (Korthikanti et al. 2022, section 4.2.3).
    """
    p, v, m = (np.asarray(x, dtype=float) for x in (p, v, m))
    base = np.minimum(p, m) * layers_per_device(layers, p, v)
    return np.where(v > 1, base * (1.0 + (p - 1.0) / (p * v)), base)


# ---- FLOPs and traffic ------------------------------------------------------------------


def layer_forward_flops_per_token(sh: Shape, seq_len):
    """Matmul FLOPs of one block's forward per token: 2 per weight used + 4·q·s for the
    scores and the weighted values (counted over the full s, as PaLM and Megatron do)."""
    return 2.0 * sh.params_layer_matmul_active + layer_attention_flops_per_token(sh, seq_len)


def layer_attention_flops_per_token(sh: Shape, seq_len):
    """Per block (a mean over the blocks): a local block attends to at most its window
    (`TransformerConfig.attended`), MLA over its own score and value widths."""
    s = np.asarray(seq_len, float)
    keys = (1.0 - sh.local_share) * s + sh.local_share * np.minimum(s, sh.window)
    score = sh.score_dim or sh.q_dim
    return attention_flops(1, keys, score, value_width=sh.value_dim or sh.q_dim)


def layer_elementwise_bytes_per_token(sh: Shape, seq_len, t, sp, attention, dropout):
    """HBM bytes one block's non-matmul kernels move, per token: (forward, backward, scores).

    Two layer norms (read 2h, write 2h each), two bias-dropout-residual adds (read 4h,
    write 2h, mask h), the FFN activation (read and write 2·f per matrix input beyond the
    first), and — without FlashAttention — the s×s
    scores: written by Q·Kᵀ (2), softmax read/write (4), dropout read/write/mask (5), read
    by the values product (2), 13·a·s bytes per token with dropout.
    """
    t = np.asarray(t, dtype=float)
    sp = np.asarray(sp, dtype=bool) & (t > 1)
    h = sh.hidden
    drop = 1.0 if dropout else 0.0
    norms_and_residuals = 2 * (4 * h) + 2 * (6 * h + drop * h)
    ffn = 2.0 * sh.ffn_mats * sh.ffn_active
    if attention == "flash":
        scores = 0.0
    else:
        scores = (8.0 + 5.0 * drop) * sh.heads * np.asarray(seq_len, dtype=float)
    split = (ffn + scores) / t
    forward = np.where(sp, norms_and_residuals / t, norms_and_residuals) + split
    # The backward moves about what the forward moves (each kernel reads its saved input and
    # the incoming gradient and writes one gradient; Korthikanti et al. 2022 Table 5 times
    # the backward of a 22B layer at 11.9 ms against 7.7 ms forward, the matmul part alone
    # being 2×). Sequence parallelism saves little there: the backward must gather the
    # layer-norm outputs again for the weight gradients (their section 4.2.2, 19.6 -> 19.0 ms).
    backward = norms_and_residuals + split
    return forward, backward, scores / t


def megatron_hw_flops_per_step(layers, h, V, s, B, recompute_full: bool = True) -> float:
    """Narayanan et al. 2021, eq. 3: 96·B·s·l·h²(1 + s/(6h) + V/(16·l·h)) with full
    recompute; 72·B·s·l·h²(1 + s/(6h) + V/(12·l·h)) without."""
    n = layers
    if recompute_full:
        return 96.0 * B * s * n * h * h * (1 + s / (6 * h) + V / (16 * n * h))
    return 72.0 * B * s * n * h * h * (1 + s / (6 * h) + V / (12 * n * h))


def megatron_model_flops_per_token(model, seq: int) -> float:
    """Model FLOPs per token as Megatron-LM logs them (training.py,
    num_floating_point_operations, 2025): 6 per weight a token multiplies (its top-k experts
    only) and the causal attention scores over half the s×s matrix, 6·q·s per layer; the
    output layer 6·h·V. Its "TFLOPS" figure is this over the step time and the GPUs."""
    linear = 6.0 * model.params_layer_matmul_active
    scores = 6.0 * model.q_dim * seq
    return model.layers * (linear + scores) + 6.0 * model.hidden * model.vocab


# ---- GEMM shapes, attention kernels, FP8 casts, the context-parallel ring ------------------

# Output tiles a GEMM kernel may pick (rows × columns of C per thread block); cuBLAS and
# CUTLASS choose among such shapes per problem. One tile runs on one SM at a time.
GEMM_TILES = ((128, 256), (256, 128), (128, 128))
# Attention is computed in blocks of this many query rows and key columns (FlashAttention).
ATTENTION_BLOCK = 128


def gemm_tile_utilisation(rows, cols, sms):
    """Share of the SMs' work that is useful in an M×N GEMM output, best over GEMM_TILES.

    Two losses, both from tiling: padding (the last tile of a row or column is partly empty:
    M·N over the padded area) and wave quantisation (⌈tiles/SMs⌉ waves run, the last only
    partly full: tiles over waves·SMs). Large training GEMMs lose ~1 %; a skinny or small one
    (few rows per device, or fewer tiles than SMs) loses much more.
    """
    rows, cols = np.asarray(rows, dtype=float), np.asarray(cols, dtype=float)
    best = np.zeros(np.broadcast(rows, cols).shape)
    for tm, tn in GEMM_TILES:
        tr, tc = np.ceil(rows / tm), np.ceil(cols / tn)
        tiles = tr * tc
        padding = rows * cols / (tiles * tm * tn)
        waves = np.ceil(tiles / sms)
        best = np.maximum(best, padding * tiles / (waves * sms))
    return best


def layer_gemm_shapes(sh: Shape, t):
    """(output columns per device, inner dimension, FLOP share) of one block's linear GEMMs
    on one of t tensor-parallel devices: QKV, output projection, FFN up (and gate), FFN down.
    Rows are the micro-batch's tokens on the device."""
    t = np.asarray(t, dtype=float)
    h, q, k = sh.hidden, sh.q_dim, sh.kv_dim
    f = sh.ffn_active
    cols = ((q + 2 * k) / t, h, (sh.ffn_mats - 1) * sh.ffn_hidden / t, h)
    inner = (h, q / t, h, sh.ffn_hidden / t)
    flops = (h * (q + 2 * k), q * h, (sh.ffn_mats - 1) * f * h, f * h)
    total = float(sum(flops))
    return tuple(zip(cols, inner, (x / total for x in flops), strict=True))


def gemm_intensity(rows, cols, inner):
    """FLOPs per byte of an M×N×K GEMM with 16-bit operands read once and the output written
    once: 2·M·N·K / (2·(M·K + K·N + M·N)). The same for the forward, dgrad and wgrad GEMMs of
    a layer (the three dimensions only trade places)."""
    m, n, k = (np.asarray(x, dtype=float) for x in (rows, cols, inner))
    return m * n * k / (m * k + k * n + m * n)


def linear_gemm_efficiency(sh: Shape, tokens, t, sms, ridge=None):
    """One block's linear GEMMs with `tokens` rows: their time at the large-GEMM rate over
    their time as they run, FLOP-weighted (forward shapes; the dgrad has the same output,
    the wgrad the weight's). Each GEMM loses its tile utilisation over `sms` SMs, and one
    whose arithmetic intensity is below `ridge` (the achieved rate over the achieved memory
    bandwidth, FLOP/byte) is bound by memory instead: few tokens per device make skinny
    GEMMs that stream their weights."""
    shape = np.broadcast(np.asarray(tokens), np.asarray(t)).shape
    if not sms and ridge is None:
        return np.ones(shape)
    time = np.zeros(shape)
    for cols, inner, share in layer_gemm_shapes(sh, t):
        fwd = gemm_tile_utilisation(tokens, cols, sms) if sms else 1.0
        wgrad = gemm_tile_utilisation(inner, cols, sms) if sms else 1.0
        if ridge is not None:
            roof = np.minimum(1.0, gemm_intensity(tokens, cols, inner) / ridge)
            fwd, wgrad = np.minimum(fwd, roof), np.minimum(wgrad, roof)
        time = time + share * (2.0 / fwd + 1.0 / wgrad) / 3.0
    return 1.0 / time


def causal_attention_share(seq_len):
    """Share of the full s×s attention FLOPs a causal FlashAttention kernel executes: the
    blocks on or below the diagonal, (s + block)/(2s) (the diagonal blocks run whole)."""
    s = np.asarray(seq_len, dtype=float)
    return np.minimum(1.0, (s + ATTENTION_BLOCK) / (2.0 * s))


# An FP8 cast reads a 16-bit element and writes it twice in FP8 (the tensor and its
# transpose: Hopper's FP8 GEMMs take only the TN layout, so the backward needs both).
FP8_CAST_BYTES = 4.0


def fp8_cast_bytes_per_token(sh: Shape, t):
    """HBM bytes the FP8 casts of one block move per token, forward and backward.

    Forward: every linear layer's input is cast (amax taken in the same pass); backward:
    every linear layer's output gradient. FP8_CAST_BYTES per element each; the weights'
    casts are counted per step (`fp8_weight_cast_bytes`)."""
    t = np.asarray(t, dtype=float)
    h, q, k = sh.hidden, sh.q_dim, sh.kv_dim
    e = sh.active_experts
    f = sh.ffn_active / e
    inputs = h + q / t + e * (h + f / t)
    outputs = (q + 2 * k) / t + h + e * ((sh.ffn_mats - 1) * f / t + h)
    return FP8_CAST_BYTES * inputs, FP8_CAST_BYTES * outputs


def fp8_saved_input_bytes(sh: Shape, t, sp):
    """Bytes per token one block saves by keeping its linear layers' inputs as their FP8
    casts (1 byte an element instead of 2): the two layer-norm outputs (split over t with
    sequence parallelism), the output projection's input and the FFN down projection's."""
    t = np.asarray(t, dtype=float)
    sp = np.asarray(sp, dtype=bool) & (t > 1)
    norms = np.where(sp, 2.0 * sh.hidden / t, 2.0 * sh.hidden)
    return norms + attention_widths_saved(sh, t)[3] + sh.ffn_active / t


# DeepSeek-V3's cached activations (technical report, section 3.3.2): FP8 with an fp32 scale
# per 1×128 tile (section 3.3.1, fine-grained quantization), and the attention output, which
# the backward is most sensitive to, in E5M6 (12 bits).
FP8_TILE_BYTES = 1.0 + 4.0 / 128
E5M6_BYTES = 1.5


def fp8_activation_savings(sh: Shape, t, sp, code, rc_linear, fp8, fp8_acts):
    """Bytes per token one block keeps fewer with FP8 (arrays over plans).

    fp8=linear: each linear layer's saved input is its FP8 cast (`fp8_saved_input_bytes`,
    for the layers the policy does not rebuild); under an ops policy, the inputs it keeps:
    the attention output, the output projection's input.
    fp8_acts (DeepSeek-V3): the FFN's input-projection outputs (the SwiGLU or GELU input)
    and a MoE layer's dispatched copies at FP8_TILE_BYTES, the activation's output rebuilt
    from them and not kept, the attention output at E5M6_BYTES rather than 1."""
    t = np.asarray(t, dtype=float)
    on, attn, ffn, routed = ops_kept(sh, code)
    o_w = attention_widths_saved(sh, t)[3]
    plain = fp8_saved_input_bytes(sh, t, sp) * (1 - rc_linear)
    linear = np.where(on > 0, attn * o_w, plain)
    f, inner = sh.ffn_active / t, sh.ffn_mats - 1.0  # FFN width; its input projections
    copies = routed_copy_bytes(sh) / t
    # Kept before: the projections' outputs 2 bytes (and, without an ops policy, the
    # activation's output as an FP8 cast, 1 byte) and the copies 2; after: FP8 tiles.
    ffn_kept = np.where(on > 0, ffn * 2.0 * f, inner * 2.0 * f + f)
    ffn_fp8 = np.where(on > 0, ffn, inner) * FP8_TILE_BYTES * f
    copies_kept = np.where(on > 0, routed, 1.0) * copies
    acts = (
        ffn_kept
        - ffn_fp8
        + copies_kept * (1.0 - FP8_TILE_BYTES / 2.0)
        - (E5M6_BYTES - 1.0) * o_w * np.where(on > 0, attn, 1.0)
    )
    return np.where(fp8, linear + np.where(fp8_acts, acts, 0.0), 0.0)


# Delayed scaling (Transformer Engine): each FP8 tensor of a linear layer (input, weight,
# output gradient) keeps a history of its amax values, fp32, this long (Megatron-Core and NeMo
# recipes: 1024), rolled and reduced to a new scale after every forward.
FP8_AMAX_HISTORY = 1024
LINEAR_LAYERS_PER_BLOCK = 4  # QKV, output projection, FFN up (with gate), FFN down


def fp8_amax_bytes_per_layer():
    """Bytes one block's amax-history update moves per micro-batch: 3 tensors of each of
    its linear layers, the fp32 history read and written once."""
    return LINEAR_LAYERS_PER_BLOCK * 3 * FP8_AMAX_HISTORY * 4.0 * 2


# Weights kept in FP8 (fp8_params) need only their transpose rebuilt after each update:
# read one FP8 byte, write one.
FP8_TRANSPOSE_BYTES = 2.0


def fp8_weight_cast_bytes(linear_params, fp8_params=False):
    """Bytes to cast a device's linear weights to FP8 once per step (Transformer Engine
    keeps the cast weights over the micro-batches of a step), or, for weights kept in FP8,
    to rebuild their cached transpose (Float8Tensor.transpose_2d with cache, TE 1.x)."""
    per_param = np.where(fp8_params, FP8_TRANSPOSE_BYTES, FP8_CAST_BYTES)
    return per_param * np.asarray(linear_params, dtype=float)


def cp_ring_bytes_per_layer(sh: Shape, tokens, t, cp):
    """Bytes one rank sends in one pass of the context-parallel K/V ring, per layer.

    Each of the cp ranks holds s/cp tokens' K and V (width k, one KV head per device at
    least, 16-bit); the ring passes them on cp-1 times so every rank sees all K/V:
    (cp-1)/cp × 2·b·s·k·2 bytes, with b·s = tokens·cp. The backward makes two passes (K/V
    again, and their gradients dK/dV back) — Megatron-Core's ring attention
    (context_parallel: AttnFuncWithCPAndKVP2P); Liu et al. 2023, Ring Attention."""
    t, cp = np.asarray(t, dtype=float), np.asarray(cp, dtype=float)
    kv_dev = np.maximum(sh.kv_dim / t, sh.head_dim)
    return (cp - 1.0) * np.asarray(tokens, dtype=float) * 2.0 * kv_dev * 2.0
