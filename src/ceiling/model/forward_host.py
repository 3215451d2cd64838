"""A model's own host time per forward op, from its forward timed at two batch sizes.

An eager forward pays, beside each op's work, the host's part: the model's own Python
around the op (attribute lookups, shape arithmetic, the output objects it builds), the
dispatch and the recording of the autograd graph. torch's own modules cost about the same
per op whatever the model (measure.host_costs times them); a model's own Python does not.
On one CPU a Hugging Face transformer's forward measured 13-27 µs of host per op, torch's
Linear/LayerNorm/GELU stack 22, and a Mamba block's scan of tiny elementwise ops 3.5.

The work of a forward grows with its batch; the host's part does not. With the forward
timed at `samples` and at `half` of them, turn about,

    t(n) = fixed + n · per_sample   =>   fixed = (samples · t(half) − half · t(samples))
                                                 / (samples − half)

(2 · t(half) − t(samples) for an even batch). `fixed` also holds the forward's work that
does not grow with the batch: reading the weights once, which is device work, so it is
taken off. What is left, over the forward's ops, is the model's host time per op. Each
turn gives one estimate; their median is kept, so that a burst of load on a shared
machine spoils a turn, not the figure.

It assumes the forward's work is linear in the batch: a matmul that runs less efficiently
at half the rows reads as host time here, an overestimate of at most the difference.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from ceiling.errors import InvalidInput


@dataclass(frozen=True)
class ForwardHost:
    """The model's host seconds per forward op, and what they came from."""

    per_op_s: float
    fixed_s: float  # the forward's time that does not grow with the batch (median turn)
    weights_s: float  # of it, reading the weights once: device work, taken off
    ops: int  # forward ops the host time is spread over
    samples: int  # the batch timed, and half of it
    half: int
    turns: int
    torch_modules_s: float = 0.0  # the figure it replaces: torch's own modules' (0: none)

    def row(self) -> dict:
        return {
            "per_op_s": self.per_op_s,
            "fixed_s": self.fixed_s,
            "weights_s": self.weights_s,
            "ops": self.ops,
            "samples": self.samples,
            "half": self.half,
            "turns": self.turns,
            "torch_modules_s": self.torch_modules_s,
        }

    def describe(self) -> str:
        """Where the figure comes from, and the one it replaces."""
        beside = (
            f"; torch's own modules {self.torch_modules_s * 1e6:.3g} µs"
            if self.torch_modules_s
            else ""
        )
        return (
            f"this model's own: its forward timed at batch {self.samples} and {self.half}, "
            f"{self.turns} turns, the part that does not grow with the batch over its "
            f"{self.ops:,} ops{beside}"
        )


def fixed_time_s(full_s: float, half_s: float, samples: int, half: int) -> float:
    """The part of a forward's time that does not grow with the batch, from its times at
    `samples` and at `half` of them (a line through the two points, at batch 0)."""
    if not 0 < half < samples:
        raise InvalidInput(f"need 0 < half < samples, got {half} and {samples}")
    return (samples * half_s - half * full_s) / (samples - half)


def forward_host(
    turns: list[tuple[float, float]],
    ops: int,
    samples: int,
    half: int,
    weights_s: float = 0.0,
    torch_modules_s: float = 0.0,
) -> ForwardHost | None:
    """The model's host seconds per forward op from turns of (forward at `samples`, forward
    at `half`) seconds; None when there is nothing to spread it over or nothing is left
    once the weights' reading is taken off (the forward's work then hides it)."""
    if ops <= 0 or not turns:
        return None
    fixed = statistics.median(fixed_time_s(f, h, samples, half) for f, h in turns)
    host = fixed - max(weights_s, 0.0)
    if host <= 0:
        return None
    return ForwardHost(host / ops, fixed, weights_s, ops, samples, half, len(turns),
                       torch_modules_s)  # fmt: skip


def python_hint(host: ForwardHost | None, step_s: float | None, compiled: bool) -> list[str]:
    """A line when the model's own Python costs well over torch's modules per op (1.5× or
    more) and a tenth of the step or more."""
    if host is None or not step_s or not host.torch_modules_s:
        return []
    total = host.per_op_s * host.ops
    times = host.per_op_s / host.torch_modules_s
    if times < 1.5 or total < 0.1 * step_s:
        return []
    cure = "" if compiled else "; torch.compile traces it away"
    return [
        f"the model's own Python: its forward pays {host.per_op_s * 1e6:.3g} µs of host time "
        f"an op, {times:.2g}× torch's own modules ({host.torch_modules_s * 1e6:.3g} µs), "
        f"{total * 1e3:.3g} ms of the {step_s * 1e3:.3g} ms step{cure}"
    ]
