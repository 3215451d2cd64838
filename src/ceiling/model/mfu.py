"""Model and hardware FLOPs utilisation (MFU, HFU) of a training run.

MFU = achieved model FLOP/s / (devices × dense peak FLOP/s of the dtype in use)
    = tokens/s × model FLOPs per token / (devices × peak)          (PaLM, Appendix B)

Model FLOPs are the work the model needs: forward + backward, a multiply-add counted as 2,
recomputation excluded. HFU uses hardware FLOPs instead: everything the device executed,
recomputed activations included, so HFU ≥ MFU and the two differ exactly by the recompute.
Peaks are dense figures passed in as data; nothing here knows a device.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ceiling.errors import InvalidInput
from ceiling.model.attention import attention_flops

# The op categories whose FLOPs are model FLOPs (MFU's numerator); the rest is overhead.
MODEL_CATEGORIES = ("matmul", "attention")

# Attention conventions for the scores (Q·Kᵀ) and weighted sum (·V) matmuls:
# "full" counts every position pair (PaLM's 12·l·a·d·s; published MFU figures use it);
# "causal-half" counts the pairs a causal mask keeps, about half of them.
ATTENTION_CONVENTIONS = ("full", "causal-half")


def _positive(value: float, name: str) -> float:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise InvalidInput(f"{name} must be a positive number, got {value}")
    return float(value)


def _non_negative(value: float, name: str) -> float:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
        raise InvalidInput(f"{name} must be ≥ 0, got {value}")
    return float(value)


def attention_training_flops_per_token(
    layers: int, seq_len: int, attention_width: int, convention: str = "full"
) -> float:
    """12·l·(a·d)·s: forward 2·(a·d)·s for the scores + 2·(a·d)·s for the values, ×3 for
    forward + backward. a·d is heads × head dim (not always the hidden size: PaLM 540B has
    48 × 256 = 12288 against h = 18432). "causal-half" halves it."""
    if convention not in ATTENTION_CONVENTIONS:
        raise InvalidInput(
            f"attention convention must be one of {', '.join(ATTENTION_CONVENTIONS)}, "
            f"got {convention!r}"
        )
    layers = _non_negative(layers, "layers")
    s = _non_negative(seq_len, "sequence length")
    width = _non_negative(attention_width, "attention width")
    return 3.0 * layers * attention_flops(1, s, width, causal=convention == "causal-half")


def training_flops_per_token(
    params: float,
    layers: int,
    seq_len: int,
    attention_width: int,
    convention: str = "full",
) -> float:
    """6·N + 12·l·(a·d)·s model FLOPs per trained token (PaLM, Appendix B).

    6·N: 2 per multiply-add × N weights forward, twice that backward (input and weight
    gradients). N is the parameter count as the published figure states it.
    """
    return 6.0 * _non_negative(params, "parameters") + attention_training_flops_per_token(
        layers, seq_len, attention_width, convention
    )


# model FLOPs: a count, or counts per dtype; a peak: FLOP/s, or a function of the dtype
Flops = float | Mapping[str, float]
Peak = float | Callable[[str], float | None]


def model_flops_utilisation(
    model_flops: Flops, seconds: float, datasheet_peak: Peak, devices: float = 1
) -> float | None:
    """THE MFU of ceiling, the one `profile`, `MfuMeter`, `trace`, `step` and `report` say:
    model FLOPs over the time they need at the dense datasheet peak (the theoretical peak,
    for a CPU) of the dtype the matmuls ran in, divided by the time taken, per device.

    `model_flops`: a count, or counts per dtype (each at its own peak); `datasheet_peak`:
    that peak, or a function of the dtype. A measured matmul rate passed here instead gives
    the share "of achievable" (`of_achievable`), never MFU. None when a dtype has no peak.
    """
    _positive(seconds, "step time")
    _positive(devices, "device count")
    flops = model_flops if isinstance(model_flops, Mapping) else {"": model_flops}
    at_peak = 0.0
    for dtype, f in flops.items():
        peak = datasheet_peak(dtype) if callable(datasheet_peak) else datasheet_peak
        if peak is None:
            return None
        at_peak += _non_negative(f, "model FLOPs") / _positive(peak, "MFU: peak FLOP/s")
    return at_peak / (seconds * devices)


def of_achievable(
    model_flops: Flops, seconds: float, measured_peak: Peak, devices: float = 1
) -> float | None:
    """The same ratio against a measured matmul rate (a machine profile's): the share of what
    this machine achieves, shown beside MFU and never called MFU or the peak."""
    return model_flops_utilisation(model_flops, seconds, measured_peak, devices)


def utilisation(
    flops_per_s: float, peak_flops_per_s: float, devices: float = 1, *, name: str = "MFU"
) -> float:
    """Achieved FLOP/s over devices × dense peak: a fraction (may exceed 1 only if the peak
    or the FLOP count is wrong, which is then worth seeing, so it is not clipped)."""
    _non_negative(flops_per_s, f"{name}: achieved FLOP/s")
    _positive(peak_flops_per_s, f"{name}: peak FLOP/s")
    _positive(devices, f"{name}: device count")
    return flops_per_s / (devices * peak_flops_per_s)


def mfu(
    tokens_per_s: float, model_flops_per_token: float, peak_flops_per_s: float, devices: float = 1
) -> float:
    """Model FLOPs utilisation from throughput: tokens/s × FLOPs/token / (devices × peak)."""
    _non_negative(tokens_per_s, "tokens/s")
    _non_negative(model_flops_per_token, "model FLOPs per token")
    _positive(peak_flops_per_s, "MFU: peak FLOP/s")
    # one second of the run: tokens/s × FLOPs/token model FLOPs
    return model_flops_utilisation(
        tokens_per_s * model_flops_per_token, 1.0, peak_flops_per_s, devices
    )


def step_utilisation(
    flops_per_step: float, step_s: float, peak_flops_per_s: float, devices: float = 1
) -> float:
    """The same ratio from one step: FLOPs per step / step time / (devices × peak)."""
    _non_negative(flops_per_step, "FLOPs per step")
    _positive(peak_flops_per_s, "MFU: peak FLOP/s")
    return model_flops_utilisation(flops_per_step, step_s, peak_flops_per_s, devices)


def peak_key(dtype: str, tf32_enabled: bool, device_kind: str) -> str:
    """Which dense peak applies: fp32 matmuls run on TF32 tensor cores only when TF32 is
    enabled and the device is a GPU; every other dtype maps to itself."""
    if dtype == "fp32" and tf32_enabled and device_kind == "gpu":
        return "tf32"
    return dtype


@dataclass
class MfuAccumulator:
    """MFU from step times and tokens you time yourself: feed it, read mfu/hfu.
    (`ceiling.MfuMeter` times and counts a live model's steps for you.)

    meter = MfuAccumulator(model_flops_per_token=6 * n_params, peak_flops_per_s=989e12)
    meter.step(seconds, tokens)   # after each step, once warm
    meter.mfu

    `hardware_flops_per_token` (defaults to the model figure) adds recomputation for HFU.
    """

    model_flops_per_token: float
    peak_flops_per_s: float
    devices: float = 1
    hardware_flops_per_token: float | None = None
    skip_first: int = 0
    _seconds: float = field(default=0.0, init=False, repr=False)
    _tokens: float = field(default=0.0, init=False, repr=False)
    _seen: int = field(default=0, init=False, repr=False)

    def __post_init__(self) -> None:
        _positive(self.model_flops_per_token, "model FLOPs per token")
        _positive(self.peak_flops_per_s, "peak FLOP/s")
        _positive(self.devices, "device count")
        if self.hardware_flops_per_token is not None and (
            self.hardware_flops_per_token < self.model_flops_per_token
        ):
            raise InvalidInput(
                f"hardware FLOPs per token ({self.hardware_flops_per_token:g}) cannot be below "
                f"model FLOPs per token ({self.model_flops_per_token:g}): recompute only adds"
            )

    def step(self, seconds: float, tokens: float) -> None:
        _positive(seconds, "step time")
        _non_negative(tokens, "tokens")
        self._seen += 1
        if self._seen <= self.skip_first:  # warm-up steps (compilation, caches) are not kept
            return
        self._seconds += seconds
        self._tokens += tokens

    @property
    def tokens_per_s(self) -> float:
        return self._tokens / self._seconds if self._seconds > 0 else 0.0

    @property
    def mfu(self) -> float:
        return mfu(
            self.tokens_per_s, self.model_flops_per_token, self.peak_flops_per_s, self.devices
        )

    @property
    def hfu(self) -> float:
        hw = self.hardware_flops_per_token or self.model_flops_per_token
        return mfu(self.tokens_per_s, hw, self.peak_flops_per_s, self.devices)
