"""The search's plans evaluated as grids, each cost term over only the axes it reads.

`search.plan_blocks` lists the valid plans as blocks: one layout (d, t, p, cp, v, stage
layers, etp) and, for each axis it varies (micro-batch, ep, ZeRO, recompute, sp), the
values that pass the rules. A block's plans are the product of its lists. Here the blocks
are laid one per row of a grid whose other dimensions are those axes, each entry a position
in the block's own list (so one grid holds blocks whose lists differ, the values per row).
`step.evaluate_arrays` takes such arrays as they are: numpy broadcasting computes each term
over the dimensions of the axes it reads only, and the whole grid only where terms meet —
the same operations on the same numbers as one plan at a time, not a model of them.

Blocks whose lists are shorter than the grid's leave cells that are no plan (masked out);
grouping blocks of like lengths (`_groups`) trades those empty cells against one more pass.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from ceiling.model.plan import step as parallel
from ceiling.model.plan.axes import AXES

# One more `evaluate_arrays` pass costs about as much as this many more grid cells: its fixed
# work, a few hundred numpy calls (~20 ms for a pass of 50 plans on a loaded 2-core machine),
# against ~1 µs a cell there. Speed only: every grouping gives the same figures.
PASS_COST_CELLS = 20_000
# Cells of one pass at most: bounds the memory of a pass (a few dozen float arrays of this
# size) and keeps its arrays near the caches. Speed only, as above.
MAX_CELLS = 1 << 17
# Passes run side by side on this many threads (numpy's array arithmetic lets go of the
# interpreter lock); each pass is independent and gives the same figures on any thread.
WORKERS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@dataclass(frozen=True)
class BlockSummary:
    """Per block (in the order given): what the search ranks by, over the block's plans.

    A plan of a block is named by its cell: its position in the product of the block's lists
    in C order, which is the enumeration order within the block."""

    plans: np.ndarray  # valid plans in the block
    fitting: np.ndarray  # of them, those that fit in memory
    best_step_s: np.ndarray  # the fastest fitting plan's step time (inf: none fits)
    best_cell: np.ndarray  # its cell (the first of equals)
    least_memory: np.ndarray  # the smallest memory per device of any plan
    least_memory_cell: np.ndarray


def summarise(job, cluster, blocks: Sequence[Sequence[Sequence]]) -> BlockSummary:
    """Evaluate every plan of the blocks (at least one; each a list of value lists in `AXES`
    order, as `search.plan_blocks` gives them) and summarise each block."""
    lengths = np.array([[len(values) for values in block] for block in blocks], dtype=np.int64)
    varied = [k for k in range(len(AXES)) if (lengths[:, k] > 1).any()]
    groups = _groups(lengths[:, varied])

    def one(rows):
        return rows, _summarise_group(job, cluster, [blocks[i] for i in rows], varied)

    workers = min(len(groups), WORKERS)
    if workers > 1:
        with ThreadPoolExecutor(workers) as pool:
            parts = list(pool.map(one, groups))
    else:
        parts = [one(rows) for rows in groups]
    out = {}
    for name in BlockSummary.__dataclass_fields__:
        merged = np.empty(len(blocks), dtype=getattr(parts[0][1], name).dtype)
        for rows, part in parts:
            merged[rows] = getattr(part, name)
        out[name] = merged
    return BlockSummary(**out)


def cell_values(block: Sequence[Sequence], cell: int) -> list:
    """The axis values (encoded, `AXES` order) of a block's plan at `cell`."""
    index = np.unravel_index(int(cell), [len(values) for values in block])
    return [values[int(i)] for values, i in zip(block, index, strict=True)]


