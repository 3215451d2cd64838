"""How a decode is served (`DecodeSetup`: dtypes, context, tensor-parallel degree) and the
dtypes it resolves to on a device (`resolve_dtypes`): whose peak bounds the multiplies and
what the KV cache is stored in. The ceiling built on them is `ceiling.model.decode`."""

from __future__ import annotations

from dataclasses import dataclass

from ceiling.errors import InvalidInput, UnsupportedOnDevice, argument
from ceiling.vocabulary import normalize_dtype

# Weights and KV cache may be stored in these; activations are computed in a float dtype.
WEIGHT_DTYPES = ("fp32", "fp16", "bf16", "fp8", "int8", "int4")
KV_DTYPES = WEIGHT_DTYPES
FLOAT_ACTIVATIONS = ("bf16", "fp16", "fp32")  # preference order for integer weights


# The context a decode is priced at when none is given: a served conversation's, not an
# empty cache (published batch-1 figures use a short prompt: --context 0 gives them).
FIT_CONTEXT = 4096


def default_context(cfg) -> int:
    """The stated default context of `cfg`: FIT_CONTEXT tokens, or as many as it holds."""
    return min(FIT_CONTEXT, cfg.max_seq - 1)


@dataclass(frozen=True)
class DecodeSetup:
    """How the model is served: dtypes, context in the cache, tensor-parallel degree."""

    weights_dtype: str = "bf16"
    kv_dtype: str | None = None  # default: the activation dtype
    activation_dtype: str | None = None  # default: the weights' float dtype, else bf16/fp16
    context: int = 0  # tokens already in each sequence's KV cache when the step runs
    tp: int = 1
    prompt_tokens: int | None = None  # for time to first token; default max(context, 1)
    # "all": every parameter once per step (the published convention); "read": only what a
    # step reads — an untied input table and a position table give just the batch's rows.
    weights_counted: str = "all"

    def __post_init__(self) -> None:
        # Any accepted spelling (BF16, bfloat16, torch.bfloat16) becomes the canonical name.
        canon = object.__setattr__
        canon(
            self,
            "weights_dtype",
            normalize_dtype(self.weights_dtype, WEIGHT_DTYPES, what="weights dtype"),
        )
        if self.kv_dtype is not None:
            canon(self, "kv_dtype", normalize_dtype(self.kv_dtype, KV_DTYPES, what="KV dtype"))
        if self.activation_dtype is not None:
            act = normalize_dtype(self.activation_dtype, FLOAT_ACTIVATIONS, what="activation dtype")
            canon(self, "activation_dtype", act)
        if not isinstance(self.context, int) or self.context < 0:
            raise InvalidInput(f"context must be a whole number ≥ 0, got {self.context!r}")
        if not isinstance(self.tp, int) or self.tp < 1:
            raise InvalidInput(f"tensor-parallel degree must be ≥ 1, got {self.tp!r}")
        if self.weights_counted not in ("all", "read"):
            raise InvalidInput(
                f"weights_counted must be 'all' or 'read', got {self.weights_counted!r}"
            )
        if self.prompt_tokens is not None and (
            not isinstance(self.prompt_tokens, int) or self.prompt_tokens < 1
        ):
            raise InvalidInput(f"prompt length must be ≥ 1 token, got {self.prompt_tokens!r}")


@dataclass(frozen=True)
class Dtypes:
    """The dtypes a setup resolves to on a device, and why."""

    weights: str
    activations: str
    compute: str  # whose peak bounds the multiplies
    kv: str
    notes: tuple[str, ...] = ()


def resolve_dtypes(spec, setup: DecodeSetup) -> Dtypes:
    """Which peak bounds the multiplies, and the KV dtype, for these weights on this device."""
    have = set(spec.peak_flops_per_s)
    notes: list[str] = []
    w = setup.weights_dtype
    if setup.activation_dtype is not None:
        act = setup.activation_dtype
    elif w in FLOAT_ACTIVATIONS:
        act = w
    else:
        act = next((d for d in FLOAT_ACTIVATIONS if d in have), "bf16")
    if w == "fp8" and "fp8" in have:
        compute = "fp8"
    elif w in ("fp8", "int8", "int4"):
        compute = act
        why = "no fp8 peak on this device" if w == "fp8" else "integer weights"
        notes.append(
            f"{w} weights are dequantised and multiplied in {act} ({why}): compute uses the "
            f"dense {act} peak; only the bytes read shrink"
        )
    else:
        compute = w
    if w == "int4":
        notes.append("int4 weights counted at 0.5 bytes each (group scales not counted)")
    if compute not in have:
        raise UnsupportedOnDevice(
            f"{spec.name} has no {compute} peak (it has {', '.join(sorted(have))}); "
            f"choose {argument('weights')} or {argument('activations')} among those"
        )
    kv = setup.kv_dtype or act
    return Dtypes(weights=w, activations=act, compute=compute, kv=kv, notes=tuple(notes))
