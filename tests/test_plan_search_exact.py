"""The search evaluates its plans as grids (`model.plan.grid`); these check that it finds
what evaluating every enumerated plan one after another finds: the same plans in the same
order (the first of equal step times first), the same figures and counts, on dense and
mixture-of-experts models, pinned axes, FP8 and HSDP, and the same plan when none fits."""

from __future__ import annotations

import numpy as np
import pytest

from ceiling.errors import DoesNotFit
from ceiling.hardware.catalog import get_spec
from ceiling.model.cluster import make_cluster
from ceiling.model.plan import grid
from ceiling.model.plan.axes import plan_at
from ceiling.model.plan.search import enumerate_plans, plan_blocks, search
from ceiling.model.plan.step import Job, evaluate_arrays
from ceiling.model.transformer import get_model, parse_model

H100 = get_spec("h100-sxm")
QWEN3_30B = parse_model(
    "custom:layers=48,hidden=2048,heads=32,kv_heads=4,head_dim=128,ffn_hidden=768,"
    "ffn_kind=swiglu,vocab=151936,experts=128,active_experts=8,trained_dropout=false"
)


def exhaustive(job, cluster, fixed, top):
    """The reference: every enumerated plan evaluated in one flat pass, ranked by a stable
    sort of step time, the first plan of each (d, t, p, cp) layout kept."""
    cand = enumerate_plans(job, cluster, fixed)
    r = evaluate_arrays(job, cluster, cand)
    fits, step = np.asarray(r["fits"]), np.asarray(r["step_s"])
    order = np.flatnonzero(fits)[np.argsort(step[fits], kind="stable")]
    plans, seen = [], set()
    for i in order:
        layout = tuple(int(cand[k][i]) for k in ("d", "t", "p", "cp"))
        if layout not in seen:
            seen.add(layout)
            plans.append((plan_at(cand, i), float(step[i]), float(r["memory_bytes"][i])))
        if len(plans) == top:
            break
    return plans, len(cand["d"]), int(fits.sum())


CASES = {
    # Dense, unfused attention (selective recompute searched), sp on and off, 8 devices:
    # layouts with d = 1, where ZeRO stages tie exactly.
    "dense-8": (Job(get_model("llama-2-7b"), 64, 4096, attention="unfused"), 8, None),
    "dense-64-fp8": (
        Job(get_model("llama-2-13b"), 256, 4096),
        64,
        {"fp8": "linear", "tp_overlap": True},
    ),
    "dense-hsdp": (Job(get_model("llama-2-7b"), 128, 4096), 32, {"shard": 8, "p": 1}),
    # Mixture of experts: ep and etp searched (MoE parallel folding), DeepEP dispatch.
    "moe-16": (Job(QWEN3_30B, 64, 4096, dropout=False, moe_dispatcher="deepep"), 16, None),
    "moe-32-pinned": (Job(QWEN3_30B, 64, 4096, dropout=False), 32, {"t": 2, "zero": 1}),
}


@pytest.mark.parametrize("name", list(CASES))
def test_search_ranks_as_evaluating_every_plan_does(name):
    job, gpus, fixed = CASES[name]
    cluster = make_cluster(H100, gpus)
    found = search(job, cluster, fixed, top=6)
    want, evaluated, fitting = exhaustive(job, cluster, fixed, 6)
    assert [x.plan for x in found.plans] == [p for p, _, _ in want]
    assert [x.step_time_s for x in found.plans] == [s for _, s, _ in want]
    assert [x.memory_bytes_per_device for x in found.plans] == [m for _, _, m in want]
    assert (found.evaluated, found.fitting) == (evaluated, fitting)


@pytest.mark.parametrize("name", ["dense-8", "moe-16"])
def test_every_block_of_the_grid_equals_its_plans_evaluated_one_pass(name):
    # Stronger than the top plans: each block's plan count, fitting count, fastest fitting
    # plan and smallest plan, against a flat evaluation of the enumerated plans.
    job, gpus, fixed = CASES[name]
    cluster = make_cluster(H100, gpus)
    blocks = plan_blocks(job, cluster, fixed)
    got = grid.summarise(job, cluster, blocks)
    cand = enumerate_plans(job, cluster, fixed)
    r = evaluate_arrays(job, cluster, cand)
    fits, step, memory = (np.asarray(r[k]) for k in ("fits", "step_s", "memory_bytes"))
    start = 0
    for k, block in enumerate(blocks):
        size = int(np.prod([len(v) for v in block]))
        part = slice(start, start + size)
        start += size
        assert got.plans[k] == size and got.fitting[k] == fits[part].sum()
        timed = np.where(fits[part], step[part], np.inf)
        assert got.best_step_s[k] == timed.min()
        if fits[part].any():
            assert got.best_cell[k] == np.argmin(timed)
        assert got.least_memory[k] == memory[part].min()
        assert got.least_memory_cell[k] == np.argmin(memory[part])
        cell = grid.cell_values(block, got.least_memory_cell[k])
        assert cell == [int(cand[a][start - size + got.least_memory_cell[k]]) for a in cand]
    assert start == len(cand["d"])


def test_when_nothing_fits_the_smallest_plan_is_named_as_before():
    job = Job(get_model("llama-2-13b"), 64, 4096, headroom=0.95)
    cluster = make_cluster(H100, 8)
    cand = enumerate_plans(job, cluster)
    r = evaluate_arrays(job, cluster, cand)
    i = int(np.argmin(r["memory_bytes"]))
    need = float(r["memory_bytes"][i]) / 2**30
    smallest = plan_at(cand, i).describe()
    with pytest.raises(DoesNotFit) as err:
        search(job, cluster)
    assert f"the smallest of {len(cand['d'])} valid plans ({smallest}) needs {need:.1f} GiB" in str(
        err.value
    )


def test_groups_cover_every_block_once_and_bound_a_pass():
    lengths = np.array([[19, 9, 3, 7], [19, 9, 3, 7], [1, 1, 4, 8], [12, 3, 3, 9], [2, 9, 3, 7]])
    groups = grid._groups(lengths)
    rows = np.sort(np.concatenate(groups))
    assert rows.tolist() == list(range(len(lengths)))
    for g in groups:
        per_block = int(lengths[g].max(axis=0).prod())
        assert len(g) == 1 or len(g) * per_block <= grid.MAX_CELLS
