"""FLOPs and bytes of a recorded op call, replayed from the shapes and dtypes the trace kept.

The profiler records each op's `Input Dims`, `Input type`, `Input Strides` and, for
scalars, `Concrete Inputs`. They are turned back into tensors on the "meta" device (shape,
stride and dtype, no data), the op is run on them to get its output, and the call goes
through the same formula registry as `ceiling profile` (`profile.op_flops`,
`profile.traffic`). Nothing is counted twice here: that registry is the only one.

This module loads torch: `trace.op_cost` calls it only for the calls its memo has not seen.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import torch

from ceiling.profile.op_flops import count_flops, flop_kind, kind_category
from ceiling.profile.traffic import count_traffic
from ceiling.trace.op_rules import fits, literal
from ceiling.trace.traced_op_cost import TracedOpCost
from ceiling.vocabulary import DTYPES, canonical_dtype

_NO_RULE = ("unknown", "other")  # kinds op_flops has no formula for

# C++ scalar type names as the profiler writes them
_DTYPES = {
    "float": torch.float32,
    "double": torch.float64,
    "c10::Half": torch.float16,
    "c10::BFloat16": torch.bfloat16,
    "long int": torch.int64,
    "int64_t": torch.int64,
    "int": torch.int32,
    "short int": torch.int16,
    "signed char": torch.int8,
    "unsigned char": torch.uint8,
    "bool": torch.bool,
    "c10::complex<float>": torch.complex64,
    "c10::complex<double>": torch.complex128,
    "c10::Float8_e4m3fn": torch.float8_e4m3fn,
    "c10::Float8_e5m2": torch.float8_e5m2,
}


def _peak_key(dt: torch.dtype) -> str | None:
    """The catalog's name for a torch dtype with a FLOP/s peak (fp32, bf16, fp8, int8...)."""
    name = canonical_dtype(dt)
    return name if name in DTYPES else None


def _packet(name: str):
    op = name.removeprefix("aten::")
    # an aten op is named by an identifier; torch's lookup raises on text it cannot encode
    if op == name or not op.isidentifier():
        return None
    return getattr(torch.ops.aten, op, None)


def kind_only(name: str) -> TracedOpCost | None:
    """A call recorded without shapes: the op's kind alone is known; None when the op has no
    rule of its own (`aten::linear`) or is no aten op."""
    packet = _packet(name)
    return None if packet is None else _kind_only(packet)


def replayed(name: str, dims, types, concrete, strides) -> TracedOpCost | None:
    """A call from its recorded shapes; None when the op has no rule of its own."""
    packet = _packet(name)
    if packet is None:
        return None
    try:
        return _replay(name, dims, tuple(types), concrete or (), strides or ())
    except Exception:  # odd recorded arguments, or an op meta cannot run: cost unknown
        return _kind_only(packet)


@functools.cache
def _kind_only(packet) -> TracedOpCost | None:
    func = getattr(packet, packet.overloads()[0])
    kind, _ = flop_kind(func)
    if kind in _NO_RULE:
        return None
    if kind in ("free", "memory"):
        return TracedOpCost(0.0, True, "view" if kind == "free" else "memory", 0.0, None, None)
    return TracedOpCost(None, False, kind_category(func), 0.0, None, None)


def _replay(name, dims, types, concrete, strides) -> TracedOpCost | None:
    packet = _packet(name)
    func = _overload(packet, types)
    if func is None:
        return _kind_only(packet)
    kind, _ = flop_kind(func)
    if kind in _NO_RULE:
        return None
    call = _rebuild(func, dims, types, concrete, strides)
    if call is None:
        return _kind_only(packet)
    pos, kw, dtype = call
    out = func(*pos, **kw)
    flops = count_flops(func, pos, kw, out)
    traffic = count_traffic(func, pos, kw, out)
    return TracedOpCost(
        flops.flops, flops.exact, flops.category, flops.recomputed, traffic.bytes, dtype
    )


