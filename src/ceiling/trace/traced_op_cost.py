"""What a traced op cost: the record both ways of costing a recorded call give (the
plain-Python rules of `trace.op_rules` and the replay on torch's meta device)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TracedOpCost:
    """What a traced op cost, replayed from its recorded shapes (a `model.opcost.OpCost` is
    a modelled op's FLOPs and bytes)."""

    flops: float | None  # None: the shapes were not recorded or the op could not be replayed
    flops_exact: bool
    category: str  # as profile.op_flops: matmul, attention, elementwise, ...
    recomputed_flops: float
    bytes: float | None
    dtype: str | None  # catalog dtype key of the first floating tensor input
