import pytest
import torch
from torch import nn

from ceiling.model.mfu import MfuAccumulator
from ceiling.profile.meter import count_step_flops


def test_count_step_flops_of_a_linear_layer_feeds_the_meter():
    layer = nn.Linear(64, 32, bias=False)
    x = torch.randn(8, 64, requires_grad=True)
    flops = count_step_flops(layer, x)
    assert flops.model == 3 * 2 * 8 * 64 * 32  # forward, input grad, weight grad
    assert flops.hardware == flops.model
    assert layer.weight.grad is None
    meter = MfuAccumulator(model_flops_per_token=flops.model / 8, peak_flops_per_s=1e9)
    meter.step(0.001, 8)
    assert meter.mfu == pytest.approx(flops.model / 0.001 / 1e9)


def test_count_step_flops_on_meta_without_running():
    with torch.device("meta"):
        layer = nn.Linear(8192, 8192, bias=False)
        x = torch.randn(4, 8192)
    flops = count_step_flops(layer, x, train=False)
    assert flops.model == 2 * 4 * 8192 * 8192


def test_meta_model_counts_like_the_cpu_one_fused_causal_attention_included():
    from ceiling.workloads.gpt import build_gpt

    idx = torch.randint(0, 100, (1, 32))
    on_cpu = count_step_flops(build_gpt("tiny"), (idx, idx))
    with torch.device("meta"):
        meta = build_gpt("tiny", device="meta")
    on_meta = count_step_flops(meta, (idx.to("meta"), idx.to("meta")))
    assert on_meta.model == on_cpu.model and on_meta.hardware == on_cpu.hardware
    assert on_meta.hardware > on_meta.model  # the fused backward's recomputed scores
    assert next(meta.parameters()).device.type == "meta"  # the caller's model is untouched


def test_count_step_flops_keeps_accumulated_gradients():
    layer = nn.Linear(4, 2)
    layer(torch.randn(3, 4)).sum().backward()
    before = layer.weight.grad.clone()
    count_step_flops(layer, torch.randn(5, 4))
    assert torch.equal(layer.weight.grad, before)
