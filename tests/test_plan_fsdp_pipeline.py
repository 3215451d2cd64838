"""FSDP inside pipeline stages as torchtitan runs it (`memory.held_stage_bytes`): the stage's
weights and gradients held unsharded through the step, gathered and reduce-scattered once;
FP8 weights cast from the shard, not kept whole."""

from __future__ import annotations

import pytest

from ceiling.hardware.catalog import get_spec
from ceiling.model.cluster import make_cluster
from ceiling.model.collectives import ring_gather_s
from ceiling.model.plan.axes import Plan
from ceiling.model.plan.communication import OVERLAP_COST, link
from ceiling.model.plan.step import Job, evaluate_plan
from ceiling.model.transformer import get_model

H100 = get_spec("h100-sxm")


def _job(batch=64):
    return Job(get_model("llama-3-8b"), batch, 4096, attention="flash", dropout=False)


def test_the_stage_holds_its_weights_and_fp32_gradients_unsharded():
    c = make_cluster(H100, 16)
    plan = Plan(8, 1, 2, micro_batch=1, zero=3, recompute="full")
    r = evaluate_plan(_job(), c, plan)
    stage = r.memory["params_per_device"]  # the heaviest stage's weights, unsharded
    assert r.memory["gathered_weight_bytes"] == pytest.approx(stage * (2 + 4))
    # 16-bit gradients (state_bytes=16) accumulate in 16 bits.
    half = evaluate_plan(
        _job(), c, Plan(8, 1, 2, zero=3, recompute="full", state_bytes_per_param=16)
    )
    assert half.memory["gathered_weight_bytes"] == pytest.approx(stage * (2 + 2))
    # Without a pipeline FSDP holds two gathered blocks (or a block and the output layer).
    flat = evaluate_plan(_job(), make_cluster(H100, 8), Plan(8, 1, 1, zero=3, recompute="full"))
    assert flat.memory["gathered_weight_bytes"] < r.memory["gathered_weight_bytes"] / 10


def test_fsdp_with_a_pipeline_gathers_and_reduces_once_a_step():
    c = make_cluster(H100, 16)
    job = _job()
    r = evaluate_plan(job, c, Plan(8, 1, 2, micro_batch=1, zero=3, recompute="full"))
    grads = r.memory["params_per_device"]  # d = 8 ranks in one node: NVLink
    bw, lat = link(c, False)
    # Each collective also runs, empty, over the expert group (a dense model: no bytes).
    empty = ring_gather_s(0.0, 8, bw, lat)
    gather = ring_gather_s(grads * 2.0, 8, bw, lat) + empty
    scatter = ring_gather_s(grads * 4.0, 8, bw, lat) + empty
    assert r.dp_comm_s == pytest.approx(gather + scatter)
    # The gather hides behind the first micro-batch (at its overlap cost), the reduce-scatter
    # after the last backward does not.
    hidden = r.hidden["dp"]
    assert 0 < hidden <= gather
    assert r.time["dp_exposed_s"] == pytest.approx(gather - (1 - OVERLAP_COST) * hidden + scatter)


def test_fsdp_casts_its_shard_to_fp8_not_a_whole_copy():
    c = make_cluster(H100, 8)
    fp8 = dict(fp8="linear", recompute="full")
    ddp = evaluate_plan(_job(), c, Plan(8, 1, 1, zero=1, **fp8))
    fsdp = evaluate_plan(_job(), c, Plan(8, 1, 1, zero=3, **fp8))
    # ZeRO-1 keeps every linear weight's FP8 cast and transpose (2 bytes); FSDP its shard's.
    assert fsdp.memory["fp8_weight_bytes"] == pytest.approx(ddp.memory["fp8_weight_bytes"] / 8)
