"""Time a model's forward at its batch and at half of it, turn about: the raw turns that
model.forward_host turns into the model's own host time per forward op."""

from __future__ import annotations

import time
from typing import Any

import torch
from torch.utils import _pytree as pytree

from ceiling.profile.runner import StepRunner, sync

MIN_TURNS = 3
MAX_TURNS = 15
BUDGET_S = 0.5  # seconds of turns, once MIN_TURNS are done


def half_batch(batch: Any, samples: int) -> tuple[Any, int] | None:
    """The batch with its first half of the samples, and how many that is: every tensor
    whose leading dimension is the samples cut to half of them, the rest kept. None when
    there is no half (one sample) or no tensor has the samples leading."""
    if samples < 2:
        return None
    half = samples // 2
    leaves, spec = pytree.tree_flatten(batch)
    cut = False
    halved = []
    for x in leaves:
        if isinstance(x, torch.Tensor) and x.dim() and x.shape[0] == samples:
            x, cut = x[:half], True
        halved.append(x)
    return (pytree.tree_unflatten(halved, spec), half) if cut else None


def time_forward_turns(
    runner: StepRunner, half: Any, budget_s: float = BUDGET_S, clock=None
) -> list[tuple[float, float]]:
    """Seconds of (the forward at the full batch, at the half one), turn after turn, the
    order swapped each turn; at least MIN_TURNS, then as many as `budget_s` holds. The
    half batch should have run once before (its shapes' buffers made)."""
    clock = clock or time.perf_counter

    def timed(batch) -> float:
        sync(runner.device)
        t0 = clock()
        runner.forward_only(batch)
        sync(runner.device)
        return clock() - t0

    turns: list[tuple[float, float]] = []
    spent = 0.0
    while len(turns) < MIN_TURNS or (len(turns) < MAX_TURNS and spent < budget_s):
        if len(turns) % 2 == 0:
            full_s = timed(None)
            half_s = timed(half)
        else:
            half_s = timed(half)
            full_s = timed(None)
        turns.append((full_s, half_s))
        spent += full_s + half_s
    return turns
