"""FLOPs of one aten op call, a multiply-add counted as 2.

Matmul, convolution and fused attention come from PyTorch's own formula registry
(torch.utils.flop_counter). Added here what it leaves out or gets wrong:

- Grouped and depthwise convolution backward (`ceiling.profile.conv_flops`): the registry
  counts the weight gradient `groups` times too high.

- CPU fused attention (`_scaled_dot_product_flash_attention_for_cpu` and its backward):
  the registry has no entry, so a plain FlopCounterMode reports 0 for attention on a CPU.
- Fused layers and grouped matmuls (`ceiling.profile.fused_flops`): nn.MultiheadAttention
  and nn.TransformerEncoderLayer fast paths, mixture-of-experts `_grouped_mm`.
- Recurrent layers (`ceiling.profile.rnn_flops`): LSTM, GRU and RNN kernels of oneDNN
  (`mkldnn_rnn_layer`, an LSTM on a CPU), cuDNN and MIOpen.
- Masked attention: the registry counts every query/key pair; a causal mask keeps about
  half of them, a sliding window, chunked attention or padding fewer, so attention is
  counted at the share kept ("causal-half", the convention `ceiling.model.mfu` names),
  decided from the causal flag, a flash kernel's window or the mask's values
  (`ceiling.profile.causal`); the pairs left out are carried beside the count.
- Elementwise, reduction, normalisation and optimizer ops, counted from element counts:
  1 FLOP per output element for plain arithmetic and comparisons (transcendentals too, by
  convention) — exact under that convention; fixed per-element costs for composite
  activations, softmax and norms — marked estimated.

Each result carries a category: "matmul" and "attention" make the model FLOPs used for MFU
(the work a dense matmul peak describes); the rest is reported but kept apart. An op with
no formula (a custom op, an aten op not listed here) is "unknown": its FLOPs are not zero
but not known, and MFU becomes a lower bound.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.utils import flop_counter

from ceiling.model.mfu import MODEL_CATEGORIES  # noqa: F401  (re-exported for the profiler)
from ceiling.profile import causal, conv_flops, fused_flops, rnn_flops
from ceiling.profile.fused_flops import argument
from ceiling.profile.op_kinds import (
    CPU_ATTENTION,
    FREE_OPS,
    MEMORY_OPS,
    NLL_LOSSES,
    NO_WORK,
    PER_ELEMENT_ESTIMATED,
    PER_ELEMENT_EXACT,
    REDUCTION_MEAN,
    REDUCTIONS,
    REGISTRY_ATTENTION,
)

aten = torch.ops.aten


@dataclass(frozen=True)
class FlopCount:
    flops: float
    exact: bool
    # matmul | attention | elementwise | reduction | norm | memory | view | unknown
    category: str
    recomputed: float = 0.0  # part of `flops` that redoes forward work (hardware, not model)
    causal_skipped: float = 0.0  # pairs a causal mask removes: full convention = flops + this


UNKNOWN = "unknown"


def is_free(func) -> bool:
    """Views and relabelings: no arithmetic, no memory traffic."""
    return func.is_view or func._overloadpacket.__name__ in FREE_OPS


def base_name(func) -> str:
    """'add_' and '_foreach_add_' -> 'add'; other names unchanged but for a trailing '_'."""
    name = func._overloadpacket.__name__
    if name.startswith("_foreach_"):
        name = name[len("_foreach_") :]
    if name.endswith("_") and not name.endswith("__"):
        name = name[:-1]
    return name


def _numel(x) -> int:
    if isinstance(x, torch.Tensor):
        return x.numel()
    if isinstance(x, (list, tuple)):
        return sum(_numel(v) for v in x)
    return 0


def _is_causal(func, args, kwargs) -> bool:
    if argument(func, args, kwargs, "is_causal", False):
        return True
    # memory-efficient kernels name the mask type instead: 0 none, 1/2 causal variants
    return bool(argument(func, args, kwargs, "custom_mask_type", 0))


def _out_numel(out, args) -> int:
    n = _numel(out)
    if n == 0 and args:  # in-place foreach ops return None: the first list is the output
        n = _numel(args[0])
    return n


def _lengths(name: str, q, k) -> tuple[int, int]:
    """(Lq, Lk): (batch, heads, seq, dim) for the _scaled_dot_product_* entry points,
    (batch, seq, heads, dim) for the kernels below them."""
    axis = -2 if name.startswith("_scaled_dot_product") else 1
    return int(q.shape[axis]), int(k.shape[axis])


def _attention(func, args, kwargs, flops: float, name: str) -> FlopCount:
    """Causal calls at the share of pairs they keep. A fused backward first recomputes the
    scores Q·Kᵀ (it did not keep them): that matmul is hardware work, not model work, so it
    is split out."""
    q, k = _query_key(func, args, kwargs)
    flag = _is_causal(func, args, kwargs)
    exact, share = True, 1.0
    four_d = isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor) and q.dim() == k.dim() == 4
    if four_d:
        mask = argument(func, args, kwargs, "attn_mask")
        if mask is None:
            mask = argument(func, args, kwargs, "attn_bias")
        window = (
            argument(func, args, kwargs, "window_size_left"),
            argument(func, args, kwargs, "window_size_right"),
        )
        share, exact = causal.share_for(flag, mask, *_lengths(name, q, k), window)
    elif flag:
        share = 0.5
    recomputed = 0.0
    if four_d and name.startswith("_scaled_dot_product") and name.endswith("backward"):
        b, h, s_q, d = q.shape
        recomputed = 2.0 * b * h * s_q * d * k.shape[-2]
    # the pairs left out are model FLOPs: the recomputation is not
    skipped = (flops - recomputed) * (1.0 - share)
    return FlopCount(flops * share, exact, "attention", recomputed * share, skipped)


def _query_key(func, args, kwargs):
    q = argument(func, args, kwargs, "query")
    k = argument(func, args, kwargs, "key")
    return q, k


# Formulas of our own, where the registry has none (fused layers, recurrent kernels) or a
# wrong one (grouped convolution backward)
_FORMULAS = {**fused_flops.FORMULAS, **conv_flops.FORMULAS, **rnn_flops.FORMULAS}

# Plain matmuls, counted as the registry does (2·M·N·K, batched: times the batch), from the
# position of their first operand: a's elements times b's columns
_PLAIN_MATMULS = {"mm": 0, "bmm": 0, "addmm": 1, "baddbmm": 1}

_KINDS: dict = {}  # OpOverload -> how its FLOPs are counted; decided once per op


def flop_kind(func) -> tuple[str, str]:
    """How an aten OpOverload's FLOPs are counted (free, memory, fused, registry, exact,
    estimated, ...) and the name its rule goes by; decided once per op."""
    kind = _KINDS.get(func)
    if kind is None:
        name = func._overloadpacket.__name__
        base = base_name(func)
        if is_free(func):
            kind = ("free", name)
        elif name in NO_WORK:
            kind = ("memory", name)
        elif name in _FORMULAS:
            kind = ("fused", name)
        elif name in NLL_LOSSES:
            kind = ("nll", name)
        elif name == "mse_loss":
            kind = ("mse", name)
        elif name in CPU_ATTENTION:
            kind = ("cpu_attention", name)
        elif name in _PLAIN_MATMULS and func._overloadpacket in flop_counter.flop_registry:
            kind = ("plain_matmul", name)
        elif func._overloadpacket in flop_counter.flop_registry:
            kind = ("registry_attention" if name in REGISTRY_ATTENTION else "registry", name)
        elif base in PER_ELEMENT_EXACT:
            kind = ("exact", base)
        elif base in PER_ELEMENT_ESTIMATED:
            kind = ("estimated", base)
        elif base in REDUCTIONS:
            kind = ("reduction", base)
        elif base in MEMORY_OPS:
            kind = ("memory", base)
        else:
            kind = (UNKNOWN, base)
        _KINDS[func] = kind
    return kind


def kind_category(func) -> str:
    """The category an op's FLOPs fall in, known from the op alone (a trace without shapes):
    as count_flops would file it."""
    kind, name = flop_kind(func)
    if kind in ("registry", "plain_matmul"):
        return "matmul"
    if kind in ("registry_attention", "cpu_attention"):
        return "attention"
    if kind == "fused":
        return _FORMULAS[name][0]
    if kind == "estimated":
        return PER_ELEMENT_ESTIMATED[name][0]
    if kind == "exact":
        return "elementwise"
    if kind in ("reduction", "nll", "mse"):
        return "reduction"
    return "view" if kind == "free" else kind  # memory, unknown


def count_flops(func, args, kwargs, out) -> FlopCount:
    """FLOPs of one call; `func` is an aten OpOverload, args and out as dispatched."""
    kind, name = flop_kind(func)
    if kind == "free":
        return FlopCount(0.0, True, "view")
    if kind == "fused":
        category, formula = _FORMULAS[name]
        c = formula(func, args, kwargs)
        return FlopCount(c.flops, c.exact, category, causal_skipped=c.causal_skipped)
    if kind == "cpu_attention":
        if CPU_ATTENTION[name] == "forward":
            q, k, v = args[:3]
            flops = flop_counter.sdpa_flop_count(q.shape, k.shape, v.shape)
        else:
            grad_out, q, k, v = args[:4]
            flops = flop_counter.sdpa_backward_flop_count(grad_out.shape, q.shape, k.shape, v.shape)
        return _attention(func, args, kwargs, float(flops), name)
    if kind == "plain_matmul":
        # the registry's formula, without its wrapper's walk over every argument
        a, b = args[_PLAIN_MATMULS[name]], args[_PLAIN_MATMULS[name] + 1]
        return FlopCount(2.0 * a.numel() * b.shape[-1], True, "matmul")
    if kind in ("registry", "registry_attention"):
        formula = flop_counter.flop_registry[func._overloadpacket]
        flops = float(formula(*args, **kwargs, out_val=out))
        if kind == "registry_attention":
            return _attention(func, args, kwargs, flops, name)
        return FlopCount(flops, True, "matmul")
    if kind == "nll":
        return _nll_flops(func, args, kwargs, name)
    if kind == "mse":
        # (x - y)², then the reduction: n - k adds, and k divides for a mean
        n, k = _numel(args[0]), _numel(out)
        reduction = argument(func, args, kwargs, "reduction", REDUCTION_MEAN)
        flops = 2 * n + (n - k if k < n else 0) + (k if reduction == REDUCTION_MEAN else 0)
        return FlopCount(float(flops), True, "reduction")
    if kind == "exact":
        return FlopCount(PER_ELEMENT_EXACT[name] * _out_numel(out, args), True, "elementwise")
    if kind == "estimated":
        category, per = PER_ELEMENT_ESTIMATED[name]
        # norms and softmax scale with their input; the first tensor argument is it
        n = _numel(args[0]) if category == "norm" and args else _out_numel(out, args)
        return FlopCount(per * n, False, category)
    if kind == "reduction":
        n_in = _numel(args[0]) if args else 0
        n_out = _numel(out)
        if name == "sum":
            return FlopCount(float(max(n_in - n_out, 0)), True, "reduction")
        if name == "mean":
            return FlopCount(float(max(n_in - n_out, 0) + n_out), True, "reduction")
        return FlopCount(float(n_in), False, "reduction")
    if kind == "memory":
        return FlopCount(0.0, True, "memory")
    return FlopCount(0.0, False, UNKNOWN)


def _nll_flops(func, args, kwargs, name: str) -> FlopCount:
    """One add (forward) or one scaled negation (backward) per target, times the class
    weight when there is one; a mean divides once."""
    n = _numel(argument(func, args, kwargs, "target"))
    weighted = argument(func, args, kwargs, "weight") is not None
    flops = n * (2 if weighted else 1)
    if name.endswith("forward") and argument(func, args, kwargs, "reduction") == REDUCTION_MEAN:
        flops += 1
    return FlopCount(float(flops), True, "reduction")


def matmul_batch(func, args) -> int:
    """How many matrix products one call makes: a bmm's batch, else 1."""
    if func._overloadpacket.__name__ not in ("bmm", "baddbmm"):
        return 1
    try:
        return int(args[0 if func._overloadpacket.__name__ == "bmm" else 1].shape[0])
    except (AttributeError, IndexError):
        return 1


