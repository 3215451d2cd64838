"""Attention counted from the mask applied: sliding windows, padding and logit softcapping,
both matmuls and their gradients alike, against pair counts made by hand (a multiply-add
counted as 2)."""

import pytest
import torch

from ceiling.profile.causal import kept_share, share_for, window_share
from ceiling.profile.recorder import OpRecorder

transformers = pytest.importorskip("transformers")

B, L, HEADS, KV_HEADS, HEAD_DIM, WINDOW = 2, 12, 4, 2, 16, 4


def _gemma2(softcap: float | None = 50.0):
    config = transformers.Gemma2Config(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,  # one sliding-window layer, one global
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        head_dim=HEAD_DIM,
        sliding_window=WINDOW,
        attn_logit_softcapping=softcap,
        final_logit_softcapping=30.0,
        query_pre_attn_scalar=HEAD_DIM,
        attn_implementation="eager",
    )
    torch.manual_seed(0)
    return transformers.Gemma2ForCausalLM(config)


def _pairs(window: int | None, padded: int = 0) -> float:
    """Pairs one sequence keeps (a key j ≤ query i, within the window, not padding), less
    half its kept diagonal, the convention for a causal mask."""
    kept = diagonal = 0
    for i in range(L):
        for j in range(i + 1):
            if j >= padded and (window is None or i - j < window):
                kept += 1
                diagonal += i == j
    return kept - diagonal / 2


def _attention_flops(recorder: OpRecorder) -> tuple[float, float]:
    calls = [c for c in recorder.calls if c.category == "attention"]
    # model FLOPs: a fused backward recomputing the scores does not count them twice
    return sum(c.flops - c.recomputed_flops for c in calls), sum(
        c.causal_skipped_flops for c in calls
    )


def _train_step(model, **batch) -> OpRecorder:
    ids = torch.randint(0, 128, (B, L))
    with OpRecorder() as rec:
        model(input_ids=ids, labels=ids, **batch).loss.backward()
    return rec


def test_pair_counts_by_hand():
    assert _pairs(None) == L * L / 2
    assert _pairs(WINDOW) == 1 + 2 + 3 + 4 * 9 - 6 == 36


@pytest.mark.parametrize("softcap", [50.0, None])
def test_gemma2_training_step_counts_each_layer_from_its_mask(softcap):
    rec = _train_step(_gemma2(softcap))
    # Q·Kᵀ and P·V per layer, each 2·B·H·d per pair, three times for forward and backward
    per_pair = 3 * 2 * 2 * B * HEADS * HEAD_DIM
    counted, skipped = _attention_flops(rec)
    assert counted == per_pair * (_pairs(WINDOW) + _pairs(None))
    assert counted + skipped == per_pair * 2 * L * L
    # every score and weighted-sum matmul, forward and backward, is attention
    assert not [c for c in rec.calls if c.op == "aten.bmm" and c.category != "attention"]


def test_gemma2_padding_removes_the_pairs_of_padded_keys():
    mask = torch.ones(B, L, dtype=torch.long)
    mask[1, :3] = 0  # the second sequence is left-padded by 3
    rec = _train_step(_gemma2(), attention_mask=mask)
    per_pair = 3 * 2 * 2 * HEADS * HEAD_DIM
    kept = _pairs(WINDOW) + _pairs(None) + _pairs(WINDOW, padded=3) + _pairs(None, padded=3)
    assert _attention_flops(rec)[0] == per_pair * kept


def test_window_shares():
    assert window_share(L, L, None, 0) == kept_share(L, L) == 0.5
    assert window_share(L, L, WINDOW - 1, 0) == _pairs(WINDOW) / (L * L)
    assert window_share(2, 8, None, 0) == kept_share(2, 8)
    # Gemma-2-9B at 8k: a 4096-token window keeps 0.375 of the pairs, not a half
    assert window_share(8192, 8192, 4095, 0) == (4096 * 4097 / 2 + 4096 * 4096 - 4096) / 8192**2
    assert share_for(True, None, L, L, (WINDOW - 1, 0)) == (36 / 144, True)
    assert share_for(False, None, L, L, (None, None)) == (1.0, True)


def test_mistral_sliding_window_through_sdpa_reads_the_boolean_mask():
    config = transformers.MistralConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        head_dim=HEAD_DIM,
        sliding_window=WINDOW,
        attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    rec = _train_step(transformers.MistralForCausalLM(config))
    per_pair = 3 * 2 * 2 * B * HEADS * HEAD_DIM
    assert _attention_flops(rec)[0] == per_pair * _pairs(WINDOW)


def test_chunked_attention_mask_through_sdpa():
    # Llama-4's local layers: each query sees the keys of its own chunk of 4, up to itself
    rows, cols = torch.arange(L).unsqueeze(-1), torch.arange(L)
    chunked = (cols <= rows) & (rows // 4 == cols // 4)
    q, k, v = (torch.randn(B, HEADS, L, HEAD_DIM, requires_grad=True) for _ in range(3))
    with OpRecorder() as rec:
        torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=chunked
        ).sum().backward()
    kept = 3 * (1 + 2 + 3 + 4) - L / 2  # three chunks, half the diagonal off
    assert _attention_flops(rec)[0] == 3 * 2 * 2 * B * HEADS * HEAD_DIM * kept


def test_gemma2_on_meta_counts_as_on_a_cpu():
    from ceiling.profile.meter import count_step_flops

    counts = []
    for device in ("cpu", "meta"):
        model = _gemma2().to(device)
        ids = torch.randint(0, 128, (B, L), device=device)
        batch = {"input_ids": ids, "labels": ids}
        counts.append(count_step_flops(model, batch, loss_fn=lambda out, _b: out.loss).model)
    assert counts[0] == counts[1]
