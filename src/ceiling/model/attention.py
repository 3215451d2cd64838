"""Attention's FLOPs and bytes: the one home of the formulas every count uses.

softmax(Q·Kᵀ/√d)·V does two matrix multiplies. For each (query, key) pair and each of the
w = heads × head_dim query channels: 2 FLOPs for the score and 2 for the weighted value,
so 4·w FLOPs per pair; softmax's few FLOPs per score are not counted (Dao et al. 2022,
FlashAttention, whose figures count the same way; PaLM, Chowdhery et al. 2022, Appendix B:
4·l·a·d·s per token forward, 12·l·a·d·s forward + backward). A causal mask keeps about
half the pairs of a square score matrix ("causal-half"); the full count keeps MFU figures
comparable with published ones. Backward is 2× forward. Arguments may be numpy arrays.

Bytes: a fused kernel (FlashAttention) reads Q, K and V and writes O once; the unfused form
also writes the S×S scores, reads them for the softmax, writes the probabilities and reads
them back for P·V — 4 more elements per score.
"""

from __future__ import annotations


def attention_flops(queries, keys, width, causal: bool = False, value_width=None):
    """Forward FLOPs of `queries` queries each attending to `keys` keys over `width` = heads ×
    head_dim channels: 4·w·queries·keys (half of it with a causal mask). When the values are
    narrower or wider than the scores' channels (multi-head latent attention: scores over
    a·(d_nope + d_rope), values of a·d_v), 2·(w + value_width)·queries·keys."""
    value = width if value_width is None else value_width
    full = 2.0 * (width + value) * queries * keys
    return full / 2.0 if causal else full


def mla_decode_flops(
    heads, kv_lora_rank, qk_nope, qk_rope, v_dim, keys, absorbed: bool, cached=None
):
    """Forward FLOPs of one query token of multi-head latent attention over `keys` tokens,
    `cached` of them (default all) read from the cache, one layer, beyond the weights it
    multiplies once per token (its own projections).

    The cache holds each token's latent c (r = kv_lora_rank) and rotary key (d_rope).
    Non-absorbed: each cached latent is projected up again to a key and a value per head,
    2·r·a·(d_nope + d_v) per key, then ordinary attention, 2·a·(d_nope + d_rope) + 2·a·d_v
    per key (the up-projection only for the cached ones). Absorbed (DeepSeek-V2, section
    2.1.2: W_UK folded into the query, W_UV into the output, which costs the same per token
    as the up-projection of its own latent): scores over the latent and the rotary key,
    2·a·(r + d_rope), and the weighted sum of latents, 2·a·r, per key. Accepts arrays for
    `keys`."""
    if absorbed:
        return (2.0 * heads * (kv_lora_rank + qk_rope) + 2.0 * heads * kv_lora_rank) * keys
    up = 2.0 * kv_lora_rank * heads * (qk_nope + v_dim)
    attend = 2.0 * heads * (qk_nope + qk_rope) + 2.0 * heads * v_dim
    return attend * keys + up * (keys if cached is None else cached)


def attention_bytes(
    batch: int, heads: int, seq: int, head_dim: int, element_bytes: float, fused: bool
) -> float:
    """Main-memory bytes of one self-attention forward over B × H heads of S × D."""
    bh = batch * heads
    elements = 4.0 * bh * seq * head_dim + (0.0 if fused else 4.0 * bh * seq * seq)
    return elements * element_bytes
