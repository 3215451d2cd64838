"""Attention FLOPs and bytes have one definition; every count agrees with it."""

import pytest

from ceiling.model import opcost
from ceiling.model.attention import attention_bytes, attention_flops
from ceiling.model.mfu import attention_training_flops_per_token
from ceiling.model.transformer import get_model


def test_flops_per_pair_and_causal_half():
    assert attention_flops(3, 5, 64) == 4 * 64 * 3 * 5
    assert attention_flops(3, 5, 64, causal=True) == 2 * 64 * 3 * 5
    # A causal prompt of P tokens attends to 1..P keys: the sum is P(P+1)/2 pairs.
    p = 7
    assert attention_flops(p, p + 1, 64, causal=True) == sum(4 * 64 * i for i in range(1, p + 1))


def test_every_count_uses_it():
    m = get_model("llama-3-8b")
    s = 4096
    per_token = m.attention_flops_per_token(s)
    assert per_token == pytest.approx(m.layers * attention_flops(1, s, m.q_dim))
    assert attention_training_flops_per_token(m.layers, s, m.q_dim) == pytest.approx(3 * per_token)
    op = opcost.attention(2, m.heads, s, m.head_dim, "bf16", fused=True)
    assert op.flops == pytest.approx(2 * s * per_token / m.layers)


def test_bytes_fused_and_naive():
    fused = attention_bytes(1, 2, 16, 8, 2, fused=True)
    assert fused == 4 * 2 * 16 * 8 * 2
    assert attention_bytes(1, 2, 16, 8, 2, fused=False) == fused + 4 * 2 * 16 * 16 * 2
