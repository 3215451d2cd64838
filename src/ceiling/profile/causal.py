"""Whether attention is causal, decided from the mask's meaning, never from the kernel.

The convention ("causal-half"): a causal call is counted at the share of query/key pairs
its mask keeps, in the limit of long sequences — a half for a square mask (prefill,
training), 1 − Lq / (2·Lk) when Lq queries attend to Lk ≥ Lq keys aligned bottom-right (a
chunk of new tokens after a cache), all of them for one query (decode). The pairs it leaves
out are kept beside each count, so the full convention (every pair, PaLM's) is the count
plus them, the same way for every kernel: fused SDPA with `is_causal`, SDPA or fused
layers given an explicit causal mask (boolean or additive, padding on top allowed), and
eager attention (matmul, mask, softmax, matmul).

A mask is causal when every pair above the (bottom-right aligned) diagonal is masked, for
every batch row and head. On meta and fake tensors (`--device meta`) a mask is read from the
values its making fixes (`ceiling.profile.shadow_values`): SDPA's own mask on its math path,
a `tril` of ones, a comparison of positions; and eager attention is followed through storages
there as on a real device, so every device counts one model alike. A mask whose values
depend on data that holds none (a padding mask in a batch on meta) is undecided and counted
in full.
"""

from __future__ import annotations

import torch

from ceiling.profile.shadow_values import outside_modes, storage_id, value_of

HALF = "causal-half"


def kept_share(lq: int, lk: int) -> float:
    """Share of the Lq×Lk pairs a causal mask keeps, under the convention above."""
    if lq <= 0 or lk <= 0:
        return 1.0
    if lq >= lk:
        return 0.5
    return 1.0 - lq / (2.0 * lk)


def _values(t) -> torch.Tensor | None:
    """The values of `t` (replayed ones on meta and fake tensors), None when unknown."""
    if not isinstance(t, torch.Tensor) or t.is_nested:
        return None
    return value_of(t)


def _masked(mask: torch.Tensor, removes: bool) -> torch.Tensor:
    """True where the mask removes a pair: False in a boolean mask (True with `removes`, as
    masked_fill reads it), a large negative value (−inf, or dtype-min as Hugging Face writes
    it) in an additive one."""
    if mask.dtype == torch.bool:
        return mask if removes else ~mask
    if not mask.is_floating_point():
        return mask == 0
    floor = torch.finfo(mask.dtype).min / 2
    return mask <= floor


_CACHE: dict = {}  # (storage address, version, shape, stride) -> decision; masks repeat per layer


def is_causal_mask(mask, lq: int, lk: int, removes: bool = False) -> bool | None:
    """True when `mask` (broadcastable to (..., Lq, Lk)) removes every pair above the
    diagonal; False when not; None when its values cannot be read."""
    if not isinstance(mask, torch.Tensor) or mask.dim() < 2:
        return False
    if tuple(mask.shape[-2:]) != (lq, lk) or lq < 2:
        return False
    mask = _values(mask)
    if mask is None:
        return None
    with outside_modes():  # a fake-tensor mode around the step would take the values' ops
        return _masks_upper(mask, lq, lk, removes)


def _masks_upper(mask: torch.Tensor, lq: int, lk: int, removes: bool) -> bool:
    # one element first: the top-right pair is masked in every causal mask, and almost never
    # in an activation that only looks like one (a residual add of the same shape)
    corner = mask[(0,) * (mask.dim() - 2) + (0, lk - 1)]
    if not bool(_masked(corner, removes)):
        return False
    key = (mask.data_ptr(), mask._version, mask.shape, mask.stride(), mask.dtype, removes)
    found = _CACHE.get(key)
    if found is None:
        upper = torch.ones(lq, lk, dtype=torch.bool, device=mask.device).triu(lk - lq + 1)
        found = bool(_masked(mask, removes)[..., upper].all())
        if len(_CACHE) > 256:
            _CACHE.clear()
        _CACHE[key] = found
    return found


def share_for(is_causal_flag: bool, mask, lq: int, lk: int) -> tuple[float, bool]:
    """Kept share of pairs for one attention call, from the kernel's causal flag or else its
    mask; and whether that was decided (False: an unreadable mask, counted in full)."""
    if is_causal_flag:
        return kept_share(lq, lk), True
    found = is_causal_mask(mask, lq, lk)
    if found:
        return kept_share(lq, lk), True
    return 1.0, found is not None


# ---- eager attention: matmul, mask, softmax, matmul as separate ops ------------------------

