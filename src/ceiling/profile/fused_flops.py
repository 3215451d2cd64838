"""FLOPs of fused ops torch's formula registry does not know, a multiply-add counted as 2.

- `_native_multi_head_attention` (nn.MultiheadAttention's inference fast path, eval mode
  without gradients): the Q, K, V projections, the scores Q·Kᵀ, the weighted sum P·V and
  the output projection.
- `_transformer_encoder_layer_fwd` (nn.TransformerEncoderLayer's fast path): the same
  attention, plus the two feed-forward matmuls.
- `_grouped_mm` and `_scaled_grouped_mm` (mixture-of-experts layers run their experts as
  one grouped matmul): 2·M·N·K summed over the groups, with the groups' rows (or columns)
  read from `offs` when its values can be read.

Only matmul work is counted: the normalisations, softmax and activations inside a fused
layer are a few FLOPs per element, not what a dense matmul peak describes. Attention
is counted at the pairs its mask keeps (`ceiling.profile.causal`), a key padding mask's
included.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ceiling.model.attention import attention_flops
from ceiling.profile import causal
from ceiling.profile.shadow_values import outside_modes, value_of


@dataclass(frozen=True)
class FusedCount:
    flops: float  # under the causal-half convention
    causal_skipped: float  # pairs the causal mask removes: full convention = flops + this
    exact: bool


def _tokens(x: torch.Tensor) -> tuple[list[int], int]:
    """Sequence lengths and width of a (batch, seq, width) input, nested tensors included."""
    if x.is_nested:
        sizes = x._nested_tensor_size()
        return [int(s[0]) for s in sizes], int(sizes[0][1])
    b, s, e = x.shape
    return [int(s)] * int(b), int(e)


def _mask_share(mask, mask_type, lq: int, lk: int) -> tuple[float, bool]:
    if mask is None:
        return 1.0, True
    if mask_type == 1 and isinstance(mask, torch.Tensor) and mask.dim() == 2:
        # a key padding mask (batch, Lk): every query of a sequence sees its unpadded keys
        mask = mask.unsqueeze(1)
    return causal.share_for(False, mask, lq, lk)


def _attention_core(q_lens, k_lens, width: int, share: float) -> tuple[float, float]:
    """Q·Kᵀ and P·V over all heads, per sequence; returns (counted, skipped)."""
    full = sum(attention_flops(lq, lk, width) for lq, lk in zip(q_lens, k_lens, strict=True))
    return full * share, full * (1.0 - share)


def argument(func, args, kwargs, name: str, default=None):
    """An argument of an aten call by its schema name, passed by position or keyword."""
    if name in kwargs:
        return kwargs[name]
    for i, a in enumerate(func._schema.arguments):
        if a.name == name:
            return args[i] if i < len(args) else default
    return default


def multi_head_attention(func, args, kwargs) -> FusedCount:
    query, key = args[0], args[1]
    mask = argument(func, args, kwargs, "mask")
    mask_type = argument(func, args, kwargs, "mask_type")
    q_lens, e = _tokens(query)
    k_lens, _ = _tokens(key)
    projections = 2.0 * e * e * (sum(q_lens) + 2 * sum(k_lens)) + 2.0 * e * e * sum(q_lens)
    share, decided = _mask_share(mask, mask_type, max(q_lens, default=0), max(k_lens, default=0))
    counted, skipped = _attention_core(q_lens, k_lens, e, share)
    return FusedCount(projections + counted, skipped, decided)


def encoder_layer(func, args, kwargs) -> FusedCount:
    src = args[0]
    ffn_1 = argument(func, args, kwargs, "ffn_weight_1")  # (feed-forward width, embed)
    mask = argument(func, args, kwargs, "mask")
    mask_type = argument(func, args, kwargs, "mask_type")
    lens, e = _tokens(src)
    tokens = sum(lens)
    f = int(ffn_1.shape[0])
    projections = 2.0 * tokens * e * 3 * e + 2.0 * tokens * e * e
    feed_forward = 2.0 * tokens * e * f * 2
    longest = max(lens, default=0)
    share, decided = _mask_share(mask, mask_type, longest, longest)
    counted, skipped = _attention_core(lens, lens, e, share)
    return FusedCount(projections + feed_forward + counted, skipped, decided)


def _used(offs, extent: int) -> tuple[int, bool]:
    """How much of the grouped dimension the groups cover: offs[-1] when readable."""
    if offs is None:
        return extent, True
    known = value_of(offs)
    if known is not None and known.numel():
        with outside_modes():
            return int(known[-1]), True
    return extent, False  # fake offsets: assume every row belongs to a group


def grouped_mm(func, args, kwargs) -> FusedCount:
    """The four layouts: 2D×3D (rows grouped by offs), 3D×3D (batched), 2D×2D (the inner
    dimension grouped: a weight gradient), 3D×2D (columns grouped)."""
    a, b = args[0], args[1]
    offs = argument(func, args, kwargs, "offs")
    if a.dim() == 2 and b.dim() == 3:
        m, exact = _used(offs, a.shape[0])
        flops = 2.0 * m * a.shape[1] * b.shape[2]
    elif a.dim() == 3 and b.dim() == 3:
        exact = True
        flops = 2.0 * a.shape[0] * a.shape[1] * a.shape[2] * b.shape[2]
    elif a.dim() == 2 and b.dim() == 2:
        k, exact = _used(offs, a.shape[1])
        flops = 2.0 * a.shape[0] * k * b.shape[1]
    else:
        n, exact = _used(offs, b.shape[1])
        flops = 2.0 * a.shape[1] * a.shape[2] * n
    return FusedCount(flops, 0.0, exact)


FORMULAS = {
    "_native_multi_head_attention": ("attention", multi_head_attention),
    "_transformer_encoder_layer_fwd": ("attention", encoder_layer),
    "_grouped_mm": ("matmul", grouped_mm),
    "_scaled_grouped_mm": ("matmul", grouped_mm),
}
