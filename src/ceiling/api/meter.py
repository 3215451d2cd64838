"""MFU inside your own training loop: `ceiling.MfuMeter`.

    meter = ceiling.MfuMeter(model, spec="h100-sxm")   # or peak_flops_per_s=..., or the
    for batch in loader:                                #   saved machine profile (default)
        with meter.step(batch):
            loss = model(**batch).loss
            loss.backward(); opt.step(); opt.zero_grad()
    meter.mfu, meter.hfu, meter.tokens_per_s

The first step runs under the op recorder, which counts its model FLOPs (matmul and
attention, forward + backward, a multiply-add as 2, causal attention at the pairs its mask
keeps) and hardware FLOPs (recomputation included); it is not timed. Ops whose arithmetic
has no count are named (`unknown_ops`): MFU is then a lower bound. Every later step costs
two clock reads and a device sync. FLOPs per token are the counted step's; a step of another
size is scaled by its tokens.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ceiling.api.result import Result
from ceiling.errors import InvalidInput


def batch_tokens(batch: Any) -> tuple[int | None, str]:
    """(count, unit) of a batch: a dict's input_ids size in tokens, else the first tensor's
    leading dimension in samples."""
    import torch

    from ceiling.profile.targets import first_tensor

    ids = batch.get("input_ids") if isinstance(batch, Mapping) else None
    if isinstance(ids, torch.Tensor):
        return ids.numel(), "tokens"
    first = first_tensor(batch) if batch is not None else None
    if first is None:
        return None, "tokens"
    return (int(first.shape[0]) if first.dim() else 1), "samples"


@dataclass(frozen=True)
class MfuResult(Result):
    """MFU and HFU of the timed steps of a training loop, and what they rest on."""

    mfu: float | None
    hfu: float | None
    tokens_per_s: float | None
    steps_timed: int
    seconds_timed: float
    unit: str  # "tokens" or "samples"
    model_flops_per_step: float | None
    hardware_flops_per_step: float | None
    tokens_per_counted_step: int | None
    peak_flops_per_s: float | None
    peak_source: str | None
    devices: int
    # ops of the counted step whose arithmetic has no count: MFU is then a lower bound
    unknown_ops: tuple[str, ...] = ()
    title = "MFU of a training loop"

    @property
    def mfu_is_lower_bound(self) -> bool:
        return bool(self.unknown_ops)

    def record(self) -> dict[str, Any]:
        return {
            "mfu": self.mfu,
            "hfu": self.hfu,
            f"{self.unit}_per_s": self.tokens_per_s,
            "steps_timed": self.steps_timed,
            "seconds_timed": self.seconds_timed,
            "model_flops_per_step": self.model_flops_per_step,
            "hardware_flops_per_step": self.hardware_flops_per_step,
            f"{self.unit}_per_counted_step": self.tokens_per_counted_step,
            "peak_flops_per_s": self.peak_flops_per_s,
            "peak_source": self.peak_source,
            "devices": self.devices,
            "unknown_ops": list(self.unknown_ops),
            "mfu_is_lower_bound": self.mfu_is_lower_bound,
            "flop_convention": "a multiply-add counts as 2; peaks are dense",
        }

    def heading(self) -> str:
        if self.mfu is None:
            return f"MFU: no step timed yet ({self.steps_timed} timed)"
        at_least = "at least " if self.mfu_is_lower_bound else ""
        return f"MFU {at_least}{self.mfu:.1%} over {self.steps_timed} steps"


class MfuMeter:
    """MFU and HFU of your own training loop (see the module docstring).

    model: the nn.Module trained (its device and dtype pick the peak). peak_flops_per_s, or
    spec (a catalog device), or the saved machine profile / this machine's theoretical peak.
    dtype: the compute dtype when it differs from the weights' (autocast). devices: how many
    run the same step (data parallel), for MFU per device. warmup_steps: first steps left
    out of the timing, the counted one among them (at least 1)."""

    def __init__(
        self,
        model=None,
        *,
        peak_flops_per_s: float | None = None,
        spec: str | None = None,
        machine_profile: str | None = None,
        dtype: str | None = None,
        devices: int = 1,
        warmup_steps: int = 1,
        model_flops_per_step: float | None = None,
    ) -> None:
        if warmup_steps < 1:
            raise InvalidInput(f"warmup_steps must be ≥ 1 (the counted step), got {warmup_steps}")
        if not isinstance(devices, int) or devices < 1:
            raise InvalidInput(f"devices must be a whole number ≥ 1, got {devices!r}")
        if peak_flops_per_s is not None and spec is not None:
            raise InvalidInput("give the peak once: peak_flops_per_s or spec")
        from ceiling.hardware.resolve import check_one_device

        check_one_device(spec, machine_profile)  # the one device rule of every command
        if model is None and (model_flops_per_step is None or peak_flops_per_s is None):
            raise InvalidInput("without a model, give model_flops_per_step and peak_flops_per_s")
        self.model, self.devices, self.warmup_steps = model, devices, warmup_steps
        self._peak, self._peak_source = peak_flops_per_s, None
        if peak_flops_per_s is not None:
            self._peak_source = "given"
            from ceiling.model.mfu import utilisation

            utilisation(0.0, peak_flops_per_s)  # refuses a peak that is not a positive number
        self._spec, self._machine_profile, self._dtype = spec, machine_profile, dtype
        self._model_flops = model_flops_per_step
        self._hardware_flops = model_flops_per_step
        self._unknown_ops: tuple[str, ...] = ()
        self._counted_tokens: int | None = None
        self._unit = "tokens"
        self._seen = 0
        self._seconds = 0.0
        self._tokens = 0.0
        self._timed = 0

    @contextlib.contextmanager
    def step(self, batch: Any = None, *, tokens: int | None = None) -> Iterator[None]:
        """Wrap one training step; `batch` (or `tokens`) says how much it processed."""
        count, unit = (tokens, "tokens") if tokens is not None else batch_tokens(batch)
        if count is None:
            raise InvalidInput("MfuMeter.step needs the batch (or tokens=) to count throughput")
        self._seen += 1
        if self._model_flops is None:
            with self._counting():
                yield
            self._counted_tokens, self._unit = count, unit
            return
        if self._counted_tokens is None:
            self._counted_tokens, self._unit = count, unit
        if self._seen <= self.warmup_steps:
            yield
            return
        self._sync()
        t0 = time.perf_counter()
        yield
        self._sync()
        self._seconds += time.perf_counter() - t0
        self._tokens += count
        self._timed += 1

    @contextlib.contextmanager
    def _counting(self) -> Iterator[None]:
        from ceiling.profile.op_flops import UNKNOWN
        from ceiling.profile.recorder import OpRecorder

        with OpRecorder() as rec:
            yield
        self._model_flops, self._hardware_flops = rec.model_flops(), rec.hardware_flops()
        self._unknown_ops = tuple(sorted({c.op for c in rec.calls if c.category == UNKNOWN}))
        if not self._model_flops:
            if self._unknown_ops:
                raise InvalidInput(
                    "the counted step's work is in ops whose FLOPs ceiling cannot count ("
                    f"{', '.join(self._unknown_ops)}): give model_flops_per_step="
                )
            raise InvalidInput(
                "the counted step ran no matmul or attention: run the model's forward and "
                "backward inside `with meter.step(batch):`"
            )

    def _sync(self) -> None:
        device = self._device()
        if device is not None and device.type == "cuda":
            import torch

            torch.cuda.synchronize(device)

    def _device(self):
        if self.model is None:
            return None
        param = next(iter(self.model.parameters()), None)
        return param.device if param is not None else None

    def peak(self) -> tuple[float, str]:
        """The dense peak MFU is measured against, and where it comes from."""
        if self._peak is None:
            from ceiling.api.profile import model_place
            from ceiling.profile.ceiling import resolve_ceiling, tf32_enabled

            device = self._device()
            key = self._dtype or model_place(self.model)[1]
            tf32 = key == "fp32" and tf32_enabled(device)
            c = resolve_ceiling(device, key, tf32, self._spec, self._machine_profile)
            self._peak, self._peak_source = c.peak_flops_per_s, f"{c.name}, {c.source}"
        return self._peak, self._peak_source

    @property
    def tokens_per_s(self) -> float | None:
        return self._tokens / self._seconds if self._seconds > 0 else None

    def _utilisation(self, flops_per_step: float | None) -> float | None:
        if not self._timed or not flops_per_step or not self._counted_tokens:
            return None
        from ceiling.model.mfu import mfu

        peak, _ = self.peak()
        return mfu(self.tokens_per_s, flops_per_step / self._counted_tokens, peak, self.devices)

    @property
    def mfu(self) -> float | None:
        """Model FLOPs utilisation of the timed steps (None before any is timed)."""
        return self._utilisation(self._model_flops)

    @property
    def hfu(self) -> float | None:
        """Hardware FLOPs utilisation: recomputation counted."""
        return self._utilisation(self._hardware_flops)

    @property
    def unknown_ops(self) -> tuple[str, ...]:
        """Ops of the counted step whose arithmetic has no count (their FLOPs are missing)."""
        return self._unknown_ops

    @property
    def mfu_is_lower_bound(self) -> bool:
        """True when some of the counted step's arithmetic could not be counted."""
        return bool(self._unknown_ops)

    def result(self) -> MfuResult:
        timed = self._timed > 0
        peak, source = self.peak() if timed else (self._peak, self._peak_source)
        return MfuResult(
            mfu=self.mfu,
            hfu=self.hfu,
            tokens_per_s=self.tokens_per_s,
            steps_timed=self._timed,
            seconds_timed=self._seconds,
            unit=self._unit,
            model_flops_per_step=self._model_flops,
            hardware_flops_per_step=self._hardware_flops,
            tokens_per_counted_step=self._counted_tokens,
            peak_flops_per_s=peak,
            peak_source=source,
            devices=self.devices,
            unknown_ops=self._unknown_ops,
        )

    def to_dict(self) -> dict[str, Any]:
        return self.result().to_dict()

    def _repr_html_(self) -> str:
        return self.result()._repr_html_()
