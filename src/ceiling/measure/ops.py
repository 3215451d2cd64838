"""Time the ops that `ceiling roofline --measure` places on the roofline, on a real device."""

from __future__ import annotations

import math
from typing import Any

from ceiling.errors import UnsupportedOnDevice
from ceiling.measure import machine
from ceiling.measure.stats import Stats, summarize
from ceiling.measure.timer import benchmark
from ceiling.model.opcost import OpCost
from ceiling.vocabulary import torch_dtype

MEASURABLE_DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16")
MAX_INPUT_SETS = 4


def _operands(op: OpCost, dtype, device: str, gen) -> tuple[Any, ...]:
    import torch

    def randn(*shape):
        return torch.randn(*shape, generator=gen, device=device, dtype=torch.float32).to(dtype)

    if op.kind == "add":
        (n,) = op.shape
        return (randn(n), randn(n), torch.empty(n, dtype=dtype, device=device))
    if op.kind == "matvec":
        n, _ = op.shape
        return (randn(n, n), randn(n), torch.empty(n, dtype=dtype, device=device))
    if op.kind == "matmul":
        m, n, k = op.shape
        return (randn(m, k), randn(k, n), torch.empty(m, n, dtype=dtype, device=device))
    b, h, s, d = op.shape
    return (randn(b, h, s, d), randn(b, h, s, d), randn(b, h, s, d))


def _kernel(kind: str):
    import torch
    import torch.nn.functional as F

    if kind == "add":
        return lambda ops: torch.add(ops[0], ops[1], out=ops[2])
    if kind == "matvec":
        return lambda ops: torch.mv(ops[0], ops[1], out=ops[2])
    if kind == "matmul":
        return lambda ops: torch.matmul(ops[0], ops[1], out=ops[2])
    if kind == "attention-naive":

        def naive(ops):
            q, k, v = ops
            # The S x S scores and probabilities go through memory: the naive form.
            scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
            return torch.matmul(torch.softmax(scores, dim=-1), v)

        return naive
    return lambda ops: F.scaled_dot_product_attention(*ops)


def time_op(
    op: OpCost, device: str = "cpu", *, warmup_ms: float = 20.0, budget_ms: float = 1000.0
) -> Stats:
    """Seconds per call of the op on `device`; small ops rotate inputs so caches don't help."""
    import torch

    if op.dtype not in MEASURABLE_DTYPES:
        raise UnsupportedOnDevice(
            f"--measure supports {', '.join(MEASURABLE_DTYPES)}; not {op.dtype}"
        )
    if op.dtype == "tf32" and not machine.is_cuda(device):
        raise UnsupportedOnDevice("tf32 is a GPU tensor-core mode; measure fp32 on a CPU")
    dtype = torch_dtype(op.dtype)
    # The operands and outputs are op.bytes; drawing in float32 first needs up to twice that.
    machine.check_fits(2.0 * op.bytes, device, op.name)
    gen = torch.Generator(device=device).manual_seed(0)
    sets = [_operands(op, dtype, device, gen)]
    llc = machine.last_level_cache_bytes(device)
    want = min(MAX_INPUT_SETS, math.ceil(2 * llc / op.bytes)) if not machine.is_cuda(device) else 1
    free = machine.free_memory_bytes(device)
    if free is not None:
        want = min(want, max(1, int(machine.FIT_SHARE * free // op.bytes)))
    while len(sets) < want:
        sets.append(_operands(op, dtype, device, gen))
    with machine.float32_matmul_mode(tf32=op.dtype == "tf32"), torch.no_grad():
        samples = benchmark(
            _kernel(op.kind),
            device=device,
            warmup_ms=warmup_ms,
            budget_ms=budget_ms,
            inputs=sets,
            min_samples=5,
        )
    return summarize(samples)
