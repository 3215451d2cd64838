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
at half the rows reads as host time here, as does a call's own fixed device work (packing a
weight, waking threads), which the op's measured rate already prices: an overestimate of
at most those parts. Turns that disagree by more than the host time left (their
interquartile range) give no figure: the machine is then too noisy to tell it.

The figure is a mean over the forward's ops, views included. It replaces a figure that
prices a view below another op (torch's own modules'): both are scaled by the one factor,
the model's host time over theirs for the same ops, so a view still costs less.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from ceiling.errors import InvalidInput

TORCH_MODULES = "torch's own modules"  # the figure a training step's forward replaces


@dataclass(frozen=True)
class ForwardHost:
    """The model's host seconds per forward op, and what they came from."""

    per_op_s: float  # the mean over the forward's ops, views included
    fixed_s: float  # the forward's time that does not grow with the batch (median turn)
    weights_s: float  # of it, reading the weights once: device work, taken off
    ops: int  # forward ops the host time is spread over
    samples: int  # the batch timed, and half of it
    half: int
    turns: int
    spread_s: float = 0.0  # interquartile range of the turns' fixed parts
    # the figure it replaces, as a mean over the same ops, and whose figure that is
    replaced_s: float = 0.0
    replaced: str = ""

    @property
    def times(self) -> float | None:
        """The model's host time over the figure it replaces (None: nothing replaced)."""
        return self.per_op_s / self.replaced_s if self.replaced_s > 0 else None

    def row(self) -> dict:
        return {
            "per_op_s": self.per_op_s,
            "fixed_s": self.fixed_s,
            "weights_s": self.weights_s,
            "spread_s": self.spread_s,
            "ops": self.ops,
            "samples": self.samples,
            "half": self.half,
            "turns": self.turns,
            "replaced_s": self.replaced_s,
            "replaced": self.replaced,
        }

    def describe(self) -> str:
        """Where the figure comes from, and the one it replaces."""
        beside = f"; {self.replaced} {self.replaced_s * 1e6:.3g} µs" if self.replaced_s > 0 else ""
        return (
            f"this model's own, a mean over its {self.ops:,} forward ops: the forward's time "
            f"that does not grow with the batch (batch {self.samples} against {self.half}, "
            f"median of {self.turns} turns, less {self.weights_s * 1e3:.2g} ms reading the "
            f"weights){beside}"
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
    replaced_s: float = 0.0,
    replaced: str = "",
) -> ForwardHost | None:
    """The model's host seconds per forward op from turns of (forward at `samples`, forward
    at `half`) seconds; None when there is nothing to spread it over, when nothing is left
    once the weights' reading is taken off (the forward's work then hides it), or when the
    turns disagree by more than what is left (a machine too noisy to tell)."""
    if ops <= 0 or not turns:
        return None
    fixed = [fixed_time_s(f, h, samples, half) for f, h in turns]
    median = statistics.median(fixed)
    host = median - max(weights_s, 0.0)
    spread = _interquartile(fixed)
    if host <= 0 or spread > host:
        return None
    return ForwardHost(host / ops, median, weights_s, ops, samples, half, len(turns), spread,
                       replaced_s, replaced)  # fmt: skip


def _interquartile(values: list[float]) -> float:
    if len(values) < 4:
        return 0.0
    q1, _q2, q3 = statistics.quantiles(values, n=4)
    return q3 - q1


def python_hint(host: ForwardHost | None, step_s: float | None) -> list[str]:
    """A line when the model's own Python costs well over torch's modules per op (1.5× or
    more) and a tenth of the step or more."""
    times = host.times if host is not None and host.replaced == TORCH_MODULES else None
    if times is None or not step_s:
        return []
    total = host.per_op_s * host.ops
    if times < 1.5 or total < 0.1 * step_s:
        return []
    return [
        f"the model's own Python: its forward pays {host.per_op_s * 1e6:.3g} µs of host time "
        f"an op, {times:.2g}× what torch's own modules pay for the same ops "
        f"({host.replaced_s * 1e6:.3g} µs), {total * 1e3:.3g} ms of the {step_s * 1e3:.3g} ms "
        "step; torch.compile traces it away"
    ]
