"""Output rules of a network's layers: convolutions, activations, embeddings and lookups,
dropout, the negative log-likelihood loss and pooling (attention and norms in modules of
their own)."""

from __future__ import annotations

from ceiling.trace.op_rules.attention import attention_output
from ceiling.trace.op_rules.meta import (
    BOOL,
    LONG,
    NOT_HERE,
    Meta,
    Refused,
    Unsure,
    arg,
    ints,
    is_int,
)
from ceiling.trace.op_rules.norms import norm_output
from ceiling.trace.op_rules.promotion import result_type


def layer_output(op, overload, schema, pos, kw, self):
    """Convolutions, activations, lookups, dropout, the NLL loss and pooling, then the
    attention and norm families: the last ones asked (Unsure for an op none has a rule for)."""
    first = pos[0] if pos else None
    if isinstance(first, Meta) and first.category != 2 and op not in _LOOKUPS:
        raise Unsure  # these take floating inputs: torch refuses others kernel by kernel
    if op == "cudnn_convolution":
        raise Refused  # no meta kernel: the replay knows its kind only
    if op in ("convolution", "_convolution") and overload == "default":
        return _convolution(schema, pos, kw)
    if op == "convolution_backward" and overload == "default":
        grad, x, w = pos[:3]
        mask = pos[10]
        if len(x.shape) != len(w.shape) or grad.shape[1] != w.shape[0] or len(mask) != 3:
            raise Unsure
        if not grad.dtype == x.dtype == w.dtype:
            raise Unsure
        bias = arg(schema, pos, kw, "bias_sizes")
        return (
            Meta(x.shape, x.dtype) if mask[0] else None,
            Meta(w.shape, w.dtype) if mask[1] else None,
            Meta(ints(bias), grad.dtype) if mask[2] and bias is not None else None,
        )
    if op in ("gelu", "silu") and overload == "default":
        return Meta(self.shape, self.dtype)
    if op in ("gelu_backward", "silu_backward") and overload == "default":
        if pos[0].shape != pos[1].shape:
            raise Unsure
        return Meta(pos[0].shape, result_type(pos[:2]))
    if overload == "default" and op in _LOOKUPS:
        return _lookup(op, pos)
    if op == "native_dropout" and overload == "default":
        if self.category != 2:
            raise Unsure
        return (Meta(self.shape, self.dtype), Meta(self.shape, BOOL))
    if op == "nll_loss_forward" and overload == "default":
        target, reduction = pos[1], pos[3]
        if len(self.shape) not in (1, 2) or target.dtype != LONG or reduction not in (0, 1, 2):
            raise Unsure
        if len(self.shape) == 2 and target.shape != self.shape[:1]:
            raise Unsure
        out = self.shape[:1] if reduction == 0 and len(self.shape) == 2 else ()
        return (Meta(out, self.dtype), Meta((), self.dtype))
    if op in ("nll_loss_backward", "max_pool2d_with_indices_backward") and overload == "default":
        return Meta(pos[1].shape, pos[1].dtype)
    if op in ("max_pool2d_with_indices", "_adaptive_avg_pool2d") and overload == "default":
        return _pool(op, pos)
    fused = attention_output(op, overload, schema, pos, kw)
    if fused is not NOT_HERE:
        return fused
    return norm_output(op, overload, schema, pos, kw, self)


_LOOKUPS = ("embedding", "index_select", "embedding_dense_backward")


def _lookup(op, pos):
    """Rows picked from a table by index (and the gradient scattered back to them)."""
    if op == "index_select":
        table, dim, index = pos
        if len(index.shape) > 1 or index.dtype not in (LONG, "int") or not table.shape:
            raise Unsure
        if not -len(table.shape) <= dim < len(table.shape):
            raise Unsure
        shape = list(table.shape)
        shape[dim % len(shape)] = index.numel
        return Meta(shape, table.dtype)
    if op == "embedding":
        table, index = pos[0], pos[1]
        if len(table.shape) != 2 or index.dtype not in (LONG, "int"):
            raise Unsure
        return Meta((*index.shape, table.shape[1]), table.dtype)
    grad, index, rows = pos[0], pos[1], pos[2]
    if index.dtype not in (LONG, "int") or not is_int(rows) or rows < 0 or not grad.shape:
        raise Unsure
    return Meta((rows, grad.shape[-1]), grad.dtype)


def _pool(op, pos):
    """A 2-D pooling's output over the last two dimensions (as torch's pooling shape check)."""
    x = pos[0]
    if len(x.shape) not in (3, 4):
        raise Unsure
    lead, (h, w) = x.shape[:-2], x.shape[-2:]
    if op == "_adaptive_avg_pool2d":
        size = ints(pos[1])
        if len(size) != 2:
            raise Unsure
        return Meta((*lead, *size), x.dtype)
    kernel, stride, padding, dilation = (_pair(v) for v in pos[1:5])
    stride = stride or kernel
    ceil_mode = bool(pos[5])
    sizes = []
    for n, k, s, p, d in zip((h, w), kernel, stride, padding, dilation, strict=True):
        if k < 1 or s < 1 or d < 1 or p < 0 or p > (d * (k - 1) + 1) // 2:
            raise Unsure
        span = n + 2 * p - d * (k - 1) - 1
        out = (span + (s - 1 if ceil_mode else 0)) // s + 1
        if ceil_mode and (out - 1) * s >= n + p:
            out -= 1
        if out < 1:
            raise Unsure
        sizes.append(out)
    return (Meta((*lead, *sizes), x.dtype), Meta((*lead, *sizes), LONG))


def _pair(value) -> tuple:
    """An int[2] argument: one value stands for both; an empty list (a default stride) stays
    empty."""
    v = ints(value) if value != [] else ()
    if len(v) == 1:
        return v * 2
    if len(v) not in (0, 2):
        raise Unsure
    return v


def _convolution(schema, pos, kw):
    """The output of a convolution, as torch's shape check gives it."""
    x, w = pos[0], pos[1]
    names = ("stride", "padding", "dilation", "output_padding")
    stride, padding, dilation, output_padding = (arg(schema, pos, kw, n, [0]) for n in names)
    transposed = bool(arg(schema, pos, kw, "transposed", False))
    groups = arg(schema, pos, kw, "groups", 1)
    k = len(w.shape) - 2
    if k < 1 or len(x.shape) != k + 2 or x.dtype != w.dtype or not isinstance(groups, int):
        raise Unsure
    lists = [ints(v) for v in (stride, padding, dilation, output_padding)]
    stride, padding, dilation, output_padding = (v * k if len(v) == 1 else v for v in lists)
    if any(len(v) != k for v in (stride, padding, dilation)) or groups < 1:
        raise Unsure
    c_in = x.shape[1]
    if (w.shape[0] if transposed else w.shape[1] * groups) != c_in:
        raise Unsure if transposed else Refused
    c_out = w.shape[1] * groups if transposed else w.shape[0]
    sizes = []
    for i in range(k):
        n, kk = x.shape[2 + i], dilation[i] * (w.shape[2 + i] - 1) + 1
        if transposed:
            size = (n - 1) * stride[i] - 2 * padding[i] + kk + output_padding[i]
        else:
            size = (n + 2 * padding[i] - kk) // stride[i] + 1
        if size < 1:
            raise Unsure
        sizes.append(size)
    return Meta((x.shape[0], c_out, *sizes), x.dtype)
