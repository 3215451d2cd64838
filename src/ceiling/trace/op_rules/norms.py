"""Output rules of batch, group and layer normalisation (forward and backward)."""

from __future__ import annotations

from ceiling.trace.op_rules.meta import FLOAT, Meta, Refused, Unsure, ints


def norm_output(op, overload, schema, pos, kw, self):
    """Batch, group and layer norms and their backwards; Unsure for any other op (the last
    family asked)."""
    if op in _BATCH_NORMS and overload == "default":
        return _batch_norm(op, pos)
    if op == "native_group_norm" and overload == "default":
        n, c, hxw, group = pos[3:7]
        if n * c * hxw != self.numel or self.shape[:2] != (n, c) or c % group:
            raise Unsure
        if any(p is not None and p.shape != (c,) for p in pos[1:3]):
            raise Unsure
        stat = Meta((n, group), _stat_dtype(self.dtype))
        return (Meta(self.shape, self.dtype), stat, Meta(stat.shape, stat.dtype))
    if op == "native_group_norm_backward" and overload == "default":
        x, weight, mask = pos[1], pos[4], pos[9]
        n, c, hxw, group = pos[5:9]
        if weight is None or len(mask) != 3 or pos[0].shape != x.shape or c % group:
            raise Unsure
        stats = (n, group)
        if n * c * hxw != x.numel or x.shape[:2] != (n, c) or pos[2].shape != stats:
            raise Unsure
        if pos[3].shape != stats or weight.shape != (c,):
            raise Unsure
        return _gradients(x, weight, (c,), mask)
    if op == "native_layer_norm" and overload == "default":
        normalized = ints(pos[1])
        axis = len(self.shape) - len(normalized)
        if axis < 0 or tuple(self.shape[axis:]) != normalized:
            raise Unsure
        for p in pos[2:4]:
            if p is not None and p.shape != normalized:
                raise Unsure
        stats = (*self.shape[:axis], *([1] * len(normalized)))
        stat_dtype = FLOAT if self.dtype in ("c10::Half", "c10::BFloat16") else self.dtype
        return (Meta(self.shape, self.dtype), Meta(stats, stat_dtype), Meta(stats, stat_dtype))
    if op == "native_layer_norm_backward" and overload == "default":
        grad, x = pos[0], pos[1]
        weight, bias, mask = pos[5], pos[6], pos[7]
        normalized = ints(pos[2])
        if (
            grad.shape != x.shape
            or len(mask) != 3
            or x.shape[len(x.shape) - len(normalized) :] != normalized
        ):
            raise Unsure
        if any(p is not None and p.shape != normalized for p in (weight, bias)):
            raise Unsure
        stats = (*x.shape[: len(x.shape) - len(normalized)], *([1] * len(normalized)))
        if pos[3].shape != stats or pos[4].shape != stats:
            raise Unsure
        return (
            Meta(x.shape, x.dtype) if mask[0] else None,
            Meta(weight.shape, weight.dtype) if mask[1] and weight is not None else None,
            Meta(bias.shape, bias.dtype) if mask[2] and bias is not None else None,
        )
    raise Unsure


_BATCH_NORMS = {
    "native_batch_norm",
    "_native_batch_norm_legit",
    "_native_batch_norm_legit_no_training",
    "native_batch_norm_backward",
}


def _stat_dtype(dtype: str) -> str:
    """Norms keep their mean and inverse deviation in float32 for a 16-bit input."""
    return FLOAT if dtype in ("c10::Half", "c10::BFloat16") else dtype


def _gradients(x: Meta, weight: Meta | None, channels: tuple, mask):
    """A norm backward's (input, weight, bias) gradients, those the mask asks for."""
    if weight is None:
        raise Unsure
    return (
        Meta(x.shape, x.dtype) if mask[0] else None,
        Meta(channels, weight.dtype) if mask[1] else None,
        Meta(channels, weight.dtype) if mask[2] else None,
    )


def _batch_norm(op, pos):
    backward = op == "native_batch_norm_backward"
    x = pos[1] if backward else pos[0]
    if len(x.shape) < 2:
        raise Unsure
    channels = (x.shape[1],)
    for p in pos[2:7] if backward else pos[1:5]:
        if p is not None and (not isinstance(p, Meta) or p.shape != channels):
            if isinstance(p, Meta) and len(p.shape) == 1 and p.shape[0] > 1:
                raise Refused  # per-channel statistics of another length
            raise Unsure
    if backward:
        if pos[0].shape != x.shape or len(pos[9]) != 3:
            raise Unsure
        return _gradients(x, pos[2], channels, pos[9])
    stat = _stat_dtype(x.dtype)
    return (Meta(x.shape, x.dtype), Meta(channels, stat), Meta(channels, stat))
