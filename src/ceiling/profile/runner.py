"""One step of a workload on a device, and the guard that turns its failures into
one-line errors (out of memory -> DoesNotFit)."""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

import torch

from ceiling import usercode
from ceiling.errors import CeilingError, DoesNotFit, InvalidInput, UnsupportedOnDevice
from ceiling.profile.recorder import OpRecorder
from ceiling.profile.targets import (
    Workload,
    is_out_of_memory,
    move_batch,
    one_line,
    run_forward,
)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class StepRunner:
    """One training (or inference) step of a workload, on its device."""

    def __init__(self, workload: Workload, device: torch.device, dtype: torch.dtype, train: bool):
        self.device, self.train = device, train
        if device.type == "meta":
            # fake CPU tensors, not bare meta ones: shapes only, but ops pick the kernels a
            # CPU would (fused attention rather than its unfused math fallback)
            from torch._subclasses.fake_tensor import FakeTensorMode

            from ceiling.profile import shadow_values

            self.fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
            # buffers made from positions (a causal mask) keep their values, read as on a CPU
            on_meta, buffers = shadow_values.build_keeping_buffers(workload.build, device, dtype)
            with self.fake_mode:
                self.model = on_meta.to_empty(device="cpu")
                self.batch = move_batch(workload.batch, torch.device("cpu"), dtype)
            shadow_values.give_buffers(self.model, buffers)
        else:
            self.fake_mode = None
            self.model = workload.build(device, dtype)
            self.batch = move_batch(workload.batch, device, dtype)
        self.model.train(train)
        self.loss_fn = workload.loss_fn
        self.forward = workload.forward
        # meta tensors hold no values: an optimizer step (which reads its step count) cannot
        # run there, so a meta step is forward + backward only
        self.optimizer = workload.make_optimizer(self.model) if train else None
        if device.type == "meta":
            self.optimizer = None

    def step(self, recorder: OpRecorder | None = None, batch: Any = None) -> None:
        if self.fake_mode is not None:
            with self.fake_mode, quiet_fake_tensor_log():
                self._step(recorder, batch)
        else:
            self._step(recorder, batch)

    def _step(self, recorder: OpRecorder | None, batch: Any) -> None:
        batch = self.batch if batch is None else batch
        if not self.train:
            with torch.no_grad():
                run_forward(self.model, batch, self.forward)
            return
        if self.optimizer is not None:
            self.optimizer.zero_grad(set_to_none=True)
        self._loss(batch).backward()
        if self.optimizer is None:
            return
        if recorder is None:
            self.optimizer.step()
        else:
            with recorder.phase("optimizer"):
                self.optimizer.step()

    def forward_only(self, batch: Any = None) -> None:
        """The step's forward alone (with its loss when training), its graph then dropped."""
        if not self.train:  # an inference step is its forward
            self._step(None, batch)
            return
        self._loss(self.batch if batch is None else batch)

    def _loss(self, batch: Any):
        """The training step's forward and its loss (the step's and forward_only's)."""
        return self.loss_fn(run_forward(self.model, batch, self.forward), batch)

    def timed_steps(self, n: int) -> list[float]:
        out = []
        for _ in range(n):
            sync(self.device)
            t0 = time.perf_counter()
            self.step()
            sync(self.device)
            out.append(time.perf_counter() - t0)
        return out


@contextlib.contextmanager
def quiet_fake_tensor_log():
    """torch logs a failed fake-tensor op with its whole stack before raising; the error
    that follows is told in one line instead."""
    log = logging.getLogger("torch._subclasses.fake_tensor")
    before = log.disabled
    log.disabled = True
    try:
        yield
    finally:
        log.disabled = before


def meta_failure(exc: BaseException) -> str | None:
    """Why a model cannot be counted on shapes alone, when that is why it failed."""
    from torch._subclasses.fake_tensor import (
        DataDependentOutputException,
        DynamicOutputShapeException,
    )

    text = str(exc)
    if "Expected inputs of BF16 type" in text:
        return (
            "on --device meta torch checks grouped matmuls (mixture-of-experts layers) by the "
            "GPU kernel's rule, bf16 only: add --dtype bf16 (FLOP counts do not depend on it)"
        )
    data_dependent = (DataDependentOutputException, DynamicOutputShapeException)
    if isinstance(exc, data_dependent) or "data-dependent" in text.lower():
        return (
            "its forward depends on tensor values (e.g. routing tokens to experts), which "
            "--device meta does not have: count it on the CPU with a smaller config"
        )
    return None


def guard(target: str, fn, *args, **kwargs):
    """Run user code; out-of-memory becomes DoesNotFit, other failures one-line errors."""
    try:
        return fn(*args, **kwargs)
    except CeilingError:
        raise
    except (Exception, SystemExit) as exc:
        if is_out_of_memory(exc):
            raise DoesNotFit(f"{target} does not fit in memory: {one_line(exc)[:200]}") from None
        why = meta_failure(exc)
        if why:
            raise UnsupportedOnDevice(f"{target} cannot be counted on meta: {why}") from None
        if usercode.raised_in_user_code(exc):  # their forward or loss: their line
            raise usercode.failure(target, exc, " (while running)") from None
        raise InvalidInput(f"{target} failed while running: {one_line(exc)[:300]}") from None
