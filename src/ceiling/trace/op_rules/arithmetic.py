"""Output rules of pointwise maths (type promotion, broadcasting), matmuls, reductions,
softmaxes, a mean-squared-error loss and the optimizers' list ops."""

from __future__ import annotations

from ceiling.trace.op_rules.meta import (
    BOOL,
    FLOAT,
    LONG,
    NOT_HERE,
    TYPES,
    Meta,
    Refused,
    Unsure,
    arg,
    dtype_arg,
    ints,
)
from ceiling.trace.op_rules.promotion import broadcast, can_cast, result_type

_COMPARE = {"eq", "ne", "lt", "gt", "le", "ge", "logical_and", "logical_or", "logical_xor"}
_TO_FLOAT = {"sqrt", "rsqrt", "exp", "log", "log2", "log1p", "sigmoid", "tanh", "expm1", "erf"}
_KEEP = {"add", "sub", "mul", "rsub", "neg", "relu", "clamp_min", "square", "pow", "maximum"}
_BACKWARD = {"sigmoid_backward", "tanh_backward", "threshold_backward"}
_REDUCE = {"sum", "mean", "amax", "amin", "linalg_vector_norm"}


def arithmetic_output(op, overload, schema, pos, kw, self):
    """Pointwise maths, matmuls, reductions and list (optimizer) ops; NOT_HERE for another op."""
    inplace = op.endswith("_") and not op.endswith("__")
    base = op[:-1] if inplace else op
    if base in _COMPARE or base in _TO_FLOAT or base in _KEEP or base == "div":
        return _elementwise(base, inplace, schema, pos, kw)
    if base in _BACKWARD:
        tensors = [p for p in pos if isinstance(p, Meta)]
        if len(tensors) != 2 or tensors[0].dtype != tensors[1].dtype:
            raise Unsure
        shape = broadcast(*(t.shape for t in tensors))
        return Meta(shape, result_type(tensors))
    if base == "where" and overload == "self":
        cond, a, b = pos[:3]
        if cond.dtype != BOOL:
            raise Unsure
        return Meta(broadcast(cond.shape, a.shape, b.shape), result_type([a, b]))
    if op == "masked_fill_":
        mask = pos[1]
        if mask.dtype != BOOL or broadcast(self.shape, mask.shape) != self.shape:
            raise Unsure
        return self
    if op in ("addcmul_", "addcdiv_", "lerp_"):
        shape = broadcast(*(p.shape for p in pos[:3] if isinstance(p, Meta)))
        if shape != self.shape:
            raise Unsure
        return self
    if base in ("mm", "bmm", "addmm", "baddbmm"):
        out = _matmul(base, pos)
        if inplace and (out.shape != self.shape or out.dtype != self.dtype):
            raise Unsure
        return self if inplace else out
    if base in _REDUCE:
        return _reduce(base, overload, schema, pos, kw)
    if op in ("clamp", "clamp_") and overload == "default":
        low, high = pos[1], pos[2]
        if low is None and high is None:
            raise Refused
        dtype = result_type([self] + [v for v in (low, high) if v is not None])
        if op == "clamp_":
            if not can_cast(dtype, self.dtype):
                raise Unsure
            return self
        return Meta(self.shape, dtype)
    if op.removesuffix("_") in _FOREACH or op in _FUSED_OPTIMIZERS:
        return _foreach(op, pos)
    if op == "where" and overload == "Scalar":
        cond = pos[0]
        if cond.dtype != BOOL:
            raise Unsure
        return Meta(cond.shape, result_type(pos[1:3]))
    if op == "max" and overload == "dim":
        values = _reduce("max", overload, schema, pos, kw)
        return (values, Meta(values.shape, LONG))
    return NOT_HERE


def softmax_loss_output(op, overload, schema, pos, kw, self):
    """Softmaxes and the mean-squared-error loss; NOT_HERE for another op."""
    if op == "mse_loss":
        if arg(schema, pos, kw, "reduction", 1) not in (0, 1, 2):
            raise Unsure  # none, mean, sum: at::Reduction knows no other
        shape = broadcast(self.shape, pos[1].shape)
        dtype = result_type(pos[:2])
        return Meta(shape if arg(schema, pos, kw, "reduction", 1) == 0 else (), dtype)
    if op == "mse_loss_backward":
        tensors = [t for t in pos[:3] if isinstance(t, Meta)]
        return Meta(broadcast(*(t.shape for t in tensors)), result_type(tensors))
    if op in ("_softmax", "_log_softmax") and overload == "default":
        n = max(len(self.shape), 1)
        if pos[2] and self.dtype != "c10::Half":
            raise Refused  # half_to_float is for a half input only
        if not -n <= pos[1] < n:
            raise Unsure
        return Meta(self.shape, FLOAT if pos[2] else self.dtype)
    if op in ("_softmax_backward_data", "_log_softmax_backward_data"):
        grad, out = pos[0], pos[1]
        if grad.shape != out.shape:
            raise Unsure
        return Meta(grad.shape, dtype_arg(pos[3], grad.dtype))
    return NOT_HERE


