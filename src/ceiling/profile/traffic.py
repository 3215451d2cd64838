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
- Lookups (`embedding`, `index_select`, ...) read the rows they return, not the whole table.
Counts are marked estimated where kernels are known to make more than one pass (softmax,
norms, sorts) or to read a data-dependent part of an input (gathers and scatters).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.utils._pytree import tree_flatten

from ceiling.profile.op_flops import base_name, is_free


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
    """Bytes of memory a tensor spans, stride-aware: stride-0 dimensions count once."""
    if t.numel() == 0:
        return 0
    elements = 1
    for size, stride in zip(t.shape, t.stride(), strict=True):
        if stride != 0:
            elements *= int(size)
    return elements * t.element_size()


def _tensors(tree) -> list[torch.Tensor]:
    leaves, _ = tree_flatten(tree)
    return [x for x in leaves if isinstance(x, torch.Tensor)]


def _unique(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    seen, out = set(), []
    for t in tensors:
        if id(t) not in seen:
            seen.add(id(t))
            out.append(t)
    return out


def _written_args(func, args, kwargs) -> list[torch.Tensor]:
    """Arguments the schema marks as written (Tensor(a!)): in-place targets and out=."""
    written = []
    for i, a in enumerate(func._schema.arguments):
        if a.alias_info is None or not a.alias_info.is_write:
            continue
        value = kwargs.get(a.name) if a.name in kwargs else (args[i] if i < len(args) else None)
        written.extend(_tensors(value))
    return written


def count_traffic(func, args, kwargs, out) -> Traffic:
    """Bytes read and written by one call, as dispatched (works on meta and fake tensors)."""
    if is_free(func):
        return Traffic(0.0, 0.0, True)
    name = func._overloadpacket.__name__
    base = base_name(func)
    if base in _ALLOCATE_ONLY:
        return Traffic(0.0, 0.0, True)
    if base.endswith("_like") or base.startswith("new_"):
        # factories that take only the shape and dtype of their argument
        written = sum(tensor_bytes(t) for t in _unique(_tensors(out)))
        return Traffic(0.0, float(written), True)
    written_args = _written_args(func, args, kwargs)
    written_ids = {id(t) for t in written_args}
    overwrite_only = base in _OVERWRITE or any(
        a.name == "out" for a in func._schema.arguments if a.alias_info is not None
    )
    inputs = _unique(_tensors((args, kwargs)))
    outputs = _unique(_tensors(out) + written_args)
    exact = name not in _MULTI_PASS and base not in _SCATTERS
    if base in _LOOKUPS:
        # the table (first argument) is read only where rows are returned
        table = inputs[0] if inputs else None
        read = sum(tensor_bytes(t) for t in inputs[1:]) + sum(tensor_bytes(t) for t in outputs)
        if table is None:
            read = 0
        return Traffic(float(read), float(sum(tensor_bytes(t) for t in outputs)), False)
    read = sum(tensor_bytes(t) for t in inputs if not (overwrite_only and id(t) in written_ids))
    write = sum(tensor_bytes(t) for t in outputs)
    return Traffic(float(read), float(write), exact)
