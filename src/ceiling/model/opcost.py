"""FLOPs and bytes of common ops, the inputs of the roofline.

A multiply-add counts 2 FLOPs. Bytes are the minimum traffic to and from main memory:
each operand read once and each result written once (perfect on-chip reuse), the same
convention as the roofline paper and as the STREAM byte counts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ceiling.errors import InvalidInput, UnknownName
from ceiling.model.attention import attention_bytes, attention_flops
from ceiling.units import parse_count
from ceiling.vocabulary import dtype_bytes


@dataclass(frozen=True)
class OpCost:
    """One op's work: FLOPs (multiply-add = 2) and bytes moved to and from memory."""

    name: str
    kind: str
    dtype: str
    flops: float
    bytes: float
    shape: tuple[int, ...]

    def __post_init__(self) -> None:
        if self.flops < 0 or self.bytes <= 0:
            raise InvalidInput(f"{self.name}: FLOPs must be >= 0 and bytes > 0")

    @property
    def intensity(self) -> float:
        """FLOPs per byte moved."""
        return self.flops / self.bytes


def _positive(*values: int) -> None:
    for v in values:
        if not isinstance(v, int) or v <= 0:
            raise InvalidInput(f"op sizes must be positive integers, got {v}")


def add(n: int, dtype: str = "fp32") -> OpCost:
    """c = a + b over n elements: n FLOPs; read a and b, write c (3n elements)."""
    _positive(n)
    b = dtype_bytes(dtype)
    return OpCost(f"add:{n}", "add", dtype, float(n), 3.0 * n * b, (n,))


def matvec(n: int, dtype: str = "fp32") -> OpCost:
    """y = A x with A n x n: 2n^2 FLOPs; read A (n^2) and x (n), write y (n)."""
    _positive(n)
    b = dtype_bytes(dtype)
    return OpCost(f"matvec:{n}", "matvec", dtype, 2.0 * n * n, (n * n + 2.0 * n) * b, (n, n))


def matmul(m: int, n: int, k: int, dtype: str = "fp32") -> OpCost:
    """C[m,n] = A[m,k] B[k,n]: 2mnk FLOPs; read A and B, write C once each."""
    _positive(m, n, k)
    b = dtype_bytes(dtype)
    return OpCost(
        f"matmul:{m}x{n}x{k}",
        "matmul",
        dtype,
        2.0 * m * n * k,
        (m * k + k * n + m * n) * float(b),
        (m, n, k),
    )


def attention(batch: int, heads: int, seq: int, head_dim: int, dtype: str, fused: bool) -> OpCost:
    """softmax(Q K^T / sqrt(d)) V for B x H heads of S x D.

    FLOPs 4*B*H*S^2*D, both forms; bytes 4*B*H*S*D elements fused, + 4*B*H*S^2 naive
    (formulas and sources: ceiling.model.attention).
    """
    _positive(batch, heads, seq, head_dim)
    flops = attention_flops(batch * seq, seq, heads * head_dim)
    nbytes = attention_bytes(batch, heads, seq, head_dim, dtype_bytes(dtype), fused)
    form = "fused" if fused else "naive"
    return OpCost(
        f"attention:{batch},{heads},{seq},{head_dim} ({form})",
        f"attention-{form}",
        dtype,
        flops,
        nbytes,
        (batch, heads, seq, head_dim),
    )


OP_SYNTAX = "add:N, matvec:N, matmul:MxNxK, attention:B,H,S,D"


def _ints(text: str, sep: str, count: int, spec: str) -> list[int]:
    parts = re.split(sep, text.strip())
    if len(parts) != count:
        raise InvalidInput(f"cannot read op {spec!r}: expected {count} sizes ({OP_SYNTAX})")
    try:
        values = [parse_count(p) for p in parts]  # 4096, 1e8 and 100M all read as counts
    except InvalidInput:
        raise InvalidInput(
            f"cannot read op {spec!r}: sizes must be whole numbers ({OP_SYNTAX})"
        ) from None
    if any(v <= 0 for v in values):
        raise InvalidInput(f"op {spec!r}: sizes must be positive")
    return values


def parse_ops(spec: str, dtype: str = "fp32") -> list[OpCost]:
    """'add:N' | 'matvec:N' | 'matmul:MxNxK' | 'attention:B,H,S,D' -> costs.

    Attention gives two rows, the naive and the fused form, so they can be compared.
    """
    dtype_bytes(dtype)
    kind, sep, sizes = spec.partition(":")
    kind = kind.strip().lower()
    if not sep:
        raise InvalidInput(f"cannot read op {spec!r}: expected KIND:SIZES ({OP_SYNTAX})")
    if kind == "add":
        return [add(*_ints(sizes, ",", 1, spec), dtype)]
    if kind == "matvec":
        return [matvec(*_ints(sizes, ",", 1, spec), dtype)]
    if kind == "matmul":
        return [matmul(*_ints(sizes, "[x×,]", 3, spec), dtype)]
    if kind == "attention":
        b, h, s, d = _ints(sizes, ",", 4, spec)
        return [attention(b, h, s, d, dtype, fused=False), attention(b, h, s, d, dtype, fused=True)]
    raise UnknownName(f"unknown op {kind!r} in {spec!r}; known: {OP_SYNTAX}")