def _elementwise(base, inplace, schema, pos, kw):
    names = ("self", "other", "exponent")
    operands = [
        arg(schema, pos, kw, n) for n in names if any(a[0] == n for a in schema[: len(pos)])
    ]
    tensors = [o for o in operands if isinstance(o, Meta)]
    if not tensors or any(not isinstance(o, (Meta, int, float)) for o in operands):
        raise Unsure
    shape = broadcast(*(t.shape for t in tensors))
    common = result_type(operands)
    if base not in _COMPARE and common == BOOL:
        raise Unsure  # arithmetic on booleans alone: torch promotes or refuses op by op
    if base in _COMPARE:
        dtype = BOOL
    elif base in _TO_FLOAT or base == "div":
        if arg(schema, pos, kw, "rounding_mode") is not None:
            raise Unsure
        dtype = common if TYPES[common][1] >= 2 else FLOAT
    else:
        dtype = common
        alpha = arg(schema, pos, kw, "alpha", 1)
        if isinstance(alpha, float) and TYPES[common][1] < 2:
            raise Unsure  # an integral add/sub with a floating alpha
        if base in ("sub", "rsub", "neg") and common == BOOL:
            raise Unsure
    if inplace:
        self = pos[0]
        if shape != self.shape or not can_cast(dtype, self.dtype):
            raise Unsure
        return self
    return Meta(shape, dtype)


def _matmul(base, pos):
    bias = None
    if base in ("addmm", "baddbmm"):
        bias, a, b = pos[:3]
    else:
        a, b = pos[:2]
    rank = 3 if "bmm" in base else 2
    if len(a.shape) != rank or len(b.shape) != rank or a.dtype != b.dtype:
        raise Unsure
    if a.shape[-1] != b.shape[-2] or (rank == 3 and a.shape[0] != b.shape[0]):
        raise Refused  # the inner (or batch) sizes differ
    shape = (*a.shape[:-1], b.shape[-1])
    if bias is not None and (bias.dtype != a.dtype or broadcast(bias.shape, shape) != shape):
        raise Unsure
    return Meta(shape, a.dtype)


def _reduce(base, overload, schema, pos, kw):
    self = pos[0]
    ndim = len(self.shape)
    dim = arg(schema, pos, kw, "dim")
    keep = bool(arg(schema, pos, kw, "keepdim", False))
    if dim is None or dim == []:
        dims = set(range(ndim))
    else:
        dims = set()
        for d in ints(dim):
            if not -max(ndim, 1) <= d < max(ndim, 1) or d % max(ndim, 1) in dims:
                raise Unsure  # out of range, or named twice
            dims.add(d % max(ndim, 1))
    shape = tuple(1 if i in dims else s for i, s in enumerate(self.shape) if keep or i not in dims)
    requested = arg(schema, pos, kw, "dtype")
    category = self.category
    if base == "sum":
        dtype = dtype_arg(requested, LONG if category < 2 else self.dtype)
    elif base in ("mean", "linalg_vector_norm"):
        if requested is None and category < 2:
            raise Unsure
        dtype = dtype_arg(requested, self.dtype)
    else:
        dtype = self.dtype
    return Meta(shape, dtype)


# optimizer steps over lists of tensors (checked against the replay: other _foreach ops are
# left to it, some have no meta kernel)
_FOREACH = {
    "_foreach_add",
    "_foreach_sub",
    "_foreach_mul",
    "_foreach_div",
    "_foreach_addcmul",
    "_foreach_addcdiv",
    "_foreach_sqrt",
}


_FUSED_OPTIMIZERS = {"_fused_adam_", "_fused_adamw_"}


def _foreach(op, pos):
    """A list op: as many tensors in each list (of one shape, position by position, for a
    _foreach op); updated in place, or new tensors shaped as the first list."""
    lists = [p for p in pos if isinstance(p, list)]
    first = lists[0]
    if not first or any(x and len(x) != len(first) for x in lists):
        raise Refused
    if op in _FUSED_OPTIMIZERS:
        if any(len(x) != len(first) for x in lists[1:4]):
            raise Refused
        return ()
    for x in lists[1:]:
        if len(x) != len(first) or any(a.shape != b.shape for a, b in zip(first, x, strict=True)):
            raise Refused
    if op.endswith("_"):
        return None  # updated in place
    return [Meta(t.shape, t.dtype) for t in first]
