"""Which query/key pairs attention keeps, decided from the mask applied, never from the kernel.

The convention ("causal-half"): attention is counted at the share of query/key pairs its
mask keeps. A causal mask keeps, in the limit of long sequences, a half of a square (prefill,
training), 1 − Lq / (2·Lk) when Lq queries attend to Lk ≥ Lq keys aligned bottom-right (a
chunk of new tokens after a cache), all of them for one query (decode): the pairs kept less
half the diagonal. Any other mask is counted the same way, from its values: a sliding
window (Gemma-2, Mistral), chunked or local attention, padding, or several at once; a mask
that masks every pair above the diagonal (a causal one, with or without a window or padding)
has half its kept diagonal taken off, so a plain causal mask gives exactly the half above.
Both matmuls (Q·Kᵀ and P·V) and their gradients get the share, whatever runs between them
(scaling, logit softcapping's tanh, dropout). The pairs left out are kept beside each count,
so the full convention (every pair, PaLM's) is the count plus them, the same way for every
kernel: fused SDPA with `is_causal`, flash kernels with a window, SDPA or fused layers
given an explicit mask (boolean or additive), and eager attention (matmul, mask, softmax,
matmul).

On meta and fake tensors (`--device meta`) a mask is read from the values its making fixes
(`ceiling.profile.shadow_values`): SDPA's own mask on its math path, a `tril` of ones, a
comparison of positions; and eager attention is followed through storages there as on a
real device, so every device counts one model alike. A mask whose values depend on data that
holds none (a padding mask in a batch on meta) is undecided and counted in full.
"""

from __future__ import annotations

import weakref
from functools import lru_cache

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


@lru_cache(maxsize=256)
def window_share(lq: int, lk: int, left: int | None, right: int | None) -> float:
    """Share of pairs a banded mask keeps: query i (at key position i + Lk − Lq) sees keys
    from `left` before it to `right` after it (None: no limit), as flash kernels' windows.
    right = 0 is causal: half the kept diagonal comes off, as for a mask."""
    if lq <= 0 or lk <= 0:
        return 1.0
    kept = 0
    for i in range(lq):
        p = i + lk - lq
        lo = 0 if left is None or left < 0 else max(0, p - left)
        hi = lk - 1 if right is None or right < 0 else min(lk - 1, p + right)
        kept += max(0, hi - lo + 1)
    if right == 0 and lq >= 2:
        kept -= sum(1 for i in range(lq) if 0 <= i + lk - lq < lk) / 2
    return kept / (lq * lk)


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


def _fits(mask, lq: int, lk: int) -> bool:
    """Whether `mask` broadcasts to (..., Lq, Lk)."""
    if not isinstance(mask, torch.Tensor) or mask.dim() < 2:
        return False
    rows, cols = mask.shape[-2:]
    return rows in (1, lq) and cols in (1, lk)


# id(mask) -> (the mask, weakly; its version and layout; its share): masks repeat per layer
_CACHE: dict = {}


def mask_share(mask, lq: int, lk: int, removes: bool = False) -> float | None:
    """Share of the pairs `mask` (broadcastable to (..., Lq, Lk)) keeps, averaged over its
    batch rows and heads, under the convention above; 1.0 for no mask; None when its values
    cannot be read."""
    if mask is None or not _fits(mask, lq, lk):
        return 1.0
    values = _values(mask)
    if values is None:
        return None
    key = (values._version, values.shape, values.stride(), values.storage_offset(), removes, lq, lk)
    entry = _CACHE.get(id(values))
    # the same tensor, unchanged: a freed mask's address may hold another one since
    if entry is not None and entry[0]() is values and entry[1] == key:
        return entry[2]
    with outside_modes():  # a fake-tensor mode around the step would take the values' ops
        found = _share_of(values, lq, lk, removes)
    if len(_CACHE) > 256:
        _CACHE.clear()
    _CACHE[id(values)] = (weakref.ref(values), key, found)
    return found


def _share_of(mask: torch.Tensor, lq: int, lk: int, removes: bool) -> float:
    masked = _masked(mask, removes)
    masked = masked.expand(*masked.shape[:-2], lq, lk)
    kept = ~masked
    pairs = float(kept.sum())
    if lq >= 2:
        upper = torch.ones(lq, lk, dtype=torch.bool, device=mask.device).triu(lk - lq + 1)
        if bool(masked[..., upper].all()):  # causal-like: half the kept diagonal comes off
            pairs -= float(kept.diagonal(lk - lq, -2, -1).sum()) / 2
    rows = masked.numel() // (lq * lk)
    return pairs / (rows * lq * lk)


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
    with outside_modes():
        upper = torch.ones(lq, lk, dtype=torch.bool, device=mask.device).triu(lk - lq + 1)
        return bool(_masked(mask, removes)[..., upper].all())


def share_for(
    is_causal_flag: bool, mask, lq: int, lk: int, window: tuple | None = None
) -> tuple[float, bool]:
    """Kept share of pairs for one attention call, from the kernel's causal flag and window
    (left, right) or else its mask; and whether that was decided (False: an unreadable mask,
    counted in full)."""
    if window is not None and any(w is not None and w >= 0 for w in window):
        left, right = (None if w is None else int(w) for w in window)  # hashable: cached
        return window_share(int(lq), int(lk), left, 0 if is_causal_flag else right), True
    if is_causal_flag:
        return kept_share(lq, lk), True
    found = mask_share(mask, lq, lk)
    if found is None:
        return 1.0, False
    return found, True


# ---- eager attention: matmul, mask, softmax, matmul as separate ops ------------------------

