"""Grouped and depthwise convolution training steps against their analytic count: the
input gradient and the weight gradient each cost the forward's FLOPs (a multiply-add
counted as 2). torch's FlopCounterMode counts the weight gradient `groups` times too high."""

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from ceiling.profile.recorder import OpRecorder


def _step(conv: nn.Module, x: torch.Tensor) -> OpRecorder:
    with OpRecorder() as rec:
        conv(x).sum().backward()
    return rec


def _registry_flops(conv: nn.Module, x: torch.Tensor) -> int:
    with FlopCounterMode(display=False) as counter:
        conv(x).sum().backward()
    return counter.get_total_flops()


def test_depthwise_conv1d_step():
    # Mamba's causal depthwise convolution: 64 channels, 4 taps, padded by 3
    b, c, length, taps = 2, 64, 32, 4
    conv = nn.Conv1d(c, c, taps, groups=c, padding=taps - 1)
    x = torch.randn(b, c, length, requires_grad=True)
    forward = 2 * b * (length + taps - 1) * c * 1 * taps
    assert forward == 35_840
    rec = _step(conv, x)
    assert rec.model_flops() == 3 * forward
    # the registry's weight gradient is counted as if every channel met every channel
    assert _registry_flops(conv, x) == 2 * forward + c * forward == 2_365_440


def test_grouped_conv2d_step():
    b, c_in, c_out, groups, hw, k = 2, 8, 12, 4, 6, 3
    conv = nn.Conv2d(c_in, c_out, k, groups=groups, padding=1)
    x = torch.randn(b, c_in, hw, hw, requires_grad=True)
    forward = 2 * b * hw * hw * c_out * (c_in // groups) * k * k
    assert forward == 31_104
    assert _step(conv, x).model_flops() == 3 * forward
    assert _registry_flops(conv, x) == 2 * forward + groups * forward


def test_grouped_transposed_conv2d_step():
    b, c_in, c_out, groups, hw, k = 2, 6, 4, 2, 5, 3
    conv = nn.ConvTranspose2d(c_in, c_out, k, groups=groups, stride=2)
    x = torch.randn(b, c_in, hw, hw, requires_grad=True)
    # every input position meets every tap of its group's output channels
    forward = 2 * b * hw * hw * c_in * (c_out // groups) * k * k
    assert _step(conv, x).model_flops() == 3 * forward


def test_input_without_gradient_costs_the_weight_gradient_only():
    conv = nn.Conv1d(16, 16, 3, groups=16)
    x = torch.randn(2, 16, 10)  # a first layer: no input gradient
    forward = 2 * 2 * 8 * 16 * 3
    assert _step(conv, x).model_flops() == 2 * forward


def test_a_trace_without_shapes_files_the_backward_as_matmul():
    from ceiling.profile.op_flops import kind_category

    assert kind_category(torch.ops.aten.convolution_backward.default) == "matmul"
    assert kind_category(torch.ops.aten.mkldnn_rnn_layer.default) == "matmul"
    assert kind_category(torch.ops.aten.mm.default) == "matmul"
