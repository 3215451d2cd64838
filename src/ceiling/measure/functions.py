"""What each common elementwise function costs per element, its data in cache.

A FLOP count at the matmul peak says nothing of a tanh, an exp or a softmax: the vector
units take several instructions per element for them, so such an op can take far longer
than its bytes / bandwidth while its "FLOPs" look negligible. Each function here runs on
a block small enough to stay in the first cache levels (and small enough that its output
comes back from the allocator's free list), so its best time is the function's own cost.

Random numbers are functions too: dropout draws one Bernoulli sample per element
(`bernoulli_`, or `native_dropout` where torch fuses the mask and the scaling), and the
generator's cost per element is far above the bytes it writes.

`time_functions` returns raw best seconds per function for `ELEMENTS` elements; keys are
aten op names as the recorder names them (`gelu[tanh]`: gelu with approximate="tanh").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ceiling.measure.timer import benchmark

ROWS, COLS = 64, 1024
ELEMENTS = ROWS * COLS  # 256 KiB of fp32


def _functions(x, g, a, out):
    import torch

    aten = torch.ops.aten
    return {
        "gelu": lambda: aten.gelu(x),
        "gelu[tanh]": lambda: aten.gelu(x, approximate="tanh"),
        "gelu_backward": lambda: aten.gelu_backward(g, x),
        "gelu_backward[tanh]": lambda: aten.gelu_backward(g, x, approximate="tanh"),
        "silu": lambda: aten.silu(x),
        "silu_backward": lambda: aten.silu_backward(g, x),
        "sigmoid": lambda: aten.sigmoid(x),
        "tanh": lambda: aten.tanh(x),
        "exp": lambda: aten.exp(x),
        "log": lambda: aten.log(a),
        "erf": lambda: aten.erf(x),
        "sqrt": lambda: aten.sqrt(a),
        "rsqrt": lambda: aten.rsqrt(a),
        "_softmax": lambda: aten._softmax(x, -1, False),
        # scaled_dot_product_attention's math path: a softmax whose fully masked rows are 0
        "_safe_softmax": lambda: aten._safe_softmax(x, -1),
        "_log_softmax": lambda: aten._log_softmax(x, -1, False),
        "_softmax_backward_data": lambda: aten._softmax_backward_data(g, x, -1, x.dtype),
        "_log_softmax_backward_data": lambda: aten._log_softmax_backward_data(g, x, -1, x.dtype),
        # dropout's mask at a typical keep rate (0.9): one draw per element
        "bernoulli_": lambda: aten.bernoulli_(out, 0.9),
        "native_dropout": lambda: aten.native_dropout(x, 0.1, True),
        **_image_functions(x),
        **_layer_norms(x, g),
    }


def _layer_norms(x, g) -> dict:
    """Layer norm over each row (a token's features), forward and backward."""
    import torch

    aten = torch.ops.aten
    shape = [x.shape[-1]]
    w, b = torch.ones(shape, device=x.device), torch.zeros(shape, device=x.device)
    _, mean, rstd = aten.native_layer_norm(x, shape, w, b, 1e-5)
    return {
        "native_layer_norm": lambda: aten.native_layer_norm(x, shape, w, b, 1e-5),
        "native_layer_norm_backward": lambda: aten.native_layer_norm_backward(
            g, x, shape, mean, rstd, w, b, [True, True, True]),
    }  # fmt: skip


def _image_functions(x) -> dict:
    """Batch norm (training: the batch's statistics, then the normalisation) and max
    pooling, on (batch, channels, height, width) blocks of ELEMENTS elements as the recorder
    counts them (the output's; the input's gradient for a backward). Pooling is timed with
    the 3×3 window, stride 2, of ResNet's stem (He et al., "Deep Residual Learning", 2016),
    its input four times its output."""
    import torch

    aten = torch.ops.aten
    image = x.reshape(4, 16, 32, 32)  # ELEMENTS
    big = torch.cat([image] * 4, dim=-1).reshape(4, 16, 64, 64)  # pooled to ELEMENTS
    channels = image.shape[1]
    w, b = torch.ones(channels, device=x.device), torch.zeros(channels, device=x.device)
    mean, var = torch.zeros(channels, device=x.device), torch.ones(channels, device=x.device)
    _, saved_mean, saved_invstd = aten.native_batch_norm(image, w, b, mean, var, True, 0.1, 1e-5)
    window = ([3, 3], [2, 2], [1, 1])
    pooled, indices = aten.max_pool2d_with_indices(image, *window)
    grad = torch.ones_like(pooled)
    return {
        "native_batch_norm": lambda: aten.native_batch_norm(image, w, b, mean, var, True, 0.1,
                                                            1e-5),
        "native_batch_norm_backward": lambda: aten.native_batch_norm_backward(
            image, image, w, mean, var, saved_mean, saved_invstd, True, 1e-5, [True] * 3),
        "max_pool2d_with_indices": lambda: aten.max_pool2d_with_indices(big, *window),
        "max_pool2d_with_indices_backward": lambda: aten.max_pool2d_with_indices_backward(
            grad, image, *window, [1, 1], False, indices),
    }  # fmt: skip


# every function timed (a profile saved before one was added lacks it)
NAMES = ("gelu", "gelu[tanh]", "gelu_backward", "gelu_backward[tanh]", "silu", "silu_backward",
         "sigmoid", "tanh", "exp", "log", "erf", "sqrt", "rsqrt", "_softmax", "_safe_softmax",
         "_log_softmax", "_softmax_backward_data", "_log_softmax_backward_data", "bernoulli_",
         "native_dropout", "native_batch_norm", "native_batch_norm_backward",
         "max_pool2d_with_indices", "max_pool2d_with_indices_backward", "native_layer_norm",
         "native_layer_norm_backward")  # fmt: skip


@dataclass(frozen=True)
class FunctionTimes:
    elements: int
    best_s: dict[str, float]  # per function, for `elements` elements


ROUNDS = 4  # each function is timed in turns with the others, so a burst of load on a
# shared machine (a worker thread descheduled: a call stalls for a scheduler slice) spoils
# one turn of every function rather than every call of one
MIN_SAMPLES = 3  # per turn
MAX_SAMPLES = 10  # per turn: more calls in a row add no undisturbed turn, only stalls
QUICK_BUDGET_MS = 4.0  # per function, what a profile without a machine profile spends
FULL_SAMPLES = (10, 10_000)  # `ceiling bench` in full: per turn, as many as its budget holds


def time_functions(
    device: str = "cpu",
    budget_ms: float = 20.0,
    min_samples: int = MIN_SAMPLES,
    max_samples: int = MAX_SAMPLES,
    rounds: int = ROUNDS,
) -> FunctionTimes:
    """Best seconds of each function over ELEMENTS fp32 elements (a ROWS × COLS block),
    over `rounds` turns of all functions, each turn a share of `budget_ms` per function."""
    import torch

    gen = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(ROWS, COLS, generator=gen).to(device)
    g = torch.randn(ROWS, COLS, generator=gen).to(device)
    a = x.abs() + 0.5  # positive: log, sqrt and rsqrt of real numbers
    out = torch.empty_like(x)  # written in place (a dropout mask)
    best: dict[str, float] = {}
    for _ in range(rounds):
        for name, fn in _functions(x, g, a, out).items():
            times = benchmark(fn, device=device, warmup_ms=0.0, budget_ms=budget_ms / rounds,
                              min_samples=min_samples, max_samples=max_samples,
                              flush=None)  # fmt: skip
            best[name] = min(min(times), best.get(name, math.inf))
    return FunctionTimes(ELEMENTS, best)


def quick_function_times(device: str = "cpu") -> FunctionTimes:
    """time_functions at the quick budget, measured once per process, device and threads."""
    from ceiling.measure.once import measured_once

    return measured_once("functions", device, lambda: time_functions(device, QUICK_BUDGET_MS))