def matmul_dims(func, args) -> tuple[int, ...] | None:
    """(M, N, K) of a matmul call, for the alignment hint; None for other ops."""
    name = func._overloadpacket.__name__
    try:
        if name == "mm":
            (m, k), (_, n) = args[0].shape, args[1].shape
        elif name == "addmm":
            (m, k), (_, n) = args[1].shape, args[2].shape
        elif name == "bmm":
            (_, m, k), (_, _, n) = args[0].shape, args[1].shape
        elif name == "baddbmm":
            (_, m, k), (_, _, n) = args[1].shape, args[2].shape
        else:
            return None
    except (AttributeError, ValueError, IndexError):
        return None
    return (int(m), int(n), int(k))


# calls whose rate no matmul shape gives: the library picks a kernel per shape (direct,
# im2col, Winograd; depthwise or not) or runs a recurrence step by step (small GEMMs in a
# loop), so each is replayed at its own shapes (measure.roofs.replayed_times)
REPLAYED_OPS = frozenset(("convolution", "convolution_backward", *rnn_flops.FORMULAS))


def replay_key(func, args) -> tuple | None:
    """A convolution's or a recurrent layer's call as its overload and its arguments, each
    tensor as ("tensor", shape, dtype): enough to run the same call again on fresh tensors
    and time it, its own compute roof; None for other ops."""
    if func._overloadpacket.__name__ not in REPLAYED_OPS:
        return None
    return (str(func), tuple(conv_flops.spec(a) for a in args))


def attention_dims(func, args, kwargs) -> tuple | None:
    """("forward" | "backward", B, H, Lq, Lk, head dim, causal) of a fused attention call
    on (batch, heads, seq, dim) tensors, the shape its measured rate is keyed by."""
    name = func._overloadpacket.__name__
    if not name.startswith("_scaled_dot_product"):
        return None
    q, k = _query_key(func, args, kwargs)
    if not (isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor)) or q.dim() != 4:
        return None
    if k.dim() != 4 or argument(func, args, kwargs, "attn_mask") is not None:
        return None
    b, h, lq, d = (int(s) for s in q.shape)
    direction = "backward" if name.endswith("backward") else "forward"
    return (direction, b, h, lq, int(k.shape[-2]), d, _is_causal(func, args, kwargs))
