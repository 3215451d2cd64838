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

from ceiling.errors import InvalidInput, argument
from ceiling.model import recompute
from ceiling.model.pipeline_stages import parse_stages

_FIXED = argument("fixed")  # the plan's `fixed`, the command's --fixed

RECOMPUTE = recompute.MODES
STATE_BYTES = (16, 18)
FP8 = ("off", "linear")
KERNELS = ("fused", "eager")
_ON = ("on", "true", "1", "yes")
_OFF = ("off", "false", "0", "no")


def _whole(minimum: int) -> Callable[[object], bool]:
    def ok(value: object) -> bool:
        whole = isinstance(value, (int, np.integer)) and not isinstance(value, bool)
        return whole and value >= minimum

    return ok


def _switch(value: object) -> bool:
    return isinstance(value, (bool, np.bool_))


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
    codec: object = None  # a module with encode, decode and parse (values that are not codes)

    def check(self, value: object) -> None:
        if not self.valid(value):
            raise InvalidInput(f"{self.field} must be {self.values}, got {value!r}")

    def encode(self, value):
        if self.codec is not None:
            return self.codec.encode(value)
        return self.choices.index(value) if self.choices else value

    def decode(self, code):
        if self.codec is not None:
            return self.codec.decode(code)
        if self.choices:
            return self.choices[int(code)]
        return bool(code) if isinstance(self.default, bool) else int(code)

    def parse(self, text: str):
        """A `--fixed` value, validated."""
        text = text.strip().lower()
        if self.codec is not None:
            return self.codec.parse(text)
        if self.choices:
            if text not in self.choices:
                raise InvalidInput(
                    f"{_FIXED}: {self.key} must be one of {self.values}, got {text!r}"
                )
            return text
        if isinstance(self.default, bool):
            if text not in _ON + _OFF:
                raise InvalidInput(f"{_FIXED}: {self.key} must be on or off, got {text!r}")
            return text in _ON
        if self.key == "zero" and text == "fsdp":
            return 3
        try:
            num = float(text)
        except ValueError:
            raise InvalidInput(f"{_FIXED}: {self.key}={text!r} is not a number") from None
        if not num.is_integer() or num < 0:
            raise InvalidInput(f"{_FIXED}: {self.key}={text!r} must be a positive whole number")
        if not self.valid(int(num)):
            raise InvalidInput(f"{_FIXED}: {self.key} must be {self.values}, got {text}")
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
    Axis("v", "v", "each stage into v interleaved chunks (interleaved 1F1B; an uneven stage's "
         "chunks within a layer of each other)",
         "a whole number ≥ 1", _whole(1), 1),
    Axis("ep", "ep", "the experts over ep of the d replicas (expert parallelism)",
         "a whole number ≥ 1", _whole(1), 1),
    Axis("zero", "zero", "optimizer state (1), gradients (2) and weights (3 = FSDP) over d",
         "0, 1, 2 or 3 (3 = FSDP)", lambda z: z in (0, 1, 2, 3), 0),
    Axis("recompute", "recompute", "activations kept (none) or rebuilt in the backward: the "
         "attention core (selective), whole layers (full; layers:N of each stage) or all but "
         "the outputs of chosen ops (ops:qkv, ops:alternate, ...)", recompute.VALUES,
         recompute.valid, "selective", codec=recompute),
    Axis("sequence_parallel", "sp", "norms, dropout and residuals over the t devices "
         "(sequence parallelism)", "on or off", lambda s: isinstance(s, (bool, np.bool_)),
         True, aliases=("sequence_parallel",)),
    Axis("state_bytes_per_param", "state_bytes", "nothing: weights + gradients + Adam state "
         "per parameter", "16 or 18 (2+2+12 as ZeRO counts; 2+4+12 with fp32 gradients)",
         lambda s: s in STATE_BYTES, 18, aliases=("state",)),
    Axis("cp", "cp", "each sequence into cp chunks over cp ranks (context parallelism: ring "
         "exchange of K/V)", "a whole number ≥ 1", _whole(1), 1, aliases=("context_parallel",)),
    Axis("fp8", "fp8", "nothing: the linear layers' GEMMs run in FP8 (Transformer Engine); "
         "attention, logits, optimizer and communication stay 16/32-bit", "off or linear",
         lambda f: f in FP8, "off", choices=FP8),
    Axis("fp8_params", "fp8_params", "nothing: FP8 linear layers keep their weights in FP8 "
         "only (Transformer Engine's fp8_model_init, NeMo's fp8_params): no 16-bit copy, the "
         "FP8 transpose cached for the backward, updated weights gathered in FP8", "on or off",
         _switch, False),
    Axis("kernels", "kernels", "nothing: pointwise ops run fused (Megatron-Core/Transformer "
         "Engine, torch.compile) or eager, one kernel each reading and writing HBM (PyTorch "
         "without compile)", "fused or eager", lambda k: k in KERNELS, "fused",
         choices=KERNELS),
    Axis("tp_overlap", "tp_overlap", "nothing: tensor-parallel collectives overlapped with the "
         "GEMMs that use them (Megatron/TE userbuffers)", "on or off", _switch, False),
    Axis("cp_overlap", "cp_overlap", "nothing: the K/V ring overlapped with attention compute",
         "on or off", _switch, True),
    Axis("fsdp_prefetch", "prefetch", "nothing: ZeRO-3 gathers the next layer's weights while "
         "this one computes", "on or off", _switch, True, aliases=("fsdp_prefetch",)),
    Axis("first_stage_layers", "first", "nothing: the layers on the first pipeline stage "
         "(0: the even share); the middle stages split the rest", "a whole number ≥ 0",
         _whole(0), 0),
    Axis("last_stage_layers", "last", "nothing: the layers on the last pipeline stage (0: the "
         "even share), which also computes the output layer and the loss", "a whole number ≥ 0",
         _whole(0), 0),
)  # fmt: skip
BY_KEY: dict[str, Axis] = {a.key: a for a in AXES}
FIXED_KEYS: dict[str, str] = {name: a.key for a in AXES for name in (a.key, a.field, *a.aliases)}


