"""The one precision vocabulary: every dtype name ceiling knows, in one table.

Each precision has a canonical short name (the key of the catalog's dense FLOP/s peaks),
the spellings people and libraries use for it (`bfloat16`, `BF16`, `torch.bfloat16`), its
storage in bytes per element and its torch dtype. Input is normalised once, at the edge
(`normalize_dtype`); everything inside speaks canonical names only.

Sources: IEEE 754-2008 (fp64/fp32/fp16), Google's bfloat16, NVIDIA's TF32 (fp32 storage,
inputs of tensor-core matmuls rounded to a 10-bit mantissa), OCP 8-bit floating point
(fp8 E4M3/E5M2); int4 packs two values per byte (group scales not counted). The integer
and boolean element types a trace records (indices, masks, NCCL buffers) are listed for
their storage only: no peak, no weights or KV cache in them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ceiling.errors import InvalidInput, UnknownName


class UnknownDtype(InvalidInput, UnknownName):
    """A dtype name outside the vocabulary, or one the caller cannot use."""


@dataclass(frozen=True)
class Precision:
    """One element type: canonical name, storage, torch name and other spellings."""

    name: str
    bytes: float  # storage per element
    torch_name: str | None  # attribute of the torch module; None: no torch tensor type
    aliases: tuple[str, ...] = ()
    has_peak: bool = True  # the catalog lists a dense FLOP/s peak under `name`
    is_float: bool = True
    is_storage: bool = True  # weights or a KV cache may be stored in it


PRECISIONS: dict[str, Precision] = {
    p.name: p
    for p in (
        Precision("fp64", 8, "float64", ("float64", "double", "f64")),
        Precision("fp32", 4, "float32", ("float32", "float", "f32")),
        Precision("tf32", 4, "float32", ("tensorfloat32",)),
        Precision("bf16", 2, "bfloat16", ("bfloat16",)),
        Precision("fp16", 2, "float16", ("float16", "half", "f16")),
        Precision(
            "fp8",
            1,
            "float8_e4m3fn",
            ("float8", "float8_e4m3fn", "float8_e5m2", "fp8_e4m3", "fp8_e5m2", "e4m3", "e5m2"),
        ),
        Precision("int8", 1, "int8", ("i8", "char"), is_float=False),
        Precision("int4", 0.5, None, ("i4",), has_peak=False, is_float=False),
        # c10 scalar type names as NCCL traces write them: Long, Int, Short, Char, Byte, Bool
        *(
            Precision(name, size, name, aliases, has_peak=False, is_float=False, is_storage=False)
            for name, size, aliases in (
                ("int64", 8, ("long",)),
                ("int32", 4, ("int",)),
                ("int16", 2, ("short",)),
                ("uint8", 1, ("byte",)),
                ("bool", 1, ()),
            )
        ),
    )
}

# Compute dtypes: the keys of the catalog's and the machine profile's FLOP/s peaks.
DTYPES: tuple[str, ...] = tuple(p.name for p in PRECISIONS.values() if p.has_peak)
# What a tensor may be stored in (weights, KV cache).
STORAGE_DTYPES: tuple[str, ...] = tuple(p.name for p in PRECISIONS.values() if p.is_storage)
# Float dtypes a model's activations and a torch model may use.
FLOAT_DTYPES: tuple[str, ...] = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8")

_SPELLINGS: dict[str, str] = {
    spelling: p.name for p in PRECISIONS.values() for spelling in (p.name, *p.aliases)
}


def canonical_dtype(value: object) -> str | None:
    """The canonical name of any element type by any spelling ('torch.int64' -> 'int64',
    'Half' -> 'fp16'); None for a name outside the vocabulary. Refuses nothing: callers that
    accept only some dtypes use normalize_dtype."""
    return _SPELLINGS.get(str(value).strip().lower().removeprefix("torch."))


def normalize_dtype(
    value: object, allowed: Iterable[str] | None = None, *, what: str = "dtype", usage: str = ""
) -> str:
    """'torch.bfloat16', 'bfloat16', 'BF16' -> 'bf16'.

    `allowed` (canonical names) narrows what is accepted; by default every compute dtype.
    Anything else raises InvalidInput naming what is accepted.
    """
    choices = tuple(allowed) if allowed is not None else DTYPES
    name = canonical_dtype(value)
    if name is None or name not in choices:
        raise UnknownDtype(
            f"{what} {value!r} cannot be used{usage}; use one of {', '.join(choices)} "
            "(bfloat16, BF16 and torch.bfloat16 spellings are accepted)"
        )
    return name


def dtype_bytes(dtype: str) -> float:
    """Storage bytes per element of a dtype (any accepted spelling)."""
    return PRECISIONS[normalize_dtype(dtype, STORAGE_DTYPES)].bytes


def element_bytes(name: str) -> float | None:
    """Storage bytes per element of any element type by any spelling ('Long', 'half',
    'torch.int32'); None for a name outside the vocabulary."""
    canonical = canonical_dtype(name)
    return PRECISIONS[canonical].bytes if canonical is not None else None


def torch_dtype(dtype: str):
    """The torch dtype of a precision; imports torch. None where this torch lacks it."""
    import torch

    p = PRECISIONS[normalize_dtype(dtype, STORAGE_DTYPES)]
    return getattr(torch, p.torch_name, None) if p.torch_name else None
