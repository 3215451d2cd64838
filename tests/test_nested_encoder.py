"""nn.TransformerEncoder with a key padding mask: its inference fast path packs the batch
into nested tensors; recorded without failing and counted per sequence (a multiply-add
counted as 2)."""

import pytest
import torch
from torch import nn

from ceiling.profile.recorder import OpRecorder

B, L, E, HEADS, FF, LAYERS = 2, 6, 16, 4, 32, 2
LENGTHS = (6, 4)  # the second sequence is padded by 2


def _encoder() -> nn.TransformerEncoder:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(E, HEADS, dim_feedforward=FF, batch_first=True)
    return nn.TransformerEncoder(layer, LAYERS)


def _padding() -> torch.Tensor:
    pad = torch.zeros(B, L, dtype=torch.bool)
    pad[1, LENGTHS[1] :] = True
    return pad


def _layer_flops(tokens: int, pairs: int) -> int:
    projections = 2 * tokens * E * 3 * E + 2 * tokens * E * E
    feed_forward = 2 * 2 * tokens * E * FF
    return projections + feed_forward + 2 * 2 * pairs * E  # Q·Kᵀ and P·V over all heads


def test_fast_path_over_nested_tensors_counts_each_sequence():
    x = torch.randn(B, L, E)
    with torch.no_grad(), OpRecorder(time_ops=True) as rec:  # timed: buffers sized too
        out = _encoder().eval()(x, src_key_padding_mask=_padding())
    assert out.shape == (B, L, E)
    assert "aten._transformer_encoder_layer_fwd" in {c.op for c in rec.calls}
    # the padded rows are dropped: 10 tokens, 36 + 16 pairs
    assert rec.model_flops() == LAYERS * _layer_flops(sum(LENGTHS), 36 + 16) == 2 * 44_288
    assert all(c.bytes_written >= 0 and c.bytes_read >= 0 for c in rec.calls)
    assert not [c.op for c in rec.calls if c.category == "unknown"]


def test_training_step_masks_the_padded_keys():
    x = torch.randn(B, L, E, requires_grad=True)
    with OpRecorder() as rec:
        _encoder().train()(x, src_key_padding_mask=_padding()).sum().backward()
    # every query runs; the padded sequence's 6 queries see its 4 keys
    forward = LAYERS * _layer_flops(B * L, 36 + 6 * 4)
    assert rec.model_flops() == 3 * forward


def test_multi_head_attention_fast_path_counts_the_keys_padding_leaves():
    mha = nn.MultiheadAttention(E, HEADS, batch_first=True).eval()
    x = torch.randn(B, L, E)
    with torch.no_grad(), OpRecorder() as rec:
        mha(x, x, x, key_padding_mask=_padding(), need_weights=False)
    projections = 2 * B * L * E * 3 * E + 2 * B * L * E * E
    pairs = L * L + L * LENGTHS[1]  # every query runs; the second sees 4 keys
    assert rec.model_flops() == pytest.approx(projections + 2 * 2 * pairs * E, rel=1e-12)
    assert sum(c.causal_skipped_flops for c in rec.calls) == pytest.approx(2 * 2 * L * 2 * E)
