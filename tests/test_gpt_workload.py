"""The torch GPT: parameter count matches the config, KV-cache decoding matches the full pass."""

import re

import pytest

torch = pytest.importorskip("torch")

from ceiling.errors import InvalidInput  # noqa: E402
from ceiling.model.transformer import parse_model  # noqa: E402
from ceiling.workloads.gpt import build_gpt, param_count, preset_config  # noqa: E402


@pytest.mark.parametrize("name", ["tiny", "gpt:small"])
def test_presets_match_their_config(name):
    model = build_gpt(name)
    cfg = model.transformer_config()
    assert cfg == preset_config(name)
    assert param_count(model) == cfg.params_total


def test_tiny_is_a_few_million_and_small_tens_of_millions():
    assert 1e6 < preset_config("tiny").params_total < 10e6
    assert 10e6 < preset_config("small").params_total < 100e6


def test_forward_and_backward():
    model = build_gpt("tiny")
    idx = torch.randint(0, model.cfg.vocab, (2, 16))
    logits, loss = model(idx, idx)
    assert logits.shape == (2, 16, model.cfg.vocab)
    loss.backward()
    # random init: loss near log(vocab)
    assert abs(loss.item() - torch.log(torch.tensor(float(model.cfg.vocab))).item()) < 0.5


@pytest.mark.parametrize(
    "spec",
    [
        "gpt:tiny",
        # grouped-query attention, SwiGLU, RMSNorm, rotary positions, biases
        "custom:layers=2,hidden=128,heads=8,kv_heads=2,ffn_kind=swiglu,ffn_hidden=256,"
        "vocab=100,max_seq=64,bias=true",
    ],
)
def test_kv_cache_decode_matches_full_forward(spec):
    cfg = parse_model(spec)
    model = build_gpt(cfg).eval()
    assert param_count(model) == cfg.params_total
    prompt = torch.randint(0, cfg.vocab, (3, 7))
    nxt = torch.randint(0, cfg.vocab, (3,))
    with torch.no_grad():
        full, _ = model(torch.cat([prompt, nxt.view(-1, 1)], dim=1))
    cache = model.new_kv_cache(3, 12)
    torch.testing.assert_close(model.prefill(prompt, cache), full[:, 6], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(model.decode_step(nxt, cache), full[:, 7], atol=1e-5, rtol=1e-4)
    assert cache.length == 8


def test_generate_and_cache_limits():
    model = build_gpt("tiny").eval()
    out = model.generate(torch.zeros(2, 3, dtype=torch.long), 4)
    assert out.shape == (2, 7)
    cache = model.new_kv_cache(1, 2)
    model.prefill(torch.zeros(1, 2, dtype=torch.long), cache)
    with pytest.raises(InvalidInput, match="full"):
        model.decode_step(torch.zeros(1, dtype=torch.long), cache)
    with pytest.raises(InvalidInput):
        preset_config("huge")


@pytest.mark.gpu
def test_cuda_bf16_kv_decode_matches_full_forward():
    model = build_gpt("small", device="cuda", dtype=torch.bfloat16).eval()
    cfg = model.transformer_config()
    prompt = torch.randint(0, cfg.vocab, (4, 33), device="cuda")
    nxt = torch.randint(0, cfg.vocab, (4,), device="cuda")
    with torch.no_grad():
        full, _ = model(torch.cat([prompt, nxt.view(-1, 1)], dim=1))
    cache = model.new_kv_cache(4, 40)
    model.prefill(prompt, cache)
    step = model.decode_step(nxt, cache)
    torch.testing.assert_close(step.float(), full[:, 33].float(), atol=0.05, rtol=0.05)


@pytest.mark.parametrize(
    ("model", "words"),
    [
        ("gemma-3-1b", "local attention (sliding_window), qk_norm, 4 norms per block"),
        ("deepseek-v3", "mixture-of-experts"),
        (
            "custom:layers=2,hidden=64,heads=4,attention=mla,kv_lora_rank=16,"
            "qk_nope_head_dim=8,qk_rope_head_dim=8,v_head_dim=16",
            "mla attention not built",
        ),
    ],
)
def test_layouts_the_decoder_does_not_build_are_refused(model, words):
    with pytest.raises(InvalidInput, match=re.escape(words)):
        build_gpt(parse_model(model))
