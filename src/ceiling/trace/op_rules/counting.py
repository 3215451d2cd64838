"""The counting rules of `profile.op_flops` and `profile.traffic` applied to a rebuilt call's
shapes: its FLOPs and the bytes it reads and writes."""

from __future__ import annotations

import math

from ceiling.trace.op_rules.attention import ATTENTION, attention_flops
from ceiling.trace.op_rules.meta import Meta, Unsure, arg


def _numel(x) -> int:
    if isinstance(x, Meta):
        return x.numel
    if isinstance(x, (list, tuple)):
        return sum(_numel(v) for v in x)
    return 0


def flops_of(kind, rule, category, per, schema, pos, kw, out):
    """`profile.op_flops.count_flops` on shapes."""
    if kind == "free":
        return 0.0, True, "view", 0.0
    if kind == "memory":
        return 0.0, True, "memory", 0.0
    if kind == "plain_matmul":
        i = {"mm": 0, "bmm": 0, "addmm": 1, "baddbmm": 1}[rule]
        a, b = pos[i], pos[i + 1]
        return 2.0 * a.numel * b.shape[-1], True, "matmul", 0.0
    if kind == "exact":
        n = _numel(out)
        if n == 0 and pos:
            n = _numel(pos[0])
        return per * n, True, "elementwise", 0.0
    if kind == "estimated":
        if category == "norm" and pos:
            n = _numel(pos[0])
        else:
            n = _numel(out) or (_numel(pos[0]) if pos else 0)
        return per * n, False, category, 0.0
    if kind == "reduction":
        n_in, n_out = (_numel(pos[0]) if pos else 0), _numel(out)
        if rule == "sum":
            return float(max(n_in - n_out, 0)), True, "reduction", 0.0
        if rule == "mean":
            return float(max(n_in - n_out, 0) + n_out), True, "reduction", 0.0
        return float(n_in), False, "reduction", 0.0
    if kind == "nll":
        # `profile.op_flops`: one add (a scaled negation backward) per target, twice with a
        # class weight; a mean divides once
        n = _numel(arg(schema, pos, kw, "target"))
        flops = n * (2 if arg(schema, pos, kw, "weight") is not None else 1)
        if rule.endswith("forward") and arg(schema, pos, kw, "reduction") == 1:
            flops += 1
        return float(flops), True, "reduction", 0.0
    if kind == "mse":
        n, k = _numel(pos[0]), _numel(out)
        reduction = arg(schema, pos, kw, "reduction", 1)
        flops = 2 * n + (n - k if k < n else 0) + (k if reduction == 1 else 0)
        return float(flops), True, "reduction", 0.0
    if kind == "registry" and rule in ("convolution", "_convolution", "cudnn_convolution"):
        # the registry reads its 7th argument as `transposed` (cudnn_convolution: benchmark)
        return conv_flops(pos[0], pos[1], out, bool(pos[6])), True, "matmul", 0.0
    if (kind == "registry_attention" and rule in ATTENTION) or kind == "cpu_attention":
        return attention_flops(rule, schema, pos, kw)
    if kind == "fused" and rule == "convolution_backward":
        # `profile.conv_flops`: each gradient asked for costs the forward's FLOPs
        grad, x, w = pos[:3]
        mask = pos[10]
        forward = conv_flops(x, w, grad, bool(pos[7]))
        return forward * (int(bool(mask[0])) + int(bool(mask[1]))), True, category, 0.0
    raise Unsure


def conv_flops(x: Meta, w: Meta, out: Meta, transposed: bool) -> float:
    """torch's registry formula (`flop_counter.conv_flop_count`): 2 · output positions of a
    plain convolution (input positions of a transposed one) · weight elements · batch."""
    positions = math.prod((x if transposed else out).shape[2:])
    return 2.0 * x.shape[0] * positions * math.prod(w.shape)


def _tensors(obj, into: list) -> list:
    """The tensors in an argument, in order: itself, or inside lists, tuples and dicts."""
    if isinstance(obj, dict):
        obj = list(obj.values())
    if isinstance(obj, (list, tuple)):
        for x in obj:
            _tensors(x, into)
    elif isinstance(obj, Meta):
        into.append(obj)
    return into


def _unique(tensors: list) -> list:
    """Each tensor once, first place kept (one passed twice is read once)."""
    return list({id(t): t for t in tensors}.values())


def traffic_of(tkind, written, overwrite, schema, pos, kw, out) -> float:
    """`profile.traffic.count_traffic` on shapes: bytes read plus bytes written."""
    if tkind in ("free", "allocate"):
        return 0.0
    if tkind == "like":
        return float(sum(t.nbytes() for t in _unique(_tensors(out, []))))
    written_args: list = []
    for i in written:
        name = schema[i][0]
        value = kw.get(name) if name in kw else (pos[i] if i < len(pos) else None)
        _tensors(value, written_args)
    inputs = _unique(_tensors(kw, _tensors(pos, [])))
    outputs = _unique(_tensors(out, list(written_args)))
    write = float(sum(t.nbytes() for t in outputs))
    if tkind == "nll":
        return _nll_read(schema, pos, kw) + write
    if tkind == "lookup":
        read = sum(t.nbytes() for t in inputs[1:]) + write if inputs else 0.0
        return float(read) + write
    if overwrite and written_args:
        skip = {id(t) for t in written_args}
        inputs = [t for t in inputs if id(t) not in skip]
    return float(sum(t.nbytes() for t in inputs)) + write


def _nll_read(schema, pos, kw) -> float:
    """`profile.traffic`: the targets, one input entry and class weight per target; the
    backward reads the incoming gradient and the weight total instead of the input."""
    target = arg(schema, pos, kw, "target")
    n = target.numel if isinstance(target, Meta) else 0
    read = target.nbytes() if isinstance(target, Meta) else 0
    weight = arg(schema, pos, kw, "weight")
    if isinstance(weight, Meta):
        read += min(n, weight.numel) * weight.itemsize
    if "self" in (a[0] for a in schema) and "grad_output" not in (a[0] for a in schema):
        values = arg(schema, pos, kw, "self")
        read += n * values.itemsize if isinstance(values, Meta) else 0
    else:
        for name in ("grad_output", "total_weight"):
            t = arg(schema, pos, kw, name)
            read += t.nbytes() if isinstance(t, Meta) else 0
    return float(read)
