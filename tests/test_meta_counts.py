"""One model counts the same FLOPs on --device meta (fake tensors, no values) as on the CPU:
causal attention at half whatever the kernel or device picks, hand-computed totals checked
(a multiply-add counted as 2)."""

import pytest
import torch
from torch import nn

from ceiling.profile.recorder import OpRecorder
from ceiling.profile.runner import StepRunner
from ceiling.profile.targets import from_parts, load_target

B, T, D, LAYERS, VOCAB = 2, 32, 64, 2, 256


def _count(workload, device: str, train: bool = True) -> tuple[float, float]:
    """Model FLOPs of one step as `ceiling profile` records it, and the pairs left out."""
    runner = StepRunner(workload, torch.device(device), torch.float32, train)
    rec = OpRecorder()
    with rec:
        runner.step(rec)
    return rec.model_flops(), rec.causal_skipped_flops()


def _attention(train: bool = True) -> int:
    """Q·Kᵀ and P·V over every pair of every layer, forward (and backward: twice more)."""
    return 4 * B * T * T * D * LAYERS * (3 if train else 1)


def _hf_config(tmp_path, family: str, impl: str):
    transformers = pytest.importorskip("transformers")
    if family == "gpt2":
        config = transformers.GPT2Config(
            n_layer=LAYERS, n_embd=D, n_head=4, vocab_size=VOCAB, n_positions=64,
            bos_token_id=0, eos_token_id=0, attn_implementation=impl,
        )  # fmt: skip
        # per token and layer: QKV 6·D², output 2·D², MLP 16·D²; the tied LM head 2·D·V
        dense = LAYERS * 24 * D * D + 2 * D * VOCAB
    else:
        config = transformers.LlamaConfig(
            num_hidden_layers=LAYERS, hidden_size=D, intermediate_size=2 * D,
            num_attention_heads=4, num_key_value_heads=2, vocab_size=VOCAB,
            max_position_embeddings=64, bos_token_id=0, eos_token_id=0,
            attn_implementation=impl,
        )  # fmt: skip
        # per token and layer: Q and O 2·D² each, K and V (2 of 4 heads) D² each, SwiGLU 3
        # matmuls of D × 2D; the LM head 2·D·V
        dense = LAYERS * (6 * D * D + 3 * 2 * D * 2 * D) + 2 * D * VOCAB
    config.save_pretrained(tmp_path)
    return 3 * dense * B * T  # forward + backward


@pytest.mark.slow
@pytest.mark.parametrize(
    "family, impl", [("gpt2", "sdpa"), ("gpt2", "eager"), ("llama", "sdpa"), ("llama", "eager")]
)
def test_hugging_face_model_counts_alike_on_meta_and_cpu(tmp_path, family, impl):
    dense = _hf_config(tmp_path, family, impl)
    counts = {d: _count(load_target(f"hf:{tmp_path}", batch=B, seq=T), d) for d in ("meta", "cpu")}
    assert counts["meta"] == counts["cpu"]
    assert counts["cpu"] == (dense + _attention() / 2, _attention() / 2)


@pytest.mark.slow
def test_gpt2_command_counts_alike_on_meta_and_cpu(tmp_path, cli):
    """The reported case: `ceiling profile hf:DIR --train` on meta and on the CPU."""
    import json

    dense = _hf_config(tmp_path, "gpt2", "sdpa")
    assert dense + _attention() / 2 == 45_613_056
    for device in ("meta", "cpu"):
        code, out, err = cli(
            "profile", f"hf:{tmp_path}", "--train", "--device", device, "--batch", str(B),
            "--seq", str(T), "--steps", "1", "--json",
        )  # fmt: skip
        assert code == 0, err
        record = json.loads(out)
        assert record["model_flops_per_step"] == 45_613_056, device
        assert record["model_flops_per_step_full_attention"] == 45_613_056 + _attention() / 2


class _CausalSelfAttention(nn.Module):
    """nn.MultiheadAttention given a causal mask made in forward, with is_causal or not."""

    def __init__(self, is_causal: bool, float_mask: bool) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(D, 4, batch_first=True)
        self.is_causal, self.float_mask = is_causal, float_mask

    def forward(self, x):
        n = x.shape[1]
        if self.float_mask:
            mask = nn.Transformer.generate_square_subsequent_mask(n, device=x.device)
        else:
            mask = torch.ones(n, n, dtype=torch.bool, device=x.device).triu(1)
        out, _ = self.attn(x, x, x, attn_mask=mask, is_causal=self.is_causal, need_weights=False)
        return out


@pytest.mark.parametrize("train", [True, False])  # eval without gradients: the fused fast path
@pytest.mark.parametrize("is_causal, float_mask", [(True, False), (False, False), (False, True)])
def test_multi_head_attention_counts_alike_on_meta_and_cpu(train, is_causal, float_mask):
    x = torch.randn(B, T, D)
    counts = {}
    for device in ("cpu", "meta"):  # a module moved to meta keeps no values: one each
        module = _CausalSelfAttention(is_causal, float_mask).train(train)
        counts[device] = _count(from_parts("mha", {"model": module, "batch": x}), device, train)
    # Q, K, V and the output, D × D each: forward, then every weight's gradient and the
    # output projection's input gradient (the batch needs none)
    projections = 2 * B * T * D * D * (4 + 5 if train else 4)
    half = _attention(train) / 2 / LAYERS  # one layer
    assert counts["meta"] == counts["cpu"] == (projections + half, half)


class _BufferMaskAttention(nn.Module):
    """Eager attention under a causal mask registered as a buffer, as nanoGPT writes it."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(D, 3 * D, bias=False)
        self.register_buffer("bias", torch.tril(torch.ones(T, T)).view(1, 1, T, T))

    def forward(self, x):
        q, k, v = (t.view(B, T, 4, D // 4).transpose(1, 2) for t in self.qkv(x).split(D, 2))
        scores = (q @ k.transpose(-2, -1)).masked_fill(self.bias == 0, float("-inf"))
        return scores.softmax(-1) @ v


def test_causal_mask_held_in_a_buffer_counts_alike_on_meta_and_cpu():
    x = torch.randn(B, T, D)
    counts = {}
    for device in ("cpu", "meta"):
        parts = {"model": _BufferMaskAttention(), "batch": x, "loss_fn": lambda out, _b: out.sum()}
        counts[device] = _count(from_parts("nanogpt-attention", parts), device)
    projection = 2 * B * T * D * 3 * D * 2  # forward and the weight's gradient only
    half = _attention() / 2 / LAYERS
    assert counts["meta"] == counts["cpu"] == (projection + half, half)


def test_values_of_a_mask_made_on_fake_tensors_are_read():
    from torch._subclasses.fake_tensor import FakeTensorMode

    from ceiling.profile.causal import is_causal_mask

    rec = OpRecorder()
    with rec, FakeTensorMode():
        rows = torch.arange(6).unsqueeze(-1)
        causal = rows >= torch.arange(6)  # a comparison of positions, as Hugging Face's
        anti = causal.T.contiguous()
        weights = torch.randn(6, 6)  # random: no values to replay
        blind = torch.ones(6, 6, dtype=torch.bool)
        blind.copy_(weights > 0)  # written from a tensor without values: forgotten
    assert is_causal_mask(causal, 6, 6) is True
    assert is_causal_mask(anti, 6, 6) is False
    assert is_causal_mask(weights, 6, 6) is None
    assert is_causal_mask(blind, 6, 6) is None
