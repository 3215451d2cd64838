"""The batch worth serving at a long context, from a decode ceiling:
`ceiling.decode("llama-3-8b", spec="h100-sxm").serving_batch(4096)`.

The most KV caches of `context` tokens that fit beside the weights, or the batch where
decoding turns compute-bound with those caches read, whichever comes first; with the
expected speed there (the same engine costs as the result's `expected` rows).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ServingBatch:
    """`batch`: the largest batch worth serving with `context` tokens a sequence (None: the
    device states no memory size and decoding never turns compute-bound; 0: not one
    sequence's cache fits); `max_batch`: the most caches that fit; `crossover_batch`: where
    decoding turns compute-bound with the caches read (None: never); `bound_by`: which of
    the two set `batch` ("memory capacity" or "compute"); the expected tokens/s there, in
    all and per sequence (None without a batch)."""

    context: int
    max_batch: int | None
    crossover_batch: int | None
    batch: int | None
    bound_by: str | None = None
    tokens_per_s: float | None = None
    tokens_per_s_per_sequence: float | None = None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def serving_batch(cfg, dev, setup, costs, context: int) -> ServingBatch:
    """The `ServingBatch` of the model `cfg` on the device `dev` decoding as `setup` says
    (dtypes, tensor parallelism) with engine `costs`, at `context` tokens a sequence (the
    caches hold `context - 1` when the next token is decoded)."""
    from ceiling.errors import CeilingError
    from ceiling.model.decode import decode_ceiling
    from ceiling.model.decode_expected import expected_rows

    long = dataclasses.replace(setup, context=context - 1, prompt_tokens=None)
    try:
        at = decode_ceiling(cfg, dev, [1], long)
    except CeilingError:  # not one sequence's cache fits, or the context is too long
        return ServingBatch(context, 0, None, 0)
    cap, cross = at.max_batch, at.crossover_batch_with_kv
    bounds = [b for b in (cap, cross) if b is not None]
    batch = min(bounds) if bounds else None
    if batch is None or batch < 1:
        return ServingBatch(context, cap, cross, batch)
    sms = getattr(dev, "sms", None)
    row = expected_rows(decode_ceiling(cfg, dev, [batch], long), cfg.layers, costs, cfg=cfg,
                        sms=sms)[0]  # fmt: skip
    bound = "compute" if cross is not None and cross == batch else "memory capacity"
    return ServingBatch(context, cap, cross, batch, bound, row.tokens_per_s,
                        row.tokens_per_s / batch)  # fmt: skip
