"""Exact FLOP counts of fused layers, grouped matmuls and causal attention on small real
modules, against hand-computed totals (a multiply-add counted as 2)."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ceiling.profile.recorder import OpRecorder

B, L, E, HEADS, FF = 2, 6, 16, 4, 32


def _record(fn, backward: bool = False) -> OpRecorder:
    rec = OpRecorder()
    with rec:
        out = fn()
        if backward:
            out.sum().backward()
    return rec


def _causal_mask(length: int) -> torch.Tensor:
    return nn.Transformer.generate_square_subsequent_mask(length)


def _attention_flops(lq: int, lk: int, width: int, batch: int = B) -> int:
    return 4 * batch * lq * lk * width  # Q·Kᵀ and P·V, all heads together


def _mha_flops(share: float = 1.0) -> float:
    projections = 2 * B * L * E * 3 * E + 2 * B * L * E * E
    return projections + share * _attention_flops(L, L, E)


def test_multi_head_attention_fast_path_is_counted():
    mha = nn.MultiheadAttention(E, HEADS, batch_first=True).eval()
    x = torch.randn(B, L, E)
    with torch.no_grad():
        rec = _record(lambda: mha(x, x, x, need_weights=False))
    assert [c.op for c in rec.calls if c.flops] == ["aten._native_multi_head_attention"]
    assert rec.model_flops() == _mha_flops() == 18_432 + 6_144 + 4_608


def test_multi_head_attention_cross_lengths():
    mha = nn.MultiheadAttention(E, HEADS, batch_first=True).eval()
    q, kv = torch.randn(B, 3, E), torch.randn(B, 7, E)
    with torch.no_grad():
        rec = _record(lambda: mha(q, kv, kv, need_weights=False))
    projections = 2 * B * E * E * (3 + 2 * 7) + 2 * B * 3 * E * E
    assert rec.model_flops() == projections + _attention_flops(3, 7, E)


def test_encoder_fast_path_is_counted_per_layer():
    layer = nn.TransformerEncoderLayer(E, HEADS, dim_feedforward=FF, batch_first=True)
    enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    x = torch.randn(B, L, E)
    with torch.no_grad():
        fused = _record(lambda: enc(x))
    per_layer = _mha_flops() + 2 * 2 * B * L * E * FF
    assert {c.op for c in fused.calls if c.flops} == {"aten._transformer_encoder_layer_fwd"}
    assert fused.model_flops() == 2 * per_layer == 2 * (29_184 + 24_576)
    enc.train()  # the same layers, unfused: the same count
    assert _record(lambda: enc(x)).model_flops() == 2 * per_layer


def test_encoder_fast_path_with_causal_mask_counts_half_the_pairs():
    layer = nn.TransformerEncoderLayer(E, HEADS, dim_feedforward=FF, batch_first=True)
    enc = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False).eval()
    x = torch.randn(B, L, E)
    with torch.no_grad():
        rec = _record(lambda: enc(x, mask=_causal_mask(L), is_causal=True))
    skipped = sum(c.causal_skipped_flops for c in rec.calls)
    assert skipped == _attention_flops(L, L, E) / 2
    assert rec.model_flops() == _mha_flops(0.5) + 2 * 2 * B * L * E * FF


@pytest.mark.parametrize(
    ("a_shape", "b_shape", "offs", "flops"),
    [
        ((12, 8), (3, 8, 16), [4, 8, 12], 2 * 12 * 8 * 16),  # tokens grouped by expert
        ((12, 8), (3, 8, 16), [4, 4, 8], 2 * 8 * 8 * 16),  # last rows routed nowhere
        ((3, 4, 8), (3, 8, 16), None, 2 * 3 * 4 * 8 * 16),  # batched
        ((4, 12), (12, 16), [4, 8, 12], 2 * 4 * 12 * 16),  # inner dim grouped (weight grad)
        ((3, 4, 8), (8, 12), [4, 8, 12], 2 * 4 * 8 * 12),  # columns grouped
    ],
)
def test_grouped_mm(a_shape, b_shape, offs, flops):
    a, b = torch.randn(a_shape), torch.randn(b_shape)
    o = None if offs is None else torch.tensor(offs, dtype=torch.int32)
    rec = _record(lambda: torch._grouped_mm(a, b, offs=o))
    (call,) = rec.calls
    assert (call.op, call.category, call.flops, call.flops_exact) == (
        "aten._grouped_mm",
        "matmul",
        flops,
        True,
    )


def test_grouped_mm_on_fake_tensors_is_an_estimate():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        a = torch.randn(12, 8, dtype=torch.bfloat16)
        b = torch.randn(3, 8, 16, dtype=torch.bfloat16)
        offs = torch.tensor([4, 8, 12], dtype=torch.int32)
        rec = _record(lambda: torch._grouped_mm(a, b, offs=offs))
    (call,) = [c for c in rec.calls if c.op == "aten._grouped_mm"]
    assert call.flops == 2 * 12 * 8 * 16 and not call.flops_exact


# ---- causal attention: the same count whatever the kernel --------------------------------

H, D = 2, 4
TRIL = torch.ones(L, L, dtype=torch.bool).tril()


def _qkv():
    torch.manual_seed(0)
    return [torch.randn(B, H, L, D, requires_grad=True) for _ in range(3)]


def _eager_where(q, k, v):  # GPT-2's eager attention
    s = q @ k.transpose(-1, -2) / D**0.5
    s = torch.where(TRIL, s, torch.finfo(s.dtype).min)
    return F.dropout(torch.softmax(s, -1), 0.1) @ v


def _eager_masked_fill(q, k, v):
    s = (q @ k.transpose(-1, -2)).masked_fill(~TRIL, float("-inf"))
    return torch.softmax(s, -1) @ v


def _eager_additive_with_padding(q, k, v):  # Hugging Face's 4D mask: causal + padding
    low = torch.finfo(torch.float32).min
    mask = torch.zeros(B, 1, L, L).masked_fill(~TRIL, low)
    mask[1, :, :, :2] = low
    return torch.softmax(q @ k.transpose(-1, -2) + mask, -1) @ v


KERNELS = {
    "sdpa is_causal": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
    "sdpa bool mask": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=TRIL),
    "eager where": _eager_where,
    "eager masked_fill": _eager_masked_fill,
    "eager additive + padding": _eager_additive_with_padding,
}


@pytest.mark.parametrize("kernel", sorted(KERNELS))
@pytest.mark.parametrize("backward", [False, True])
def test_causal_attention_counts_the_same_for_every_kernel(kernel, backward):
    q, k, v = _qkv()
    rec = _record(lambda: KERNELS[kernel](q, k, v), backward=backward)
    full = _attention_flops(L, L, H * D) * (3 if backward else 1)
    skipped = sum(c.causal_skipped_flops for c in rec.calls)
    share = PADDED_SHARE if "padding" in kernel else 1 / 2
    assert rec.model_flops() == full * share
    assert skipped == full * (1 - share)  # the full convention: count + skipped


# the second row masks its first 2 keys as well: its queries 2..5 keep 1, 2, 3, 4 keys
# (4 on the diagonal, half of them off): 8 of 36 pairs; the first row keeps 18 of 36
PADDED_SHARE = (18 + 8) / 72


@pytest.mark.parametrize(
    "kernel",
    [
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
        lambda q, k, v: torch.softmax(q @ k.transpose(-1, -2), -1) @ v,
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones_like(TRIL)),
    ],
)
def test_attention_without_a_causal_mask_counts_every_pair(kernel):
    q, k, v = _qkv()
    rec = _record(lambda: kernel(q, k, v), backward=True)
    assert rec.model_flops() == 3 * _attention_flops(L, L, H * D)
    assert sum(c.causal_skipped_flops for c in rec.calls) == 0


def test_a_mask_that_is_not_causal_counts_the_pairs_it_keeps():
    q, k, v = _qkv()
    anti = TRIL.T.contiguous()  # 21 of 36 pairs, nothing masked above the diagonal
    rec = _record(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=anti), True)
    assert rec.model_flops() == 3 * _attention_flops(L, L, H * D) * 21 / 36


def test_causal_mask_after_a_cache_keeps_bottom_right_pairs():
    from ceiling.profile.causal import is_causal_mask, kept_share

    chunk = torch.ones(2, 5, dtype=torch.bool).tril(3)  # 2 new queries after 3 cached keys
    assert is_causal_mask(chunk, 2, 5)
    assert not is_causal_mask(torch.ones(2, 5, dtype=torch.bool), 2, 5)
    assert kept_share(4, 4) == 0.5 and kept_share(2, 8) == 1 - 2 / 16 and kept_share(1, 9) > 0.9