_MATMULS = {"mm", "bmm", "baddbmm", "addmm"}
_BIASED = {"baddbmm", "addmm"}  # their first argument is added to the product: a mask can be
_PASS_ON = {  # the output is still (a function of) the masked scores
    "_softmax",
    "_safe_softmax",
    "native_dropout",
    "native_dropout_backward",
    "dropout",
    "mul",
    "div",
    "_to_copy",
    "clone",
    "contiguous",
    "masked_fill",
    "where",
    "add",
}
_WALK_BACK = 4  # elementwise steps allowed between a score matmul and its mask


def _address(t) -> int | None:
    if not isinstance(t, torch.Tensor) or t.is_nested:
        return None
    return storage_id(t)


def _tensors(args, kwargs) -> list[torch.Tensor]:
    return [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]


class EagerAttention:
    """Finds the matmuls of eager attention whose scores a causal mask removes, by following
    tensors (their storage) from the score matmul through the mask, softmax and dropout to
    the matmul with V, and back through their gradients. `observe` is called after each
    recorded op with its index; it returns the indices of matmul calls found causal, each
    with its kept share."""

    def __init__(self) -> None:
        self._tags: dict[int, tuple[int, int]] = {}  # storage -> (Lq, Lk) of masked scores
        # storage -> (index of the matmul it comes from, elementwise steps since): decided
        # when the buffer is made, as its source may be freed (and its address reused) later
        self._origin: dict[int, tuple[int, int]] = {}
        self.marked: dict[int, float] = {}

    def observe(self, name: str, args, kwargs, out, index: int) -> list[tuple[int, float]]:
        first = out[0] if isinstance(out, (tuple, list)) and out else out
        where = _address(first)
        if where is None:
            return []
        found: list[tuple[int, float]] = []
        tensors = _tensors(args, kwargs)
        shape = tuple(first.shape[-2:]) if first.dim() >= 2 else None
        tag = self._find_tag(name, tensors, shape, found)
        if name in _MATMULS:
            # a causal mask added by the matmul itself makes its output the masked scores;
            # a masked operand makes this one of attention's other matmuls
            operands = tensors[1:] if name in _BIASED else tensors
            carried = [c for c in (self._tags.get(_address(t)) for t in operands) if c]
            if tag or carried:
                found.append((index, kept_share(*(tag or carried[0]))))
        if tag is None and name == "_softmax_backward_data" and len(tensors) >= 2:
            tag = self._tags.get(_address(tensors[1]))
            if tag:
                self._walk_back(tensors[0], tag, found)
        if where not in {_address(t) for t in tensors}:  # a new buffer, not a view or in-place
            self._new_buffer(where, name, index, tensors, first.shape)
            self._tags.pop(where, None)
        if tag:
            self._tags[where] = tag
        for i, share in found:
            self.marked[i] = share
        return found

    def _find_tag(self, name, tensors, shape, found) -> tuple[int, int] | None:
        """A mask applied here (masked_fill, where, an added float mask, a biased matmul),
        or masked scores passed on."""
        if shape is None or shape[0] < 2:
            return None
        if name in ("masked_fill", "where", "add") or name in _BIASED:
            for i, mask in enumerate(tensors[:1] if name in _BIASED else tensors):
                if mask.dim() < 2 or tuple(mask.shape[-2:]) != shape:
                    continue
                if name == "where" and mask.dtype != torch.bool:
                    continue
                removes = name == "masked_fill"
                if removes and mask.dtype != torch.bool:
                    continue
                if is_causal_mask(mask, *shape, removes=removes):
                    if name not in _BIASED:  # the other operand holds the scores
                        for other in tensors[:i] + tensors[i + 1 :]:
                            if other.dim() >= 2 and tuple(other.shape[-2:]) == shape:
                                self._walk_back(other, shape, found)
                    return shape
        if name in _PASS_ON:
            for t in tensors:
                tag = self._tags.get(_address(t))
                if tag and tag == shape:
                    return tag
        return None

    def _new_buffer(self, where, name, index, tensors, shape) -> None:
        """Where a new buffer comes from: a matmul, or a few elementwise steps after one."""
        self._origin.pop(where, None)
        if name in _MATMULS:
            self._origin[where] = (index, 0)
            return
        source = next((_address(t) for t in tensors if t.shape == shape), None)
        entry = self._origin.get(source)
        if entry is not None and entry[1] + 1 < _WALK_BACK:
            self._origin[where] = (entry[0], entry[1] + 1)

    def _walk_back(self, t, tag, found) -> None:
        """Mark the matmul that made `t`, through a few elementwise steps (scale, dropout)."""
        entry = self._origin.get(_address(t))
        if entry is not None and entry[0] not in self.marked:
            found.append((entry[0], kept_share(*tag)))
