"""torch's broadcasting and type promotion (`torch.result_type`, `torch.can_cast`) on dtype
names: what dtype and shape an op's output takes from its operands."""

from __future__ import annotations

from ceiling.trace.op_rules.meta import BOOL, FLOAT, LONG, TYPES, Meta, Refused, Unsure


def broadcast(*shapes) -> tuple:
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(-ndim, 0):
        size = 1
        for s in shapes:
            if len(s) >= -i:
                d = s[i]
                if d != 1:
                    if size not in (1, d):
                        raise Refused
                    size = d
        out.append(size)
    return tuple(out)


def wrapped(value):
    """The dtype a Python number takes in type promotion (a float: the default float32)."""
    if isinstance(value, bool):
        return BOOL
    if isinstance(value, int):
        return LONG
    if isinstance(value, float):
        return FLOAT
    raise Unsure


def _promote_pair(a: str, b: str) -> str:
    if a == b:
        return a
    (sa, ca, _), (sb, cb, _) = TYPES[a], TYPES[b]
    if ca != cb:
        return a if ca > cb else b
    if ca == 2:
        if {a, b} == {"c10::Half", "c10::BFloat16"}:
            return FLOAT
        if "fp8" in (TYPES[a][2], TYPES[b][2]):
            raise Unsure
        return a if sa > sb else b
    if ca == 1:
        if "unsigned char" in (a, b):
            other = b if a == "unsigned char" else a
            return "short int" if other == "signed char" else other
        return a if sa > sb else b
    raise Unsure


def promote_all(dtypes) -> str | None:
    result = None
    for d in dtypes:
        result = d if result is None else _promote_pair(result, d)
    return result


def _combine(higher, lower):
    """c10's combine_categories: a lower-priority operand counts only when its category is
    higher."""
    if higher is None:
        return lower
    if lower is None:
        return higher
    ch, cl = TYPES[higher][1], TYPES[lower][1]
    if ch == 3 or cl == 3:
        raise Unsure
    if ch == 2:
        return higher
    if higher == BOOL or cl == 2:
        return _promote_pair(higher, lower)
    return higher


def result_type(operands) -> str:
    """torch.result_type: dimensioned tensors, then zero-dimensional ones, then numbers."""
    dim = [o.dtype for o in operands if isinstance(o, Meta) and o.shape]
    zero = [o.dtype for o in operands if isinstance(o, Meta) and not o.shape]
    numbers = [wrapped(o) for o in operands if not isinstance(o, Meta) and o is not None]
    return _combine(promote_all(dim), _combine(promote_all(zero), promote_all(numbers)))


def can_cast(src: str, dst: str) -> bool:
    cs, cd = TYPES[src][1], TYPES[dst][1]
    return not (cs > cd and (cd < 2 or cs == 3 or (cd == 0 and cs > 0)))
