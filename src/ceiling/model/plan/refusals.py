"""A refused layout's way out: the pins one axis away that give valid plans ("did you mean").

Each suggestion is an edit of the pins (`--fixed`), checked before it is offered: the pins it
leaves pass the same rules the search applies (`search.valid_pins`), so applying one plans, or
meets a different obstacle (memory), never the same refusal. A refusal carries them as
`suggestions` on the error and says them at the end of its message.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from ceiling.errors import CeilingError, argument

# At most this many suggestions said, and this many candidate edits checked.
SHOWN = 3
CHECKED = 80
# Axes whose pinned value a suggestion may move, and the stage layout.
MOVABLE = ("t", "p", "d", "v", "micro_batch", "cp", "ep", "etp", "shard")


@dataclass(frozen=True)
class Suggestion:
    """An edit of the pins: each key set to its value, or unpinned where the value is None."""

    edits: tuple[tuple[str, object], ...]

    def applied(self, fixed: dict) -> dict:
        out = dict(fixed)
        for key, value in self.edits:
            if value is None:
                out.pop(key, None)
            else:
                out[key] = value
        return out

    def text(self, layers: int, p: int | None) -> str:
        edits = dict(self.edits)
        if "first" in edits and p:
            first, last = edits.pop("first"), edits.pop("last")
            mid = (layers - first - last) // (p - 2) if p > 2 else 0
            edits.pop("stages", None)
            edits["stages"] = ",".join(map(str, [first, *[mid] * (p - 2), last]))
        return ",".join(
            f"{k}=" + ("on" if v is True else "off" if v is False else str(v))
            if v is not None
            else f"no {k} pin"
            for k, v in edits.items()
        )


def _divisors(n: int) -> list[int]:
    small = [k for k in range(1, math.isqrt(n) + 1) if n % k == 0]
    return sorted(set(small + [n // k for k in small]))


def _values(key: str, now, job, devices: int) -> list:
    """Other values of a pinned axis, the nearest first."""
    if key == "v":
        pool = range(1, 9)
    elif key == "micro_batch":
        pool = [b for b in _divisors(job.global_batch) if b <= 64]
    elif key == "ep":
        pool = _divisors(max(job.model.experts, 1))
    elif key in ("etp", "shard"):
        pool = [0, *_divisors(devices)]
    else:
        pool = _divisors(devices)
    others = [x for x in pool if x != now]
    return sorted(others, key=lambda x: (abs(math.log((x or 0.5) / (now or 0.5))), x))


def _stage_edits(layers: int, fixed: dict) -> list[tuple]:
    """Explicit uneven layouts F, M×(p-2), L for the pinned p: every split with equal middle
    stages, the most even first."""
    p, v = fixed.get("p"), fixed.get("v", 1)
    if not p or p < 3:
        return []
    out = []
    for mid in range(max(v, 1), layers // (p - 2) + 1):
        ends = layers - mid * (p - 2)
        for first in range(ends // 2, ends - 1 + 1):
            last = ends - first
            if min(first, last) >= 1:
                out.append((abs(first - mid) + abs(last - mid), first, last))
    out.sort()
    drop = (("stages", None),) if "stages" in fixed else ()
    return [(("first", f), ("last", la), *drop) for _, f, la in out[:12]]


def candidates(job, devices: int, fixed: dict) -> Iterator[Suggestion]:
    """Edits one axis away from the pins, in the order they are offered."""
    layers = job.model.layers
    yield from (Suggestion(e) for e in _stage_edits(layers, fixed))
    for key in MOVABLE:
        if key in fixed:
            for value in _values(key, fixed[key], job, devices)[:8]:
                yield Suggestion(((key, value),))
    for key in fixed:
        if key != "stage_total":
            yield Suggestion(((key, None),))


def memory_candidates(fixed: dict) -> Iterator[Suggestion]:
    """Edits that keep less in memory where the search cannot: 16 bytes of state a parameter
    (16-bit gradients, NeMo's and DeepSpeed's default) and, for pinned axes, full recompute,
    one sequence a micro-batch, sharded optimizer state."""
    if fixed.get("state_bytes", 18) > 16:
        yield Suggestion((("state_bytes", 16),))
    if "recompute" in fixed and fixed["recompute"] != "full":
        yield Suggestion((("recompute", "full"),))
    if fixed.get("micro_batch", 1) > 1:
        yield Suggestion((("micro_batch", 1),))
    if fixed.get("zero") == 0:
        yield Suggestion((("zero", 1),))


def suggest(
    job, devices: int, fixed: dict, valid: Callable[[dict], bool], offered=None
) -> list[Suggestion]:
    """Up to `SHOWN` edits of `fixed` (`offered`, default `candidates`) whose pins `valid`
    accepts, one per axis edited."""
    found, axes = [], set()
    offered = candidates(job, devices, fixed) if offered is None else offered
    for k, s in enumerate(offered):
        if k >= CHECKED or len(found) == SHOWN:
            break
        what = frozenset(key for key, _ in s.edits)
        if what in axes:
            continue
        if valid(s.applied(fixed)):
            found.append(s)
            axes.add(what)
    return found


@contextmanager
def suggesting(job, devices: int, fixed: dict, valid: Callable[[dict], bool], kind=CeilingError):
    """Re-raise a refusal (`kind`) of `fixed` with the pins one axis away that are valid, said
    at the end of its message and kept as the error's `suggestions`. A refusal for memory is
    offered `memory_candidates`, checked by planning them."""
    from ceiling.errors import DoesNotFit

    try:
        yield
    except kind as err:
        if getattr(err, "suggestions", None) is not None:
            raise
        memory = isinstance(err, DoesNotFit)
        if not fixed and not memory:
            raise
        offered = memory_candidates(fixed) if memory else None
        found = suggest(job, devices, fixed, valid, offered)
        raise restated(err, found, job.model.layers, fixed.get("p")) from None


def restated(err: CeilingError, found, layers: int, p: int | None) -> CeilingError:
    """The refusal `err` (its own words, without suggestions said before) with `found` said
    at its end and kept as its `suggestions`."""
    from ceiling.errors import DoesNotFit

    message = getattr(err, "refusal", None) or (str(err.args[0]) if err.args else "")
    said = message
    if found:
        lead = "it fits with" if isinstance(err, DoesNotFit) else "did you mean"
        said += f"; {lead} {argument('fixed')} " + " or ".join(s.text(layers, p) for s in found)
    again = type(err)(said)
    again.refusal = message
    again.suggestions = tuple(found)
    return again


def without_unpinning(err: CeilingError, keys, layers: int, p: int | None) -> CeilingError:
    """`err` less the suggestions that unpin one of `keys`: pins the planner sets itself (a
    framework's recipe, the model's config) come back when the user's pins leave them out."""
    kept = [s for s in err.suggestions if not any(v is None and k in keys for k, v in s.edits)]
    return err if len(kept) == len(err.suggestions) else restated(err, kept, layers, p)
