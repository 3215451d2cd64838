"""Tensors as torch's meta device holds them (shape, strides, dtype), the profiler's dtype
names, and the arguments of a rebuilt call."""

from __future__ import annotations

import math


class Refused(Exception):
    """torch's meta kernel would raise on these arguments."""


class Unsure(Exception):
    """Not modelled here."""


# what a family of output rules answers for an op it has no rule for: the next family is asked
NOT_HERE = object()


# C++ scalar type names as the profiler writes them: (itemsize, category, catalog peak key)
# category 0 bool, 1 integer, 2 floating, 3 complex
TYPES = {
    "float": (4, 2, "fp32"),
    "double": (8, 2, "fp64"),
    "c10::Half": (2, 2, "fp16"),
    "c10::BFloat16": (2, 2, "bf16"),
    "long int": (8, 1, None),
    "int64_t": (8, 1, None),
    "int": (4, 1, None),
    "short int": (2, 1, None),
    "signed char": (1, 1, None),
    "unsigned char": (1, 1, None),
    "bool": (1, 0, None),
    "c10::complex<float>": (8, 3, None),
    "c10::complex<double>": (16, 3, None),
    "c10::Float8_e4m3fn": (1, 2, "fp8"),
    "c10::Float8_e5m2": (1, 2, "fp8"),
    "uint64": (8, 1, None),  # a flash kernel's random state (never in a recorded input)
}
_CANON = {"int64_t": "long int"}  # one name per dtype
# at::ScalarType codes, as a recorded `dtype` argument gives them
_CODES = {
    0: "unsigned char",
    1: "signed char",
    2: "short int",
    3: "int",
    4: "long int",
    5: "c10::Half",
    6: "float",
    7: "double",
    11: "bool",
    15: "c10::BFloat16",
}
LONG, FLOAT, BOOL = "long int", "float", "bool"


class Meta:
    """A tensor's shape, strides and dtype, as torch's meta device holds it."""

    __slots__ = ("dtype", "shape", "strides")

    def __init__(self, shape, dtype, strides=None):
        self.shape = tuple(shape)
        self.dtype = _CANON.get(dtype, dtype)
        self.strides = tuple(strides) if strides is not None else contiguous(self.shape)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def itemsize(self) -> int:
        return TYPES[self.dtype][0]

    @property
    def category(self) -> int:
        return TYPES[self.dtype][1]

    def nbytes(self) -> int:
        """Memory spanned, stride-aware (`profile.traffic.tensor_bytes`): a stride-0
        dimension counts once."""
        if self.numel == 0:
            return 0
        n = math.prod(s for s, st in zip(self.shape, self.strides, strict=True) if st != 0)
        return n * self.itemsize


def contiguous(shape) -> tuple:
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= max(int(s), 1)
    return tuple(reversed(strides))


def is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def arg(schema, pos, kw, name, default=None):
    """An argument by its schema name (`profile.fused_flops.argument`)."""
    if name in kw:
        return kw[name]
    for i, a in enumerate(schema):
        if a[0] == name:
            return pos[i] if i < len(pos) else default
    return default


def ints(value) -> tuple:
    if isinstance(value, int):
        return (value,)
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, int) for v in value):
        raise Unsure
    return tuple(value)


def dtype_arg(value, default: str) -> str:
    if value is None:
        return default
    if isinstance(value, int) and value in _CODES:
        return _CODES[value]
    raise Unsure