def _summarise_group(job, cluster, blocks, varied: list[int]) -> BlockSummary:
    n = len(blocks)
    lengths = np.array([[len(block[k]) for k in varied] for block in blocks], dtype=np.int64)
    dims = tuple(int(x) for x in lengths.max(axis=0)) if varied else ()
    # The blocks along the last dimension: numpy's inner loops then run over all of them at
    # once (terms that vary by block only are the most), not over one short list.
    shape = (*dims, n)
    plans = {}
    at = dict(zip(varied, range(len(varied)), strict=True))
    for k, a in enumerate(AXES):
        if k not in at:
            plans[a.key] = np.array([block[k][0] for block in blocks]).reshape(_along(dims, n))
            continue
        j = at[k]
        # Past a block's own list, its last value again: a real plan, masked out below.
        padded = [list(block[k]) + [block[k][-1]] * (dims[j] - len(block[k])) for block in blocks]
        plans[a.key] = np.array(padded).T.copy().reshape(_along(dims, n, j))
    valid = np.ones(_along(dims, n), dtype=bool)
    for j, size in enumerate(dims):
        inside = np.arange(size)[:, None] < lengths[:, j]
        valid = valid & inside.reshape(_along(dims, n, j))
    valid = np.broadcast_to(valid, shape).reshape(-1, n)
    r = parallel.evaluate_arrays(job, cluster, plans)
    step = np.broadcast_to(r["step_s"], shape).reshape(-1, n)
    fits = np.broadcast_to(r["fits"], shape).reshape(-1, n) & valid
    memory = np.broadcast_to(r["memory_bytes"], shape).reshape(-1, n)
    timed = np.where(fits, step, np.inf)
    best = np.argmin(timed, axis=0)
    smallest = np.argmin(np.where(valid, memory, np.inf), axis=0)
    cols = np.arange(n)
    return BlockSummary(
        plans=lengths.prod(axis=1),
        fitting=fits.sum(axis=0),
        best_step_s=timed[best, cols],
        best_cell=_own_cell(best, dims, lengths),
        least_memory=memory[smallest, cols],
        least_memory_cell=_own_cell(smallest, dims, lengths),
    )


def _along(dims: tuple[int, ...], n: int, j: int | None = None) -> tuple[int, ...]:
    """The shape of per-block values in a grid of `dims` and n blocks (last): (1, ..., 1, n),
    with the j-th dimension's size where they are one list per block."""
    shape = [1] * len(dims) + [n]
    if j is not None:
        shape[j] = dims[j]
    return tuple(shape)


def _own_cell(cells: np.ndarray, dims: tuple[int, ...], lengths: np.ndarray) -> np.ndarray:
    """A cell of the padded grid (C order over `dims`) as the block's own cell (C order over
    its own list lengths): the same plan, the same order among a block's plans."""
    if not dims:
        return np.zeros(len(cells), dtype=np.int64)
    index = np.unravel_index(cells, dims)
    own = np.zeros(len(cells), dtype=np.int64)
    for j, i in enumerate(index):
        own = own * lengths[:, j] + i
    return own


def _groups(lengths: np.ndarray) -> list[np.ndarray]:
    """Blocks (rows of their list lengths) grouped into grids: blocks of equal lengths
    together, then the two groups whose merging adds the fewest empty cells merged while that
    costs less than a pass (PASS_COST_CELLS), no grid above MAX_CELLS."""
    if lengths.shape[1] == 0:
        return [np.arange(len(lengths))]
    kinds, which = np.unique(lengths, axis=0, return_inverse=True)
    members = [list(np.flatnonzero(which.ravel() == g)) for g in range(len(kinds))]
    tops = kinds.astype(np.int64)
    counts = np.array([len(m) for m in members], dtype=np.int64)
    while len(members) > 1:
        cells = counts * tops.prod(axis=1)
        merged_tops = np.maximum(tops[:, None, :], tops[None, :, :])
        merged = (counts[:, None] + counts[None, :]) * merged_tops.prod(axis=2)
        added = merged - cells[:, None] - cells[None, :]
        added = np.where(merged <= MAX_CELLS, added, np.iinfo(np.int64).max)
        np.fill_diagonal(added, np.iinfo(np.int64).max)
        i, j = np.unravel_index(np.argmin(added), added.shape)
        if added[i, j] >= PASS_COST_CELLS:
            break
        i, j = min(i, j), max(i, j)
        members[i] += members.pop(j)
        tops[i] = merged_tops[i, j]
        tops = np.delete(tops, j, axis=0)
        counts[i] += counts[j]
        counts = np.delete(counts, j)
    out = []
    for m in members:
        rows = np.sort(np.asarray(m, dtype=np.int64))
        size = int(lengths[rows].max(axis=0).prod())
        # A group too big for one pass runs as several, whole blocks each.
        per = max(1, MAX_CELLS // max(size, 1))
        out.extend(rows[k : k + per] for k in range(0, len(rows), per))
    return out
