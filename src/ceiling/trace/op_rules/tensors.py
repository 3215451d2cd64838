"""Output rules of the ops that make, fill, copy, view or concatenate tensors."""

from __future__ import annotations

import math

from ceiling.trace.op_rules.meta import (
    FLOAT,
    NOT_HERE,
    Meta,
    Refused,
    Unsure,
    arg,
    contiguous,
    dtype_arg,
    ints,
)
from ceiling.trace.op_rules.promotion import broadcast, promote_all, wrapped

_FACTORIES = {"zeros", "ones", "empty", "rand", "randn"}
_LIKE = {"zeros_like", "ones_like", "empty_like"}
_OVERWRITTEN = {"fill_", "zero_", "normal_", "uniform_"}
# views that only need their input to exist: same storage, no checks a recorded call can fail
_PLAIN_VIEWS = {
    "detach",
    "detach_",
    "conj",
    "resolve_conj",
    "lift_fresh",
    "alias",
    "_unsafe_view",
    "contiguous",
    "t",
}


def created_output(op, overload, schema, pos, kw, self):
    """Ops that make, fill or copy a tensor; NOT_HERE for another op."""
    if op in _OVERWRITTEN:
        if op in ("normal_", "uniform_") and self.category != 2:
            raise Unsure  # random values of a float distribution
        return self
    if op in ("_to_copy", "clone"):
        dtype = dtype_arg(arg(schema, pos, kw, "dtype"), self.dtype)
        return Meta(self.shape, dtype)
    if op == "copy_":
        broadcast(self.shape, pos[1].shape)
        if broadcast(self.shape, pos[1].shape) != self.shape:
            raise Unsure
        return self
    if op in _FACTORIES:
        size = ints(pos[0])
        return Meta(size, dtype_arg(arg(schema, pos, kw, "dtype"), FLOAT))
    if op in _LIKE:
        return Meta(self.shape, dtype_arg(arg(schema, pos, kw, "dtype"), self.dtype))
    if op in ("as_strided", "as_strided_", "empty_strided"):
        at = 0 if op == "empty_strided" else 1
        size, stride = ints(pos[at]), ints(pos[at + 1])
        if len(size) != len(stride):
            raise Unsure
        requested = arg(schema, pos, kw, "dtype")
        if op == "as_strided_":
            self.shape, self.strides = size, stride
            return self
        dtype = self.dtype if op == "as_strided" else dtype_arg(requested, FLOAT)
        return Meta(size, dtype, stride)
    if op == "resize_":
        return Meta(ints(pos[1]) if pos[1] != [] else (), self.dtype)
    if op == "to" and overload in ("dtype_layout", "dtype"):
        return Meta(self.shape, dtype_arg(arg(schema, pos, kw, "dtype"), self.dtype))
    if op == "scalar_tensor":
        return Meta((), dtype_arg(arg(schema, pos, kw, "dtype"), FLOAT))
    if op == "_local_scalar_dense":
        raise Refused  # a value the meta device does not hold
    if op == "arange" and overload == "default":
        end = pos[0]
        if not isinstance(end, (int, float)) or isinstance(end, bool) or end < 0:
            raise Unsure
        dtype = dtype_arg(arg(schema, pos, kw, "dtype"), wrapped(end))
        return Meta((math.ceil(end),), dtype)
    return NOT_HERE


def view_output(op, overload, schema, pos, kw, self):
    """Views, reshapes and concatenation; NOT_HERE for another op."""
    if op in _PLAIN_VIEWS and overload == "default":
        if op == "t" and len(self.shape) > 2:
            raise Unsure
        return self if op == "detach_" else Meta(self.shape, self.dtype)
    if op == "transpose" and overload == "int":
        n = max(len(self.shape), 1)
        for d in pos[1:3]:
            if not -n <= d < n:
                raise Unsure
        return Meta(self.shape, self.dtype)
    if op == "select" and overload == "int":
        n = len(self.shape)
        dim, index = pos[1], pos[2]
        if not n or not -n <= dim < n or not -self.shape[dim] <= index < self.shape[dim]:
            raise Unsure
        return Meta(self.shape[: dim % n] + self.shape[dim % n + 1 :], self.dtype)
    if op == "reshape" and overload == "default":
        return Meta(_view_shape(self, ints(pos[1])), self.dtype)
    if op == "view" and overload == "default":
        return Meta(_view_shape(self, ints(pos[1])), self.dtype)
    if op == "expand":
        size = ints(pos[1])
        if len(size) < len(self.shape):
            raise Unsure
        for have, want in zip(reversed(self.shape), reversed(size), strict=False):
            if want != -1 and have not in (1, want):
                raise Unsure
        return Meta(size, self.dtype)
    if op in ("cat", "stack") and pos[0] == []:
        raise Refused
    if op == "cat" and overload == "default":
        return _cat(pos[0], pos[1])
    if op == "flatten" and overload == "using_ints":
        n = len(self.shape)
        if n == 0:
            return Meta((1,), self.dtype)
        start, end = (d % n if -n <= d < n else None for d in pos[1:3])
        if start is None or end is None or start > end:
            raise Unsure
        middle = math.prod(self.shape[start : end + 1])
        return Meta((*self.shape[:start], middle, *self.shape[end + 1 :]), self.dtype)
    return NOT_HERE


def _cat(tensors: list, dim) -> Meta:
    """torch.cat's output: sizes added along `dim`, the rest equal (a legacy empty 1-D
    tensor is skipped)."""
    kept = [t for t in tensors if t.shape != (0,)]
    if not kept or not isinstance(dim, int):
        raise Unsure
    rank = len(kept[0].shape)
    if rank == 0 or not -rank <= dim < rank:
        raise Unsure
    dim %= rank
    shape = list(kept[0].shape)
    for t in kept[1:]:
        if len(t.shape) != rank:
            raise Unsure
        if any(a != b for i, (a, b) in enumerate(zip(t.shape, shape, strict=True)) if i != dim):
            raise Unsure
        shape[dim] += t.shape[dim]
    return Meta(shape, promote_all(t.dtype for t in kept))


def _view_shape(self: Meta, size: tuple) -> tuple:
    numel = self.numel
    if size.count(-1) > 1:
        raise Refused
    known = math.prod(s for s in size if s != -1)
    if -1 in size:
        if known == 0 or numel % known:
            raise Refused
        size = tuple(numel // known if s == -1 else s for s in size)
    elif known != numel:
        raise Refused
    if self.strides != contiguous(self.shape):
        raise Unsure  # a view of a strided tensor: torch checks the strides can be kept
    return size