_MATMULS = {"mm", "bmm", "baddbmm", "addmm"}
_BIASED = {"baddbmm", "addmm"}  # their first argument is added to the product: a mask can be
_MASKING = {"masked_fill", "where", "add"}
# attention's scores come from a batched matmul; a linear layer's mm output (then a residual
# add of its shape) is never read as attention
_SCORE_MATMULS = {"bmm", "baddbmm"}
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
    "tanh",  # logit softcapping, when it comes after the mask
    "tanh_backward",
}
# the ops attention's scores pass through; any other op is looked at only to forget a
# buffer it reuses, so most cost two dictionary look-ups
_WATCHED = _MATMULS | _MASKING | _PASS_ON | {"_softmax_backward_data"}
# elementwise steps allowed between a score matmul and its mask: scale, softcap (divide,
# tanh, multiply), a copy or two
_WALK_BACK = 8


def _address(t) -> int | None:
    if not isinstance(t, torch.Tensor) or t.is_nested:
        return None
    return storage_id(t)


def _tensors(args, kwargs) -> list[torch.Tensor]:
    """Plain tensor arguments: nested ones (a fused layer's padded batch) hold no scores."""
    return [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor) and not a.is_nested]


class EagerAttention:
    """Finds the matmuls of eager attention and the share of pairs its mask keeps, by
    following tensors (their storage) from the score matmul through the mask, softmax and
    dropout to the matmul with V, and back through their gradients. `observe` is called
    after each recorded op with its index; it returns the indices of matmul calls found
    masked, each with its kept share. A mask is read only where it meets scores that come
    from a batched matmul (once per mask tensor), and ops scores do not pass through cost
    two dictionary look-ups."""

    def __init__(self) -> None:
        # storage -> (Lq, Lk, kept share) of masked scores
        self._tags: dict[int, tuple[int, int, float]] = {}
        # storage -> (index of the matmul it comes from, elementwise steps since): decided
        # when the buffer is made, as its source may be freed (and its address reused) later
        self._origin: dict[int, tuple[int, int]] = {}
        self.marked: dict[int, float] = {}

    def observe(self, name: str, args, kwargs, out, index: int) -> list[tuple[int, float]]:
        first = out[0] if isinstance(out, (tuple, list)) and out else out
        where = _address(first)
        if where is None:
            return []
        if name not in _WATCHED:
            self._forget(where, args, kwargs)
            return []
        found: list[tuple[int, float]] = []
        tensors = _tensors(args, kwargs)
        shape = tuple(first.shape[-2:]) if first.dim() >= 2 else None
        tag = self._find_tag(name, tensors, shape, found)
        if name in _MATMULS:
            # a mask added by the matmul itself makes its output the masked scores; a masked
            # operand makes this one of attention's other matmuls
            operands = tensors[1:] if name in _BIASED else tensors
            carried = [c for c in (self._tags.get(_address(t)) for t in operands) if c]
            if tag or carried:
                found.append((index, (tag or carried[0])[2]))
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

    def _forget(self, where: int, args, kwargs) -> None:
        """An op that neither masks nor carries scores: a buffer it makes where masked
        scores (or a matmul's output) were is a new one, which holds neither."""
        if where not in self._tags and where not in self._origin:
            return
        if where not in {_address(t) for t in _tensors(args, kwargs)}:
            self._tags.pop(where, None)
            self._origin.pop(where, None)

    def _find_tag(self, name, tensors, shape, found) -> tuple[int, int, float] | None:
        """A mask applied here (masked_fill, where, an added float mask, a biased matmul),
        or masked scores passed on."""
        if shape is None or shape[0] < 2:
            return None
        if name in _BIASED:
            return self._tag_of(tensors[0], shape, removes=False) if tensors else None
        if name in _MASKING:
            # scores a batched matmul made a few steps before, and the mask beside them
            scores = [t for t in tensors if t.dim() >= 2 and tuple(t.shape[-2:]) == shape]
            for s in [t for t in scores if _address(t) in self._origin]:
                for mask in tensors:
                    if mask is s or not _fits(mask, *shape):
                        continue
                    if name == "where" and (mask is not tensors[0] or mask.dtype != torch.bool):
                        continue
                    removes = name == "masked_fill"
                    if removes and mask.dtype != torch.bool:
                        continue
                    if name == "add" and not mask.is_floating_point():
                        continue
                    tag = self._tag_of(mask, shape, removes)
                    if tag:
                        self._walk_back(s, tag, found)
                        return tag
        if name in _PASS_ON:
            for t in tensors:
                tag = self._tags.get(_address(t))
                if tag and tag[:2] == shape:
                    return tag
        return None

    @staticmethod
    def _tag_of(mask, shape, removes: bool) -> tuple[int, int, float] | None:
        share = mask_share(mask, *shape, removes=removes)
        if share is None or share >= 1.0:  # unreadable, or nothing masked: counted in full
            return None
        return (*shape, share)

    def _new_buffer(self, where, name, index, tensors, shape) -> None:
        """Where a new buffer comes from: a matmul, or a few elementwise steps after one."""
        self._origin.pop(where, None)
        if name in _SCORE_MATMULS:
            self._origin[where] = (index, 0)
            return
        source = next((_address(t) for t in tensors if t.shape == shape), None)
        entry = self._origin.get(source)
        if entry is not None and entry[1] + 1 < _WALK_BACK:
            self._origin[where] = (entry[0], entry[1] + 1)

    def _walk_back(self, t, tag, found) -> None:
        """Mark the matmul that made `t`, through a few elementwise steps (scale, softcap,
        dropout)."""
        entry = self._origin.get(_address(t))
        if entry is not None and entry[0] not in self.marked:
            found.append((entry[0], tag[2]))
