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


def attention_flops(queries, keys, width, causal: bool = False):
    """Forward FLOPs of `queries` queries each attending to `keys` keys over `width` = heads ×
    head_dim channels: 4·w·queries·keys (half of it with a causal mask)."""
    full = 4.0 * width * queries * keys
    return full / 2.0 if causal else full


def attention_bytes(
    batch: int, heads: int, seq: int, head_dim: int, element_bytes: float, fused: bool
) -> float:
    """Main-memory bytes of one self-attention forward over B × H heads of S × D."""
    bh = batch * heads
    elements = 4.0 * bh * seq * head_dim + (0.0 if fused else 4.0 * bh * seq * seq)
    return elements * element_bytes
