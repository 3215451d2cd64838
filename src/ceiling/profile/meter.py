"""FLOPs of one step of a model, for MFU in your own training loop.

`ceiling.MfuMeter` (`api/meter.py`) does it all inside the loop: it counts the first step
under the op recorder and times the rest. By hand, with the pure meter:

    from ceiling.profile.meter import count_step_flops
    from ceiling.model.mfu import MfuAccumulator

    flops = count_step_flops(model, (x, y), loss_fn=lambda out, batch: out.loss)
    meter = MfuAccumulator(model_flops_per_token=flops.model / tokens_per_step,
                     hardware_flops_per_token=flops.hardware / tokens_per_step,
                     peak_flops_per_s=989e12, skip_first=2)
    for batch in loader:
        t0 = time.perf_counter(); step(batch); torch.cuda.synchronize()
        meter.step(time.perf_counter() - t0, tokens_per_step)
    print(meter.mfu, meter.hfu)

The count runs one forward and backward under the op recorder (no optimizer step; the
gradients the model had before are put back). A "meta" model is counted without running:
a copy of it runs on fake CPU tensors (shapes only), so that ops pick the kernels a CPU
would (fused attention, whose causal half is counted, rather than its unfused fallback).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Mapping
from dataclasses import dataclass

from ceiling.profile.recorder import OpRecorder
from ceiling.profile.targets import as_args, default_loss, run_forward


@dataclass(frozen=True)
class StepFlops:
    model: float  # matmul + attention, recomputation excluded (MFU)
    hardware: float  # recomputation included (HFU)
    other: float  # elementwise, normalisation, reductions (not in MFU)


def count_step_flops(model, batch, loss_fn=None, train: bool = True, forward=None) -> StepFlops:
    """FLOPs of one step of `model` on `batch` (a multiply-add counted as 2); `forward`
    (model, batch) -> output, default model(*batch)."""
    import torch

    loss_fn = loss_fn or default_loss
    params = list(model.parameters())
    grads_before = [p.grad for p in params]  # a user's accumulated gradients survive the count
    if train:
        for p in params:  # backward would add into them in place
            p.grad = None
    fake = None
    if any(p.device.type == "meta" for p in model.parameters()):
        fake, model, batch = _on_fake_cpu(model, batch)
    with OpRecorder() as rec, fake if fake is not None else contextlib.nullcontext():
        if train:
            loss_fn(run_forward(model, batch, forward), batch).backward()
        else:
            with torch.no_grad():
                run_forward(model, batch, forward)
    if train:
        for p, g in zip(params, grads_before, strict=True):
            p.grad = g
    total = rec.totals().flops
    return StepFlops(rec.model_flops(), rec.hardware_flops(), total - rec.hardware_flops())


def _on_fake_cpu(model, batch):
    """A copy of a meta model, and the batch, as fake CPU tensors (the caller's stay meta)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    clone = copy.deepcopy(model)

    def fake(x):
        return torch.empty_like(x, device="cpu") if isinstance(x, torch.Tensor) else x

    with mode:
        clone = clone.to_empty(device="cpu")
        if isinstance(batch, Mapping):
            return mode, clone, {k: fake(v) for k, v in batch.items()}
        args = tuple(fake(x) for x in as_args(batch))
    return mode, clone, args if isinstance(batch, (tuple, list)) else args[0]
