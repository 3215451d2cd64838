"""FLOPs of a convolution's backward, a multiply-add counted as 2, right for any `groups`.

The input gradient and the weight gradient each pair the same (output, input, kernel tap)
elements as the forward, so each costs exactly the forward's FLOPs:
2 · batch · output positions · C_out · (C_in / groups) · kernel taps (for a transposed
convolution the input positions and C_in · (C_out / groups), the weight being
(C_in, C_out / groups, taps)).

torch's formula registry (`torch.utils.flop_counter.conv_backward_flop`, hence
FlopCounterMode) counts the weight gradient as an ungrouped convolution over all C_in
channels: `groups` times too high. A depthwise convolution (groups = channels, as in
Mamba's and ConvNeXt's) is counted channels times too high there. The bias gradient (a sum)
is left out, as the forward's bias add is.
"""

from __future__ import annotations

import torch
from torch.utils import flop_counter

from ceiling.profile.fused_flops import FusedCount, argument


def convolution_backward(func, args, kwargs) -> FusedCount:
    grad_out = argument(func, args, kwargs, "grad_output")
    x = argument(func, args, kwargs, "input")
    weight = argument(func, args, kwargs, "weight")
    transposed = bool(argument(func, args, kwargs, "transposed", False))
    mask = argument(func, args, kwargs, "output_mask", [True, True, True])
    # the forward's count: out_shape is only read for a plain convolution's positions
    forward = flop_counter.conv_flop_count(
        list(x.shape), list(weight.shape), list(grad_out.shape), transposed=transposed
    )
    grads = int(bool(mask[0])) + int(bool(mask[1]))
    return FusedCount(float(forward * grads), 0.0, True)


FORMULAS = {"convolution_backward": ("matmul", convolution_backward)}


def spec(a):
    """An argument as a replay needs it: a tensor as ("tensor", shape, dtype)."""
    if isinstance(a, torch.Tensor):
        return ("tensor", tuple(a.shape), str(a.dtype).removeprefix("torch."))
    if isinstance(a, (list, tuple)):
        return tuple(spec(x) for x in a)
    return a
