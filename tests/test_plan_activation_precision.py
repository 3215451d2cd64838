"""Activation memory of multi-head latent attention, tensor by tensor, and what DeepSeek-V3's
FP8 activation caching and BF16 optimizer moments keep (technical report, section 3.3.2)."""

from __future__ import annotations

import pytest

from ceiling.errors import InvalidInput
from ceiling.hardware.catalog import get_spec
from ceiling.model.cluster import make_cluster
from ceiling.model.plan import recompute
from ceiling.model.plan.axes import parse_fixed
from ceiling.model.plan.costs import (
    activation_bytes_per_token_layer,
    shape_of,
    state_pieces_per_param,
)
from ceiling.model.plan.step import Job, Plan, check_plan
from ceiling.model.transformer import get_model

DSV3 = shape_of(get_model("deepseek-v3"))  # 128 heads, d_nope 128, d_rope 64, d_v 128


def test_mla_keeps_its_own_tensors_not_those_of_192_wide_heads():
    # Q and K 128 × (128 + 64) = 24,576 a token, V and the output 128 × 128 = 16,384; the
    # latents (1536 and 512) as their norms' inputs and outputs.
    assert recompute.attention_widths_saved(DSV3, 1) == (24576, 24576, 16384, 16384)
    assert recompute.attention_widths_saved(DSV3, 8)[2] == 2048
    assert recompute.mla_latent_bytes(DSV3) == 4 * (1536 + 512)
    h = 7168
    none = activation_bytes_per_token_layer(DSV3, 4096, 1, False, 0, "flash", False)
    ffn = 2 * 3 * DSV3.ffn_active + recompute.routed_copy_bytes(DSV3)
    attention = 2 * (24576 + 24576 + 16384) + 2 * 16384 + 4 * (1536 + 512) + 4 * 128
    assert float(none) == pytest.approx(8 * h + attention + ffn)
    # An ops policy rebuilds the norms and, from the kept latents, the up-projections.
    ops = recompute.encode("ops:attn+o+gate+up")
    kept = recompute.ops_activation_bytes(DSV3, 4096, 1, False, ops, "flash", False)
    routed = recompute.routed_copy_bytes(DSV3)
    expected = 4 * h + 2 * 16384 + 4 * 128 + 2 * (1536 + 512) + 4 * DSV3.ffn_active + routed
    assert float(kept) == pytest.approx(expected)


def test_rebuilding_mla_projections_reruns_the_up_projections_only():
    ops = recompute.encode("ops:attn+o+gate+up")
    linear, *_ = recompute.rebuilt_shares(DSV3, ops, 4)
    up = 1536 * 24576 + 512 * 128 * 128 + 512 * 16384  # q, k (d_nope), v columns
    h, f = 7168, DSV3.ffn_active
    every = up + 16384 * h + 3 * h * f + h * 1536 + h * (512 + 64)
    assert float(linear) == pytest.approx(up / every)


def test_bf16_adam_moments_and_fp8_activations_need_their_conditions():
    weights, grads, optim = state_pieces_per_param(14, 1, 8)
    assert (float(weights), float(grads), float(optim)) == (2.0, 4.0, 1.0)
    assert parse_fixed("state=14,fp8_acts=on") == {"state_bytes": 14, "fp8_acts": True}
    job = Job(get_model("llama-3-8b"), 8, 2048, attention="flash")
    cluster = make_cluster(get_spec("h100-sxm"), 8)
    with pytest.raises(InvalidInput, match="fp8_acts=on keeps activations in FP8"):
        check_plan(job, cluster, Plan(8, 1, 1, 1, fp8_activations=True))
