"""A training plan and its axes, each declared once: the `Plan` field, its `--fixed` key,
valid values, default, what it splits, and how a plan's one-line description shows it.

A training plan is one value per axis (like torchtitan's ParallelDims). Everything that lists
the axes — the Plan's fields, defaults and validation, its description and JSON, `--fixed`
parsing and its help, the candidate arrays the search enumerates and evaluates — reads the
`Axis` each field of `Plan` carries. An axis's memory and time terms live in the module of
their group (`memory`, `compute`, `communication`, `pipeline`), reading it from the `Layout`;
its cross-axis validity rules in `rules`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field, fields, replace

import numpy as np

from ceiling.errors import InvalidInput, argument
from ceiling.model.plan import recompute
from ceiling.model.plan.moe import DISPATCHERS
from ceiling.model.plan.pipeline import parse_stages

_FIXED = argument("fixed")  # the plan's `fixed`, the command's --fixed

STATE_BYTES = (14, 16, 18)
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


def _always(plan) -> bool:
    return True


_NOTHING = object()  # no value is too ordinary to show


@dataclass(frozen=True)
class Axis:
    """One dimension of a plan (declared on its `Plan` field by `axis`)."""

    key: str  # the `--fixed` key and the candidate arrays' key
    help: str  # what it does, in words (`--fixed` help)
    values: str  # the valid values, in words (error messages, `--fixed` help)
    valid: Callable[[object], bool]
    default: object
    aliases: tuple[str, ...] = ()
    choices: tuple = ()  # a value's array code is its index here (empty: the value itself)
    shown: str | None = None  # label in a plan's one-line description; None: the key
    codec: object = None  # a module with encode, decode and parse (values that are not codes)
    words: Mapping[str, object] = field(default_factory=dict)  # `--fixed` words: fsdp -> 3
    quiet: object = _NOTHING  # a value the one-line description leaves out
    said_when: Callable[[object], bool] = _always  # whether the description shows it at all
    field: str = ""  # the Plan attribute and the plan JSON key (set from the Plan field)

    def check(self, value: object) -> None:
        if not self.valid(value):
            raise InvalidInput(f"{self.field} must be {self.values}, got {value!r}")

    @property
    def is_switch(self) -> bool:
        return isinstance(self.default, bool)

    def encode(self, value):
        if self.codec is not None:
            return self.codec.encode(value)
        return self.choices.index(value) if self.choices else value

    def decode(self, code):
        if self.codec is not None:
            return self.codec.decode(code)
        if self.choices:
            return self.choices[int(code)]
        return bool(code) if self.is_switch else int(code)

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
        if self.is_switch:
            if text not in _ON + _OFF:
                raise InvalidInput(f"{_FIXED}: {self.key} must be on or off, got {text!r}")
            return text in _ON
        if text in self.words:
            return self.words[text]
        try:
            num = float(text)
        except ValueError:
            raise InvalidInput(f"{_FIXED}: {self.key}={text!r} is not a number") from None
        if not num.is_integer() or num < 0:
            raise InvalidInput(f"{_FIXED}: {self.key}={text!r} must be a positive whole number")
        if not self.valid(int(num)):
            raise InvalidInput(f"{_FIXED}: {self.key} must be {self.values}, got {text}")
        return int(num)

    def fixed_help(self) -> str:
        """`b (micro_batch; a whole number ≥ 1): a replica's batch ...` for `--fixed` help."""
        names = "; ".join(x for x in dict.fromkeys((*self.aliases, self.field)) if x != self.key)
        names = f"{names}; " if names else ""
        return f"{self.key} ({names}{self.values}): {self.help}"


def axis(key: str, default: object, help: str, values: str, valid, **more):
    """A Plan field that is a plan axis: its default, and its `Axis` as the field's metadata."""
    declared = Axis(key, help, values, valid, default, **more)
    return field(default=default, metadata={"axis": declared})


_WHOLE = "a whole number ≥ 1"
_ON_OFF = "on or off"


