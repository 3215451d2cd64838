"""Bytes one aten op call reads and writes: its tensor inputs once, its outputs once.

That is the compulsory traffic a single-pass kernel needs; the roofline is drawn against
it. Rules:
- A tensor counts the memory it spans, not its element count: a dimension with stride 0
  (an `expand`ed tensor) is read once, so a broadcast bias costs its own size only.
- Views and relabelings move nothing (0 bytes); allocation without a fill moves nothing;
  `zeros_like`-style factories read nothing from their argument.
- An argument the op only overwrites (`out=`, the destination of `copy_`/`fill_`) is
  written, not read; an in-place update (`add_`) is read and written.
- A tensor passed twice (`x * x`) is read once.
- Lookups (`embedding`, `index_select`, ...) read the rows they return, not the whole table;
  `nll_loss` reads one entry per target (its backward writes the whole gradient, reading
  no input values).
Counts are marked estimated where kernels are known to make more than one pass (softmax,
norms, sorts) or to read a data-dependent part of an input (gathers and scatters).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ceiling.profile.op_flops import NLL_LOSSES, argument, base_name, is_free


@dataclass(frozen=True)
class Traffic:
    bytes_read: float
    bytes_written: float
    exact: bool

    @property
    def bytes(self) -> float:
        return self.bytes_read + self.bytes_written


_ALLOCATE_ONLY = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"}
_OVERWRITE = {"copy", "fill", "zero", "normal", "uniform", "bernoulli", "random", "exponential"}
_MULTI_PASS = {
    "_softmax",
    "_log_softmax",
    "_softmax_backward_data",
    "_log_softmax_backward_data",
    "native_layer_norm",
    "native_layer_norm_backward",
    "native_group_norm",
    "native_group_norm_backward",
    "native_batch_norm",
    "native_batch_norm_backward",
    "_native_batch_norm_legit",
    "sort",
    "topk",
    "cumsum",
}
_LOOKUPS = {"embedding", "index_select", "gather", "_unsafe_index", "index"}
_SCATTERS = {"embedding_dense_backward", "scatter", "scatter_add", "index_put", "index_add"}


def tensor_bytes(t: torch.Tensor) -> int:
    """Bytes of memory a tensor spans, stride-aware: stride-0 dimensions count once. A nested
    tensor (nn.TransformerEncoder's fast path over padded batches) spans its sequences."""
    if t.is_nested:
        return nested_elements(t) * t.element_size()
    if t.is_contiguous():  # most tensors: every element once, no strides to walk
        return t.numel() * t.element_size()
    if t.numel() == 0:
        return 0
    elements = 1
    for size, stride in zip(t.shape, t.stride(), strict=True):
        if stride != 0:
            elements *= int(size)
    return elements * t.element_size()


def nested_elements(t: torch.Tensor) -> int:
    """Elements a nested tensor holds: its sequences' sizes, multiplied out and summed."""
    sizes = t._nested_tensor_size()
    return int(sizes.prod(dim=1).sum()) if sizes.numel() else 0


def _tensors(obj, into: list | None = None) -> list[torch.Tensor]:
    """Tensors in an argument: itself, or inside (nested) lists, tuples and dicts."""
    out = [] if into is None else into
    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif isinstance(obj, (list, tuple)):
        for x in obj:
            _tensors(x, out)
    elif isinstance(obj, dict):
        for x in obj.values():
            _tensors(x, out)
    return out


def _written_bytes(out) -> int:
    """Bytes of the tensors in an op's output, each once (a single tensor: no tree walk)."""
    if isinstance(out, torch.Tensor):
        return tensor_bytes(out)
    return sum(tensor_bytes(t) for t in _unique(_tensors(out)))


def _unique(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    seen, out = set(), []
    for t in tensors:
        if id(t) not in seen:
            seen.add(id(t))
            out.append(t)
    return out


@dataclass(frozen=True)
class _Rule:
    kind: str  # free | allocate | like | lookup | plain
    written: tuple[tuple[int, str], ...]  # (position, name) of arguments the op writes
    overwrite_only: bool  # written arguments are not read first
    exact: bool


_RULES: dict = {}  # OpOverload -> _Rule, decided once per op


def _rule(func) -> _Rule:
    rule = _RULES.get(func)
    if rule is None:
        name = func._overloadpacket.__name__
        base = base_name(func)
        schema_args = func._schema.arguments
        written = tuple(
            (i, a.name)
            for i, a in enumerate(schema_args)
            if a.alias_info is not None and a.alias_info.is_write
        )
        if is_free(func):
            kind = "free"
        elif base in _ALLOCATE_ONLY:
            kind = "allocate"
        elif base.endswith("_like") or base.startswith("new_"):
            kind = "like"
        elif base in _LOOKUPS:
            kind = "lookup"
        elif name in NLL_LOSSES:
            kind = "nll"
        else:
            kind = "plain"
        rule = _Rule(
            kind=kind,
            written=written,
            overwrite_only=base in _OVERWRITE or any(n == "out" for _, n in written),
            exact=name not in _MULTI_PASS and base not in _SCATTERS,
        )
        _RULES[func] = rule
    return rule


def count_traffic(func, args, kwargs, out) -> Traffic:
    """Bytes read and written by one call, as dispatched (works on meta and fake tensors)."""
    rule = _rule(func)
    if rule.kind in ("free", "allocate"):
        return Traffic(0.0, 0.0, True)
    if rule.kind == "like":
        # factories that take only the shape and dtype of their argument
        return Traffic(0.0, float(_written_bytes(out)), True)
    written_args: list[torch.Tensor] = []
    for i, name in rule.written:
        value = kwargs.get(name) if name in kwargs else (args[i] if i < len(args) else None)
        _tensors(value, written_args)
    inputs = _unique(_tensors(kwargs, _tensors(args)))
    if written_args:
        outputs = _unique(_tensors(out, list(written_args)))
        write = float(sum(tensor_bytes(t) for t in outputs))
    else:
        write = float(_written_bytes(out))
    if rule.kind == "nll":
        return _nll_traffic(func, args, kwargs, write)
    if rule.kind == "lookup":
        # the table (first argument) is read only where rows are returned
        read = sum(tensor_bytes(t) for t in inputs[1:]) + write if inputs else 0.0
        return Traffic(float(read), write, False)
    if rule.overwrite_only and written_args:
        skip = {id(t) for t in written_args}
        inputs = [t for t in inputs if id(t) not in skip]
    read = float(sum(tensor_bytes(t) for t in inputs))
    return Traffic(read, write, rule.exact)


def _nll_traffic(func, args, kwargs, written: float) -> Traffic:
    """Targets, one input entry per target, the class weights they pick; the backward
    reads the incoming gradient and the weight total, and writes the whole gradient."""
    target = argument(func, args, kwargs, "target")
    n = target.numel() if isinstance(target, torch.Tensor) else 0
    read = tensor_bytes(target) if isinstance(target, torch.Tensor) else 0
    weight = argument(func, args, kwargs, "weight")
    if isinstance(weight, torch.Tensor):
        read += min(n, weight.numel()) * weight.element_size()
    if func._overloadpacket.__name__.endswith("forward"):
        values = argument(func, args, kwargs, "self")
        read += n * values.element_size() if isinstance(values, torch.Tensor) else 0
    else:
        for name in ("grad_output", "total_weight"):
            t = argument(func, args, kwargs, name)
            read += tensor_bytes(t) if isinstance(t, torch.Tensor) else 0
    return Traffic(float(read), written, False)