def _overload(packet, types: tuple):
    """The overload whose schema has as many arguments as were recorded, with tensors where
    the trace shows tensors."""
    for ov in packet.overloads():
        func = getattr(packet, ov)
        schema = func._schema.arguments
        if len(schema) != len(types):
            continue
        if all(fits(str(a.type), t) for a, t in zip(schema, types, strict=True)):
            return func
    return None


def _meta(dims, dtype, strides):
    dims = [int(d) for d in dims]
    if strides and len(strides) == len(dims):
        try:
            return torch.empty_strided(dims, [int(s) for s in strides], dtype=dtype, device="meta")
        except (RuntimeError, TypeError, ValueError):
            pass
    return torch.empty(dims, dtype=dtype, device="meta")


def _rebuild(func, dims, types, concrete, strides):
    pos, kw = [], {}
    first_dtype = None
    for i, a in enumerate(func._schema.arguments):
        t, d = types[i], dims[i]
        c = concrete[i] if i < len(concrete) else ""
        s = strides[i] if i < len(strides) else ()
        if t in _DTYPES and isinstance(d, (list, tuple)):
            value = _meta(d, _DTYPES[t], s)
            if first_dtype is None and value.is_floating_point():
                first_dtype = _peak_key(value.dtype)
        elif t == "TensorList" and isinstance(d, (list, tuple)):
            # the trace gives no dtype per list element: float32 is assumed
            value = [_meta(x, torch.float32, ()) for x in d if isinstance(x, (list, tuple))]
        elif c not in ("", None):
            value = literal(c)
        elif a.has_default_value():
            value = a.default_value
        elif str(a.type).startswith("Optional"):
            value = None
        elif t == "Scalar":
            value = 1
        else:
            return None
        if a.kwarg_only:
            kw[a.name] = value
        else:
            pos.append(value)
    return pos, kw, first_dtype


def rule_table(names) -> dict:
    """What `trace.op_rules` needs to cost these ops without torch, taken from torch and the
    counting rules: for each op, None when it has no rule of its own (or torch has no such op),
    else its overloads in torch's order, each (overload, how its FLOPs are counted, the rule's
    name, the category, FLOPs per element, how its bytes are counted, positions it writes,
    whether those are only overwritten, whether the byte count is exact, its arguments as
    (name, type, has a default, the default, keyword-only))."""
    from ceiling.profile import op_kinds, traffic

    table = {}
    for name in sorted(names):
        packet = _packet(name)
        funcs = [getattr(packet, ov) for ov in packet.overloads()] if packet else []
        if all(flop_kind(f)[0] in _NO_RULE for f in funcs):
            table[name] = None
            continue
        rows = []
        for ov, f in zip(packet.overloads(), funcs, strict=True):
            kind, rule = flop_kind(f)
            per = 0.0
            if kind == "exact":
                per = op_kinds.PER_ELEMENT_EXACT[rule]
            elif kind == "estimated":
                per = op_kinds.PER_ELEMENT_ESTIMATED[rule][1]
            t = traffic._rule(f)
            args = tuple(
                (a.name, str(a.type), a.has_default_value(), _literal(a), a.kwarg_only)
                for a in f._schema.arguments
            )
            written = tuple(i for i, _ in t.written)
            rows.append(
                (
                    ov,
                    kind,
                    rule,
                    kind_category(f),
                    per,
                    t.kind,
                    written,
                    t.overwrite_only,
                    t.exact,
                    args,
                )
            )
        table[name] = tuple(rows)
    return table


def _literal(a):
    """A schema default as plain data (a torch enum or dtype default as its text)."""
    if not a.has_default_value():
        return None
    value = a.default_value
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(v, (int, float)) for v in value):
        return list(value)
    return str(value)


def write_rule_table(path, names) -> None:
    """Write `rule_table(names)` as the JSON file `trace.op_rules` reads (one op a line)."""
    table = json.loads(json.dumps(rule_table(names)))
    lines = [f"{json.dumps(k)}: {json.dumps(v, separators=(',', ':'))}" for k, v in table.items()]
    Path(path).write_text("{\n" + ",\n".join(lines) + "\n}\n")