@dataclass(frozen=True)
class Plan:
    """How one training step is split over d·t·p·cp devices: one value per axis."""

    # fmt: off
    # dp, tp, pp, vpp: the names Megatron-LM and torchtitan users type
    d: int = axis("d", 1, "data parallelism: the global batch split over d replicas",
                  _WHOLE, _whole(1), aliases=("dp",))
    t: int = axis("t", 1, "tensor parallelism: each layer's heads, KV heads and FFN width "
                  "split over t devices", _WHOLE, _whole(1), aliases=("tp",))
    p: int = axis("p", 1, "pipeline parallelism: the layers split into p consecutive stages",
                  _WHOLE, _whole(1), aliases=("pp",))
    micro_batch: int = axis("micro_batch", 1, "sequences per micro-batch (a replica's batch "
                            "runs as global_batch/(d·b) of them)", _WHOLE, _whole(1),
                            aliases=("b", "mb"), shown="b")
    v: int = axis("v", 1, "chunks per pipeline stage, interleaved 1F1B (e.g. 12 for 96 layers "
                  "on 8 stages); uneven stages split their layers as evenly as whole layers "
                  "allow, the first stage's lighter chunk first and the last stage's last, as "
                  "Megatron-Core builds stages=balanced with a virtual pipeline",
                  _WHOLE, _whole(1), aliases=("vpp",), quiet=1)
    _: KW_ONLY
    ep: int = axis("ep", 1, "expert parallelism: the routed experts spread over ep ranks; "
                   "the expert layers lay etp·ep over the t·cp·d ranks of a stage (MoE "
                   "parallel folding: ep·etp must divide t·cp·d, ep the experts)", _WHOLE,
                   _whole(1), quiet=1)
    etp: int = axis("etp", 0, "expert tensor parallelism: each routed expert's FFN split over "
                    "etp ranks (Megatron-Core's expert_tensor_parallel_size; 0: the same as t, "
                    "its default; 1 folds the attention's tensor-parallel ranks into expert or "
                    "data parallelism)", "0 (= t) or a whole number ≥ 1", _whole(0), quiet=0)
    zero: int = axis("zero", 0, "ZeRO sharding over d: optimizer state (1), also gradients "
                     "(2), also weights (3 = FSDP; with p > 1 inside each stage as torchtitan's "
                     "FSDP with PP: the stage's weights gathered once a step and held, its "
                     "gradients accumulated unsharded and reduce-scattered after the last "
                     "backward)",
                     "0, 1, 2 or 3 (3 = FSDP)", lambda z: z in (0, 1, 2, 3), words={"fsdp": 3})
    shard: int = axis("shard", 0, "ZeRO/FSDP shard group: the state sharded over this many of "
                      "the d·cp data-parallel ranks and replicated across the d·cp/shard "
                      "groups (HSDP, torchtitan's data_parallel_shard_degree; 0: all d·cp)",
                      "0 (all) or a whole number ≥ 1", _whole(0), quiet=0)
    recompute: str = axis("recompute", "selective", "activations kept (none) or rebuilt in "
                          "the backward: the attention core (selective), whole layers (full), "
                          "N layers of each stage (layers:N), or all but the outputs of the "
                          "'+'-joined ops (ops:NAMES; alternate = every other linear layer "
                          "and the attention output, torchtitan's per-op policy; ops:qkv is "
                          "MaxText's save_qkv_proj)", recompute.VALUES, recompute.valid,
                          codec=recompute)
    sequence_parallel: bool = axis("sp", True, "sequence parallelism: norms, dropout and "
                                   "residuals split over the t devices", _ON_OFF, _switch,
                                   said_when=lambda plan: plan.t > 1)
    state_bytes_per_param: int = axis("state_bytes", 18, "weights + gradients + Adam state "
                                      "per parameter", "14 (2+4+8: BF16 Adam moments, "
                                      "as DeepSeek-V3), 16 (2+2+12, as ZeRO counts) or 18 "
                                      "(2+4+12: fp32 gradients)", lambda s: s in STATE_BYTES,
                                      aliases=("state",), said_when=lambda plan: False)
    cp: int = axis("cp", 1, "context parallelism: each sequence split over cp ranks, K/V "
                   "passed round a ring (devices = d·t·p·cp)", _WHOLE, _whole(1),
                   aliases=("context_parallel",), quiet=1)
    fp8: str = axis("fp8", "off", "the linear layers' GEMMs in FP8 as Transformer Engine runs "
                    "them, casts costed; attention, logits, optimizer and communication stay "
                    "16/32-bit (--dtype fp8 pins it)", "off or linear", lambda f: f in FP8,
                    choices=FP8, quiet="off")
    fp8_params: bool = axis("fp8_params", False, "FP8 linear weights kept in FP8 only "
                            "(Transformer Engine's fp8_model_init, NeMo's fp8_params): no "
                            "16-bit copy, the FP8 transpose cached for the backward, updated "
                            "weights gathered in FP8", _ON_OFF, _switch,
                            said_when=lambda plan: plan.fp8 != "off" and plan.fp8_params)
    fp8_activations: bool = axis("fp8_acts", False, "activations kept for the backward in "
                                 "low precision as DeepSeek-V3 trained (technical report, "
                                 "section 3.3.2): the experts' dispatched inputs and the "
                                 "SwiGLU inputs in FP8 with a scale per 128 (the SwiGLU output "
                                 "rebuilt), the attention output in 12-bit E5M6; needs "
                                 "fp8=linear", _ON_OFF, _switch,
                                 said_when=lambda plan: plan.fp8_activations)
    kernels: str = axis("kernels", "fused", "pointwise ops fused (Megatron-Core/Transformer "
                        "Engine, torch.compile) or eager: each its own kernel through HBM "
                        "(PyTorch without compile: RMSNorm's pieces, rotary, SiLU·mul, casts)",
                        "fused or eager", lambda k: k in KERNELS, choices=KERNELS,
                        quiet="fused")
    tp_overlap: bool = axis("tp_overlap", False, "tensor-parallel collectives hidden behind "
                            "the GEMMs that use them (Megatron/TE userbuffers)", _ON_OFF,
                            _switch, said_when=lambda plan: plan.t > 1 and plan.tp_overlap)
    ep_overlap: bool = axis("ep_overlap", False, "the expert all-to-alls of one micro-batch "
                            "hidden behind another's compute (DeepSeek-V3's DualPipe, "
                            "Megatron-Core's --overlap-moe-expert-parallel-comm)", _ON_OFF,
                            _switch, said_when=lambda plan: plan.ep > 1 and plan.ep_overlap)
    cp_overlap: bool = axis("cp_overlap", True, "the K/V ring hidden behind attention",
                            _ON_OFF, _switch,
                            said_when=lambda plan: plan.cp > 1 and not plan.cp_overlap)
    fsdp_prefetch: bool = axis("prefetch", True, "ZeRO-3 gathers the next layer's weights "
                               "while this one computes", _ON_OFF, _switch,
                               said_when=lambda plan: plan.zero == 3 and not plan.fsdp_prefetch)
    first_stage_layers: int = axis("first", 0, "layers on the first pipeline stage (0: the "
                                   "even share); the middle stages split the rest",
                                   "a whole number ≥ 0", _whole(0), quiet=0)
    last_stage_layers: int = axis("last", 0, "layers on the last pipeline stage (0: the even "
                                  "share), which also computes the output layer and the loss",
                                  "a whole number ≥ 0", _whole(0), quiet=0)
    dispatcher: str = axis("dispatcher", "alltoall", "how the expert all-to-alls move "
                           "tokens: NCCL's all-to-all sends every routed copy (alltoall); "
                           "DeepEP's kernels (Megatron-Core's flex dispatcher) send a token "
                           "once per destination node and forward it over NVLink, holding "
                           "20 of the SMs while hidden behind compute (--moe-dispatcher pins "
                           "it)", "alltoall or deepep", lambda k: k in DISPATCHERS,
                           choices=DISPATCHERS, quiet="alltoall",
                           said_when=lambda plan: plan.ep > 1)
    dualpipe: bool = axis("dualpipe", False, "DeepSeek-V3's bidirectional pipeline schedule "
                          "(DualPipe, technical report section 3.2.1, Table 2): micro-batches "
                          "fed from both ends, each device holding stage i and stage p-1-i "
                          "(two copies of the parameters) and p+1 micro-batches of a stage's "
                          "activations, the bubble (p/2-1)(F&B+B-3W); needs p even, v = 1, "
                          "and an even m ≥ p", _ON_OFF, _switch,
                          said_when=lambda plan: plan.dualpipe)
    ends_in_split: bool = axis("ends", False, "the embedding and the loss each counted as a "
                               "layer of the stage layout (Megatron-Core's --account-for-"
                               "embedding-in-pipeline-split and --account-for-loss-in-pipeline-"
                               "split): the first stage's first chunk may hold the embedding "
                               "alone and the last stage's last chunk the output layer and the "
                               "loss alone, so p·v may reach layers + 2 (needs first and last)",
                               _ON_OFF, _switch,
                               said_when=lambda plan: plan.p > 1 and plan.ends_in_split)
    # fmt: on

    def __post_init__(self) -> None:
        for a in AXES:
            a.check(getattr(self, a.field))

    @property
    def devices(self) -> int:
        return self.d * self.t * self.p * self.cp

    def describe(self) -> str:
        """'d=16,t=8,p=2,b=1,zero=1,recompute=full,sp=on': the axes that say something."""
        parts = []
        for a in AXES:
            value = getattr(self, a.field)
            if value == a.quiet or not a.said_when(self):
                continue
            if isinstance(value, (bool, np.bool_)):
                value = "on" if value else "off"
            parts.append(f"{a.shown or a.key}={value}")
        return ",".join(parts)

    def to_json(self) -> dict:
        """The plan's axes as {field: value}: its JSON everywhere."""
        return {a.field: getattr(self, a.field) for a in AXES}


