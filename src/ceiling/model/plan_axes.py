"""The planner's axes, each declared once: name, `--fixed` key, valid values, what it splits.

A training plan is one value per axis (like torchtitan's ParallelDims). Everything that
lists the axes — the Plan's validation and description, `--fixed` parsing, the candidate
arrays the search evaluates, the JSON of a plan — reads this table. The cost terms of an
axis live in `parallel.evaluate_arrays` (memory, time) and its cross-axis validity rules in
`parallel.check_plan` (and, for the search, `plan_search.enumerate_plans`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ceiling.errors import InvalidInput

RECOMPUTE = ("none", "selective", "full")
STATE_BYTES = (16, 18)
_ON = ("on", "true", "1", "yes")
_OFF = ("off", "false", "0", "no")


def _whole(minimum: int) -> Callable[[object], bool]:
    def ok(value: object) -> bool:
        whole = isinstance(value, (int, np.integer)) and not isinstance(value, bool)
        return whole and value >= minimum

    return ok


@dataclass(frozen=True)
class Axis:
    """One dimension of a plan."""

    field: str  # the Plan attribute and the plan JSON key
    key: str  # the `--fixed` key and the candidate arrays' key
    splits: str  # what the axis divides, in words
    values: str  # the valid values, in words (error messages)
    valid: Callable[[object], bool]
    default: object
    aliases: tuple[str, ...] = ()
    choices: tuple = ()  # a value's array code is its index here (empty: the value itself)
    shown: str | None = None  # label in a plan's one-line description; None: the key

    def check(self, value: object) -> None:
        if not self.valid(value):
            raise InvalidInput(f"{self.field} must be {self.values}, got {value!r}")

    def encode(self, value):
        return self.choices.index(value) if self.choices else value

    def decode(self, code):
        if self.choices:
            return self.choices[int(code)]
        return bool(code) if isinstance(self.default, bool) else int(code)

    def parse(self, text: str):
        """A `--fixed` value, validated."""
        text = text.strip().lower()
        if self.choices:
            if text not in self.choices:
                raise InvalidInput(
                    f"--fixed: {self.key} must be one of {self.values}, got {text!r}"
                )
            return text
        if isinstance(self.default, bool):
            if text not in _ON + _OFF:
                raise InvalidInput(f"--fixed: {self.key} must be on or off, got {text!r}")
            return text in _ON
        if self.key == "zero" and text == "fsdp":
            return 3
        try:
            num = float(text)
        except ValueError:
            raise InvalidInput(f"--fixed: {self.key}={text!r} is not a number") from None
        if not num.is_integer() or num < 0:
            raise InvalidInput(f"--fixed: {self.key}={text!r} must be a positive whole number")
        if not self.valid(int(num)):
            raise InvalidInput(f"--fixed: {self.key} must be {self.values}, got {text}")
        return int(num)


AXES: tuple[Axis, ...] = (
    Axis("d", "d", "the global batch into replicas (data parallelism)", "a whole number ≥ 1",
         _whole(1), 1),
    Axis("t", "t", "each layer's heads, KV heads and FFN width over devices (tensor "
         "parallelism)", "a whole number ≥ 1", _whole(1), 1),
    Axis("p", "p", "the layers into consecutive stages (pipeline parallelism)",
         "a whole number ≥ 1", _whole(1), 1),
    Axis("micro_batch", "micro_batch", "a replica's batch into micro-batches of this many "
         "sequences", "a whole number ≥ 1", _whole(1), 1, aliases=("b", "mb"), shown="b"),
    Axis("v", "v", "each stage into v interleaved chunks (interleaved 1F1B)",
         "a whole number ≥ 1", _whole(1), 1),
    Axis("ep", "ep", "the experts over ep of the d replicas (expert parallelism)",
         "a whole number ≥ 1", _whole(1), 1),
    Axis("zero", "zero", "optimizer state (1), gradients (2) and weights (3 = FSDP) over d",
         "0, 1, 2 or 3 (3 = FSDP)", lambda z: z in (0, 1, 2, 3), 0),
    Axis("recompute", "recompute", "activations kept (none) or rebuilt in the backward",
         ", ".join(RECOMPUTE), lambda r: r in RECOMPUTE, "selective", choices=RECOMPUTE),
    Axis("sequence_parallel", "sp", "norms, dropout and residuals over the t devices "
         "(sequence parallelism)", "on or off", lambda s: isinstance(s, (bool, np.bool_)),
         True, aliases=("sequence_parallel",)),
    Axis("state_bytes_per_param", "state_bytes", "nothing: weights + gradients + Adam state "
         "per parameter", "16 or 18 (2+2+12 as ZeRO counts; 2+4+12 with fp32 gradients)",
         lambda s: s in STATE_BYTES, 18, aliases=("state",)),
)  # fmt: skip
BY_KEY: dict[str, Axis] = {a.key: a for a in AXES}
FIXED_KEYS: dict[str, str] = {name: a.key for a in AXES for name in (a.key, a.field, *a.aliases)}


def parse_fixed(text: str | None) -> dict:
    """'d=32,t=8,p=2,recompute=full,zero=fsdp,sp=off' -> {'d': 32, ...} (validated)."""
    out: dict = {}
    known = ", ".join(BY_KEY)
    for part in filter(None, (x.strip() for x in (text or "").split(","))):
        if "=" not in part:
            raise InvalidInput(f"--fixed: expected KEY=VALUE, got {part!r} (keys: {known})")
        name, value = (x.strip().lower() for x in part.split("=", 1))
        if name not in FIXED_KEYS:
            raise InvalidInput(f"--fixed: unknown key {name!r}; known: {known} (b = micro_batch)")
        key = FIXED_KEYS[name]
        out[key] = BY_KEY[key].parse(value)
    return out


def plan_fields(plan) -> dict:
    """A plan's axes as {field: value}: its JSON everywhere."""
    return {a.field: getattr(plan, a.field) for a in AXES}


def describe(plan) -> str:
    """'d=16,t=8,p=2,b=1,zero=1,recompute=full,sp=on': the axes that say something."""
    parts = []
    for a in AXES:
        value = getattr(plan, a.field)
        if a.field in ("v", "ep") and value == 1:
            continue
        if a.field == "sequence_parallel":
            if plan.t == 1:
                continue
            value = "on" if value else "off"
        if a.field == "state_bytes_per_param":
            continue
        parts.append(f"{a.shown or a.key}={value}")
    return ",".join(parts)


def plans_to_arrays(plans: Sequence) -> dict[str, np.ndarray]:
    """Plans as the candidate arrays `parallel.evaluate_arrays` takes (axis key -> array)."""
    return {a.key: np.array([a.encode(getattr(p, a.field)) for p in plans]) for a in AXES}


def plan_at(arrays: Mapping[str, np.ndarray], i: int, plan_type):
    """The i-th plan of candidate arrays."""
    return plan_type(**{a.field: a.decode(arrays[a.key][i]) for a in AXES})