def parse_fixed(text: str | None) -> dict:
    """'d=32,t=8,p=2,recompute=full,zero=fsdp,sp=off' -> {'d': 32, ...} (validated).

    `stages=even|balanced|31,32,32,31` (the stage layout) pins first and last (and p), or
    asks for the balanced rule (`pipeline_stages`)."""
    out: dict = {}
    known = ", ".join(BY_KEY) + ", stages"
    parts = [x.strip() for x in (text or "").split(",")]
    if text and text.strip() and "" in parts:
        raise InvalidInput(f"{_FIXED}: an empty entry in {text!r} (KEY=VALUE,KEY=VALUE)")
    given: dict[str, str] = {}
    for part in _stage_lists_joined(parts):
        name = part.split("=", 1)[0].strip().lower()
        key = "stages" if name == "stages" else FIXED_KEYS.get(name, name)
        if key in given:
            raise InvalidInput(f"{_FIXED}: {key} is given twice ({given[key]} and {part})")
        given[key] = part
        if name == "stages":
            out.update(parse_stages(part.split("=", 1)[1]))
            continue
        if "=" not in part or not name:
            raise InvalidInput(f"{_FIXED}: expected KEY=VALUE, got {part!r} (keys: {known})")
        value = part.split("=", 1)[1].strip().lower()
        if name not in FIXED_KEYS:
            raise InvalidInput(f"{_FIXED}: unknown key {name!r}; known: {known} (b = micro_batch)")
        out[key] = BY_KEY[key].parse(value)
    return out


def _stage_lists_joined(parts: list[str]) -> list[str]:
    """'stages=31', '32', '31' -> 'stages=31,32,31' (a stage list is written with commas)."""
    out: list[str] = []
    for part in filter(None, parts):
        if out and out[-1].lower().startswith("stages=") and part.isdigit():
            out[-1] += "," + part
        else:
            out.append(part)
    return out


def plan_fields(plan) -> dict:
    """A plan's axes as {field: value}: its JSON everywhere."""
    return {a.field: getattr(plan, a.field) for a in AXES}


# Values too ordinary to show in a plan's one-line description, and when a switch matters.
_QUIET = {
    "cp": 1,
    "fp8": "off",
    "kernels": "fused",
    "first_stage_layers": 0,
    "last_stage_layers": 0,
}
_SWITCH_NEEDS = {
    "fp8_params": lambda plan: plan.fp8 != "off" and plan.fp8_params,
    "tp_overlap": lambda plan: plan.t > 1 and plan.tp_overlap,
    "cp_overlap": lambda plan: plan.cp > 1 and not plan.cp_overlap,
    "fsdp_prefetch": lambda plan: plan.zero == 3 and not plan.fsdp_prefetch,
}


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
        if a.field == "state_bytes_per_param" or value == _QUIET.get(a.field, ()):
            continue
        if a.field in _SWITCH_NEEDS and not _SWITCH_NEEDS[a.field](plan):
            continue
        if isinstance(value, (bool, np.bool_)):
            value = "on" if value else "off"
        parts.append(f"{a.shown or a.key}={value}")
    return ",".join(parts)


def plans_to_arrays(plans: Sequence) -> dict[str, np.ndarray]:
    """Plans as the candidate arrays `parallel.evaluate_arrays` takes (axis key -> array)."""
    return {a.key: np.array([a.encode(getattr(p, a.field)) for p in plans]) for a in AXES}


def plan_at(arrays: Mapping[str, np.ndarray], i: int, plan_type):
    """The i-th plan of candidate arrays."""
    return plan_type(**{a.field: a.decode(arrays[a.key][i]) for a in AXES if a.key in arrays})