AXES: tuple[Axis, ...] = tuple(
    replace(f.metadata["axis"], field=f.name) for f in fields(Plan) if "axis" in f.metadata
)
BY_KEY: dict[str, Axis] = {a.key: a for a in AXES}
FIXED_KEYS: dict[str, str] = {name: a.key for a in AXES for name in (a.key, a.field, *a.aliases)}
STAGES_HELP = (
    "stages (even | balanced: the embedding and the loss counted as a layer each, so the "
    "first and last stage get fewer layers | the layers of each stage, 7,8,...,8,7, the "
    "middle ones equal): pins first, last and p"
)


def fixed_help() -> str:
    """The `--fixed` keys, one sentence each, from the axes."""
    return "; ".join([*(a.fixed_help() for a in AXES), STAGES_HELP])


def parse_fixed(text: str | None) -> dict:
    """'d=32,t=8,p=2,recompute=full,zero=fsdp,sp=off' -> {'d': 32, ...} (validated).

    `stages=even|balanced|31,32,32,31` (the stage layout) pins first and last (and p), or
    asks for the balanced rule (`pipeline.balanced_layout`)."""
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


def plans_to_arrays(plans: Sequence[Plan]) -> dict[str, np.ndarray]:
    """Plans as the candidate arrays `step.evaluate_arrays` takes (axis key -> array)."""
    return {a.key: np.array([a.encode(getattr(p, a.field)) for p in plans]) for a in AXES}


def plan_at(arrays: Mapping[str, np.ndarray], i: int) -> Plan:
    """The i-th plan of candidate arrays."""
    return Plan(**{a.field: a.decode(arrays[a.key][i]) for a in AXES if a.key in arrays})
