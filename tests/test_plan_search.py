import dataclasses
import itertools
import re

import pytest

from ceiling.errors import DoesNotFit, InvalidInput
from ceiling.hardware.catalog import get_spec
from ceiling.model.cluster import make_cluster
from ceiling.model.plan.search import enumerate_plans, parse_fixed, scaling, search
from ceiling.model.plan.step import Job, Plan, evaluate_plan
from ceiling.model.transformer import get_model

A100 = get_spec("a100-80gb")


@pytest.fixture(scope="module")
def gpt3_search():
    job = Job(get_model("gpt3-175b"), 1536, 2048, attention="unfused")
    return job, make_cluster(A100, 1024), search(job, make_cluster(A100, 1024), top=5)


def test_gpt3_on_1024_a100_ranks_plans_that_fit_with_tp_inside_a_node(gpt3_search):
    _, cluster, res = gpt3_search
    assert res.evaluated > 1000 and 0 < res.fitting < res.evaluated
    best = res.plans[0]
    assert best.plan.t <= cluster.devices_per_node
    assert best.plan.devices == 1024
    steps = [r.step_time_s for r in res.plans]
    assert steps == sorted(steps)
    assert all(r.fits and r.memory_bytes_per_device <= r.usable_bytes_per_device for r in res.plans)
    # A well-split 175B model on A100s runs at roughly Megatron's published 40-55 % MFU.
    assert 0.35 < best.mfu < 0.60
    assert res.why[0] == "" and all(w.startswith("+") for w in res.why[1:])
    layouts = {(r.plan.d, r.plan.t, r.plan.p) for r in res.plans}
    assert len(layouts) == len(res.plans)


def test_search_results_match_single_plan_evaluation(gpt3_search):
    job, cluster, res = gpt3_search
    for r in res.plans:
        one = evaluate_plan(job, cluster, r.plan)
        assert one.step_time_s == pytest.approx(r.step_time_s)
        assert one.memory_bytes_per_device == pytest.approx(r.memory_bytes_per_device)


