"""Values of tensors that hold none (meta and fake tensors), where how they were made fixes them.

Counting on `--device meta` runs the model on tensors that carry shapes only, so a causal mask
built inside the forward (`ones(L, L).tril()`, a comparison of two `arange`s, SDPA's own mask
on its math path) could not be read, and attention was counted in full there while a real
device counted it at half. The values of such tensors do not depend on the model's weights or
inputs: they come from factory ops (ones, arange, full, tril, ...) and from ops on tensors
made that way. Each such op is replayed on the CPU, on the values of its inputs, and the
result is kept beside the value-less tensor for as long as that tensor lives.

A mask registered as a buffer (nanoGPT's `bias`, a `tril` of ones) is replayed while the model
is built, and its values follow it onto the fake tensors the meta step runs on.

Nothing else is replayed: an op with any input that holds no value and has no replayed one
(the weights, the batch, every activation), a random op, an uninitialised buffer, or an
output larger than `LIMIT_BYTES`. A tensor written in place by an op that is not replayed
loses its value, with every view of its storage.
"""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_flatten, tree_unflatten
from torch.utils.weak import WeakIdKeyDictionary

LIMIT_BYTES = 1 << 28  # one replayed output: an 8k × 8k float mask

_VALUES: WeakIdKeyDictionary = WeakIdKeyDictionary()
_UNINITIALISED = ("empty", "new_empty", "empty_like", "empty_strided", "empty_permuted")
_CPU = torch.device("cpu")

# reading or replaying values: with every dispatch mode off, a fake-tensor mode included
outside_modes = _disable_current_modes


_PLAIN = (torch.Tensor, torch.nn.Parameter)


def holds_values(t: torch.Tensor) -> bool:
    if type(t) in _PLAIN:  # not a subclass: no fake-tensor check (a slow isinstance) needed
        return t.device.type != "meta"
    return not isinstance(t, FakeTensor) and t.device.type != "meta"


def value_of(t) -> torch.Tensor | None:
    """The values of `t`: itself when it holds them, else those replayed for it, else None."""
    if not isinstance(t, torch.Tensor):
        return None
    if holds_values(t):
        return t
    return _VALUES.get(t)


def storage_id(t: torch.Tensor) -> int:
    """One number per storage, alike for real, meta and fake tensors (views share it)."""
    return t.untyped_storage()._cdata


def replay(func, args, kwargs, out) -> None:
    """Keep the values of `out` when every input of `func` has values; see the module doc."""
    if type(out) in _PLAIN and not out.is_meta:  # a real tensor: its values are its own
        return
    if isinstance(out, torch.Tensor):  # most ops: no tree to walk
        outs = [out]
    elif isinstance(out, (tuple, list)) and all(isinstance(t, torch.Tensor) for t in out):
        outs = list(out)
    else:
        outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
    if all(holds_values(t) for t in outs):
        return
    leaves, spec = tree_flatten((args, kwargs))
    tensors = [x for x in leaves if isinstance(x, torch.Tensor)]
    result = _run_on_cpu(func, leaves, spec) if _replayable(func, tensors, outs) else None
    if result is None:
        if func._schema.is_mutable:
            _forget([t for t in tensors if not holds_values(t)])
        return
    values = [v for v in tree_flatten(result)[0] if isinstance(v, torch.Tensor)]
    if len(values) != len(outs):
        return
    for t, v in zip(outs, values, strict=True):
        if not holds_values(t) and tuple(v.shape) == tuple(t.shape):
            _VALUES[t] = v


def _run_on_cpu(func, leaves, spec):
    inputs = [value_of(x) if isinstance(x, torch.Tensor) else x for x in leaves]
    if any(v is None for v, x in zip(inputs, leaves, strict=True) if isinstance(x, torch.Tensor)):
        return None
    args, kwargs = tree_unflatten(inputs, spec)
    if "device" in kwargs:
        kwargs = {**kwargs, "device": _CPU}
    try:
        with outside_modes():
            return func(*args, **kwargs)
    except Exception:  # a kernel the CPU lacks: the values stay unknown
        return None


def _replayable(func, tensors, outs) -> bool:
    if torch.Tag.nondeterministic_seeded in func.tags:
        return False
    if func._overloadpacket.__name__ in _UNINITIALISED:
        return False
    if any(t.is_nested or t.layout != torch.strided for t in (*tensors, *outs)):
        return False
    return all(t.numel() * t.element_size() <= LIMIT_BYTES for t in outs)


def _forget(written: list[torch.Tensor]) -> None:
    """Drop the values of every tensor sharing storage with a tensor written blind."""
    stale = {storage_id(t) for t in written}
    for t in [t for t in _VALUES.keys() if storage_id(t) in stale]:  # noqa: SIM118
        _VALUES.pop(t, None)


class _Replaying(TorchDispatchMode):
    """Replays ops while a model is built, its parameters' copies excepted (they are the
    weights, and would double the memory of a model moved to meta)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if not any(isinstance(x, torch.nn.Parameter) for x in tree_flatten((args, kwargs))[0]):
            replay(func, args, kwargs, out)
        return out


def build_keeping_buffers(build, *args, **kwargs) -> tuple[torch.nn.Module, dict]:
    """`build(*args, **kwargs)` (a model, on meta) and the values of its buffers (a causal
    mask registered as one, `tril` of ones) as its making fixed them, by buffer name."""
    with _Replaying():
        model = build(*args, **kwargs)
    return model, {name: value_of(b) for name, b in model.named_buffers()}


def give_buffers(model: torch.nn.Module, values: dict) -> None:
    """Attach `values` (from build_keeping_buffers) to the model's value-less buffers of the
    same names and shapes: the model moved (`to_empty`) onto fake tensors."""
    for name, b in model.named_buffers():
        v = values.get(name)
        if v is not None and not holds_values(b) and tuple(v.shape) == tuple(b.shape):
            _VALUES[b] = v


__all__ = [
    "LIMIT_BYTES",
    "build_keeping_buffers",
    "give_buffers",
    "holds_values",
    "outside_modes",
    "replay",
    "storage_id",
    "value_of",
]
