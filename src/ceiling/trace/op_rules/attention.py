"""Fused scaled-dot-product attention: the outputs its kernels return on the meta device and
the FLOPs torch's registry counts for them."""

from __future__ import annotations

from ceiling.trace.op_rules.meta import FLOAT, LONG, NOT_HERE, Meta, Unsure, arg

ATTENTION = ("_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention")


def attention_output(op, overload, schema, pos, kw):
    """A fused attention kernel's outputs, or NOT_HERE for another op."""
    if op in ATTENTION and overload == "default":
        return _fused_outputs(op, schema, pos, kw)
    if op == "_scaled_dot_product_flash_attention_for_cpu" and overload == "default":
        q, v = pos[0], pos[2]
        if len(q.shape) != 4 or not q.dtype == pos[1].dtype == v.dtype:
            raise Unsure
        return (Meta((*q.shape[:3], v.shape[-1]), q.dtype), Meta(q.shape[:3], FLOAT))
    if op == "_scaled_dot_product_flash_attention_for_cpu_backward" and overload == "default":
        return tuple(Meta(t.shape, t.dtype) for t in pos[1:4])
    return NOT_HERE


def _fused_outputs(op, schema, pos, kw):
    """A fused attention kernel's outputs on the meta device: the output, the log-sum-exp
    kept for the backward (float32; the memory-efficient kernel pads it to 32 queries) and
    the random state of its dropout."""
    q, k, v = pos[:3]
    if not len(q.shape) == len(k.shape) == len(v.shape) == 4 or not q.dtype == k.dtype == v.dtype:
        raise Unsure
    b, h, lq, _ = q.shape
    bias = arg(schema, pos, kw, "attn_bias")
    same = q.shape[:2] == k.shape[:2] == v.shape[:2] and k.shape[2] == v.shape[2]
    if not same or q.shape[3] != k.shape[3]:
        raise Unsure
    if bias is not None and (not isinstance(bias, Meta) or bias.shape != (b, h, lq, k.shape[2])):
        raise Unsure
    if op == "_scaled_dot_product_flash_attention":
        if arg(schema, pos, kw, "return_debug_mask"):
            raise Unsure  # the kernel's own block sizes shape it
        debug = (0,)
        return (
            Meta(q.shape, q.dtype),
            Meta((b, h, lq), FLOAT),
            Meta((2,), "uint64"),
            Meta((), "uint64"),
            Meta(debug, q.dtype),
        )
    rows = -(-lq // 32) * 32 if arg(schema, pos, kw, "compute_log_sumexp") else 0
    return (
        Meta((b, h, lq, v.shape[-1]), q.dtype),
        Meta((b, h, rows), FLOAT),
        Meta((), LONG),
        Meta((), LONG),
    )


def attention_flops(rule, schema, pos, kw):
    """torch's registry formulas (`flop_counter.sdpa_flop_count`: Q·Kᵀ and P·V; its backward
    recomputes Q·Kᵀ, then four products), counted at the share of query/key pairs a causal
    mask keeps (`profile.causal.kept_share`); the backward's recomputation is kept apart
    (hardware work, not model work); an explicit mask's values are not recorded, so it is
    counted in full, marked estimated."""
    backward = rule.endswith("backward")
    q, k, v = pos[1:4] if backward else pos[:3]
    if not len(q.shape) == len(k.shape) == len(v.shape) == 4:
        raise Unsure
    b, h, lq, d = q.shape
    lk, dv = k.shape[-2], v.shape[-1]
    recomputed = 2.0 * b * h * lq * d * lk if backward else 0.0
    if backward:
        flops = 2.0 * b * h * lq * lk * (3 * d + 2 * dv)
    else:
        flops = 2.0 * b * h * lq * d * lk + 2.0 * b * h * lq * lk * dv
    if arg(schema, pos, kw, "is_causal", False):
        share = 1.0 if lq <= 0 or lk <= 0 else 0.5 if lq >= lk else 1.0 - lq / (2.0 * lk)
        return flops * share, True, "attention", recomputed * share
    mask = arg(schema, pos, kw, "attn_mask", arg(schema, pos, kw, "attn_bias"))
    return flops, mask is None, "attention", recomputed