def test_every_enumerated_plan_is_valid():
    job = Job(get_model("llama-2-70b"), 512, 4096, attention="unfused")
    cluster = make_cluster(get_spec("h100-sxm"), 128)
    cand = enumerate_plans(job, cluster)
    from ceiling.model.plan.axes import plan_at
    from ceiling.model.plan.step import check_plan

    n = len(cand["d"])
    assert n > 100
    for i in range(0, n, max(1, n // 200)):
        check_plan(
            job,
            cluster,
            plan_at(cand, i),
        )


def test_tensor_parallel_across_nodes_loses_and_says_why():
    job = Job(get_model("gpt3-175b"), 1536, 2048, attention="unfused")
    res = search(job, make_cluster(A100, 1024), {"t": 16}, top=1)
    free = search(job, make_cluster(A100, 1024), top=1)
    assert res.plans[0].step_time_s > free.plans[0].step_time_s
    assert any("spans nodes" in n for n in res.plans[0].notes)
    from ceiling.model.plan.why_slower import explain_loss

    why = explain_loss(res.plans[0], free.plans[0])
    assert "TP across nodes" in why and "communication" in why


def test_fixed_pins_fields_and_searches_the_rest():
    job = Job(get_model("gpt3-175b"), 1536, 2048, attention="unfused")
    c = make_cluster(A100, 1024)
    res = search(job, c, parse_fixed("d=16,t=8,p=8,recompute=full"), top=3)
    for r in res.plans:
        assert (r.plan.d, r.plan.t, r.plan.p, r.plan.recompute) == (16, 8, 8, "full")
    whole = parse_fixed("d=16,t=8,p=8,b=2,v=3,zero=1,recompute=selective,sp=on")
    (one,) = search(job, c, whole, top=3).plans
    # The free feature the layout can run is searched: TP overlap switched on.
    want = Plan(16, 8, 8, 2, 3, zero=1, recompute="selective", sequence_parallel=True)
    assert one.plan == dataclasses.replace(want, tp_overlap=True)
    pinned = search(job, c, {**whole, "tp_overlap": False}, top=3).plans[0]
    assert pinned.plan == want and pinned.features == {}


def test_parse_fixed():
    assert parse_fixed("d=2, t=4,p=1,b=8,v=1,zero=fsdp,recompute=full,sp=off,state=16") == {
        "d": 2,
        "t": 4,
        "p": 1,
        "micro_batch": 8,
        "v": 1,
        "zero": 3,
        "recompute": "full",
        "sp": False,
        "state_bytes": 16,
    }
    for bad, msg in [
        ("d", "KEY=VALUE"),
        ("x=1", "unknown key"),
        ("t=2.5", "whole number"),
        ("recompute=some", "recompute must be"),
        ("zero=5", "zero must be"),
        ("sp=maybe", "sp must be"),
        ("state=17", r"14 \(2\+4\+8.*16 \(2\+2\+12.*or 18 \(2\+4\+12"),
    ]:
        with pytest.raises(InvalidInput, match=msg):
            parse_fixed(bad)


def test_nothing_fits_is_explained():
    job = Job(get_model("gpt3-175b"), 64, 2048, attention="unfused")
    with pytest.raises(DoesNotFit, match=r"no plan fits: .* needs [\d.]+ GiB per device"):
        search(job, make_cluster(A100, 8))


def test_a_plan_that_fits_only_in_the_headroom_says_how_much_headroom_it_leaves():
    job = Job(get_model("gpt3-175b"), 64, 2048, attention="unfused")
    c = make_cluster(A100, 8)
    with pytest.raises(DoesNotFit) as far:  # far over the whole device: no such hint
        search(job, c)
    assert "fits with" not in str(far.value)
    small = Job(get_model("llama-2-7b"), 64, 2048, attention="flash")
    fixed = dict(d=8, t=1, p=1, micro_batch=1, recompute="full", zero=1)
    plan = search(dataclasses.replace(small, headroom=0.0), c, fixed).plans[0]
    free = 1 - plan.memory_bytes_per_device / c.memory_bytes
    assert 0.01 < free < 0.9
    # asked to keep more free than the plan leaves: refused, with the most it does leave
    with pytest.raises(DoesNotFit, match=rf"fits with headroom {int(free * 100) / 100:g} "):
        search(dataclasses.replace(small, headroom=free + 0.01), c, fixed)


def test_impossible_pins_are_explained():
    job = Job(get_model("gpt3-175b"), 1536, 2048, attention="unfused")
    c = make_cluster(A100, 1024)
    with pytest.raises(InvalidInput, match=r"heads\(96\) % t\(7\) = 5"):
        search(job, c, {"t": 7})
    with pytest.raises(InvalidInput, match=r"= 512 devices but the cluster has 1024"):
        search(job, c, {"d": 8, "t": 8, "p": 8})
    with pytest.raises(InvalidInput, match="no valid plan"):
        search(job, c, {"micro_batch": 7})


def test_scaling_speeds_up_then_flattens_with_a_fixed_batch():
    job = Job(get_model("gpt3-175b"), 1536, 2048, attention="unfused")
    rows = scaling(job, lambda n: make_cluster(A100, n), [512, 1024, 2048, 4096, 8192])
    speed = [r.speedup for r in rows]
    assert speed[0] == 1.0
    assert all(b > a for a, b in itertools.pairwise(speed))
    eff = [r.efficiency for r in rows]
    assert eff[-1] < eff[1] <= 1.0 + 1e-9
    # Karp–Flatt against the first row: e = (1/S - 1/n) / (1 - 1/n), n = N / 512.
    r = rows[2]
    assert r.serial_fraction == pytest.approx((1 / r.speedup - 1 / 4) / (1 - 1 / 4))
    assert rows[0].serial_fraction is None


def test_divisors():
    from ceiling.model.plan.search import _divisors

    assert _divisors(1) == [1]
    assert _divisors(36) == [1, 2, 3, 4, 6, 9, 12, 18, 36]
    assert _divisors(3072)[-3:] == [1024, 1536, 3072]


def test_no_valid_plan_names_the_failing_constraint():
    job = Job(get_model("gpt3-175b"), 1536, 2048, attention="unfused")
    # 1000 = 2³·5³: d = 1000/(t·p) always keeps a factor 5, which 1536 = 2⁹·3 lacks.
    with pytest.raises(InvalidInput, match=r"none divides the global batch of 1536"):
        search(job, make_cluster(A100, 1000))
    with pytest.raises(InvalidInput, match=r"layers\(96\) % \(p\(16\) × v\(5\) = 80\) = 16"):
        search(job, make_cluster(A100, 1024), {"d": 8, "t": 8, "p": 16, "v": 5})


def test_a_ring_across_nodes_does_not_make_node_local_tensor_parallelism_read_as_spanning():
    from ceiling.model.plan.why_slower import explain_loss

    job = Job(get_model("llama-3-70b"), 64, 8192, attention="flash", dropout=False)
    c = make_cluster(get_spec("h100-sxm"), 64)
    worse = evaluate_plan(job, c, Plan(1, 4, 4, 1, v=5, zero=1, recompute="none", cp=4))
    best = evaluate_plan(job, c, Plan(4, 1, 4, 1, v=5, zero=1, recompute="none", cp=4))
    assert any("ring (t=4 × cp=4) spans nodes" in n for n in worse.notes)
    why = explain_loss(worse, best)
    assert "TP t=4" in why and "across nodes" not in why


@pytest.mark.parametrize(
    ("model", "devices", "fixed", "words"),
    [
        ("llama-3-8b", 8, dict(ep=8), "is dense (no experts)"),
        ("mixtral-8x7b", 8, dict(ep=3), "ep must divide the routed experts (8)"),
        ("mixtral-8x7b", 8, dict(dualpipe=True, p=1), "an even p ≥ 2 and v = 1"),
        ("llama-3-8b", 8, dict(ends=True, p=1), "it needs p ≥ 2"),
        ("mixtral-8x7b", 8, dict(ep=8, etp=4), "ep·etp divides no stage's ranks"),
        ("llama-3-8b", 8, dict(zero=3, shard=3), "shard=3 must divide d·cp"),
    ],
)
def test_a_pinned_option_no_layout_can_keep_is_named(model, devices, fixed, words):
    job = Job(get_model(model), 64, 2048, attention="flash")
    with pytest.raises(InvalidInput, match=re.escape(words)):
        search(job, make_cluster(A100, devices), fixed)


def test_flash_attention_3_is_refused_off_hopper():
    from ceiling.errors import UnsupportedOnDevice

    job = Job(get_model("llama-3-8b"), 64, 2048, attention="flash", attention_kernel="fa3")
    with pytest.raises(UnsupportedOnDevice, match=r"Hopper GPUs .* is 8\.0; use fa2, cudnn"):
        search(job, make_cluster(A100, 8))
    assert search(job, make_cluster(get_spec("h100-sxm"), 8)).plans  # where it runs


def test_fixed_takes_the_names_megatron_and_torchtitan_users_type():
    long = parse_fixed("tp=8,pp=4,dp=2,cp=2,ep=4,vpp=3")
    assert long == parse_fixed("t=8,p=4,d=2,cp=2,ep=4,v=3")
    assert long == {"t": 8, "p": 4, "d": 2, "cp": 2, "ep": 4, "v": 3}
    assert parse_fixed("tp_overlap=on") == {"tp_overlap": True}  # its own key, not tp
    with pytest.raises(InvalidInput, match="t is given twice"):
        parse_fixed("t=2,tp=4")


def test_the_plan_command_takes_tp_pp_dp(cli):
    code, out, err = cli("plan", "llama-3-8b", "--spec", "h100-sxm", "--gpus", "16",
                         "--fixed", "tp=4,pp=2,dp=2", "--json")  # fmt: skip
    assert code == 0, err
    import json

    best = json.loads(out)["plans"][0]
    assert (best["t"], best["p"], best["d"]) == (4, 2, 2)
