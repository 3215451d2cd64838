"""Uneven pipeline stages: the layout rules, the step of stages with different times against
the event simulator, the heaviest stage's memory, and interleaving beyond 8 chunks."""

import json

import pytest

from ceiling.errors import InvalidInput
from ceiling.hardware.catalog import get_spec
from ceiling.model.cluster import make_cluster
from ceiling.model.pipeline_sim import _order, simulate_pipeline
from ceiling.model.plan import pipeline as ps
from ceiling.model.plan.axes import parse_fixed, plans_to_arrays
from ceiling.model.plan.search import enumerate_plans, search
from ceiling.model.plan.step import Job, Plan, check_plan, evaluate_arrays, evaluate_plan
from ceiling.model.transformer import get_model

H100 = get_spec("h100-sxm")


def test_balanced_layout_counts_embedding_and_loss_as_a_layer_each():
    # Llama 3 405B: 126 layers on 16 stages ran as 7, 8 × 14, 7 (128 = 126 + 2 over 16).
    assert ps.balanced_layout(126, 16) == (7, 7)
    assert ps.balanced_layout(30, 4) == (7, 7)  # 32 / 4 = 8: 7, 8, 8, 7
    # Where that is the even split, there is nothing to balance.
    assert ps.balanced_layout(96, 8) == (0, 0)  # 98 / 8 → 13 - 1 = 12 = 96 / 8
    assert ps.balanced_layout(32, 1) == (0, 0)
    assert ps.balanced_layout(33, 2) == (17, 16)  # the last (loss) stage lighter


def test_stage_list_pins_p_first_and_last():
    assert parse_fixed("stages=31,32,32,31,d=2") == {
        "p": 4,
        "first": 31,
        "last": 31,
        "stage_total": 126,
        "d": 2,
    }
    assert parse_fixed("stages=balanced") == {"stages": "balanced"}
    assert parse_fixed("stages=even") == {"first": 0, "last": 0}
    with pytest.raises(InvalidInput, match="middle stages must hold the same"):
        parse_fixed("stages=31,30,33,32")
    with pytest.raises(InvalidInput, match="stages must be even, balanced"):
        parse_fixed("stages=lots")


def test_uneven_1f1b_bubble_agrees_with_the_simulator_hand_checked():
    # p = 4, m = 8; stages take 1, 1, 1 and 1.5 per micro-batch (forward 1/3, backward 2/3).
    # By hand: the last stage is busy 8 × 1.5 = 12; the others' times pass once, on the way
    # in and out: 1 + 1 + 1 = 3. Step 15, the last stage idle 3.
    pipeline, idle = ps.pipeline_time(1.0, 1.0, 1.5, 4, 1, 8)
    assert (float(pipeline), float(idle)) == (15.0, 3.0)
    times = [1.0, 1.0, 1.0, 1.5]
    sim = simulate_pipeline("1f1b", 4, 8, [x / 3 for x in times], [2 * x / 3 for x in times])
    assert sim.makespan_s == pytest.approx(15.0)
    # Interleaved, v = 2: the fill and drain halve: 12 + 3/2.
    sim2 = simulate_pipeline(
        "interleaved", 4, 8, [x / 3 for x in times], [2 * x / 3 for x in times], chunks=2
    )
    assert sim2.makespan_s == pytest.approx(float(ps.pipeline_time(1.0, 1.0, 1.5, 4, 2, 8)[0]))


@pytest.mark.parametrize("m", [8, 32])
def test_a_slower_middle_stage_sets_the_pace_within_the_fill(m):
    # 7, 8 × 6, 7: the formula is an upper bound, off by less than one stage time.
    times = [7.0] + [8.0] * 6 + [7.0]
    sim = simulate_pipeline("1f1b", 8, m, [x / 3 for x in times], [2 * x / 3 for x in times])
    model = float(ps.pipeline_time(7.0, 8.0, 7.0, 8, 1, m)[0])
    assert sim.makespan_s <= model <= sim.makespan_s + 8.0


def test_planned_uneven_step_matches_the_simulated_pipeline():
    job = Job(get_model("llama-3-405b"), 128, 4096, attention="flash", dropout=False)
    cluster = make_cluster(H100, 512)
    plan = Plan(4, 8, 16, 1, recompute="full", first_stage_layers=7, last_stage_layers=7)
    r = evaluate_plan(job, cluster, plan)
    arrays = evaluate_arrays(job, cluster, plans_to_arrays([plan]))
    m = r.micro_batches
    stage_parts = ("matmul", "attention", "elementwise", "tp_comm")
    last = sum(r.time[f"{k}_s"] for k in stage_parts) / m
    head = float(arrays["head_s"][0]) / m
    per_layer = (last - head) / 7
    assert r.stages["layers"] == [7, 8, 7]
    times = [7 * per_layer] + [8 * per_layer] * 14 + [last]
    sim = simulate_pipeline("1f1b", 16, m, [x / 3 for x in times], [2 * x / 3 for x in times])
    planned = last * m + r.time["bubble_s"]
    assert sim.makespan_s <= planned <= sim.makespan_s + max(times)


def test_the_heaviest_stage_sets_the_memory_peak():
    job = Job(get_model("llama-3-405b"), 128, 4096, attention="flash", dropout=False)
    cluster = make_cluster(H100, 512)
    even = evaluate_plan(job, cluster, Plan(4, 8, 16, 1, recompute="none"))
    uneven = evaluate_plan(
        job,
        cluster,
        Plan(4, 8, 16, 1, recompute="none", first_stage_layers=7, last_stage_layers=7),
    )
    # Even: ⌈126/16⌉ = 8 layers everywhere; the first stage holds p = 16 micro-batches.
    assert even.stages == {"layers": [8, 8, 8], "heaviest_memory": "first"}
    # 7 layers × 16 in flight < 8 layers × 15 on the second stage: a middle stage is the peak.
    assert uneven.stages["heaviest_memory"] == "middle"
    assert uneven.memory["layer_activation_bytes"] == pytest.approx(
        even.memory["layer_activation_bytes"] * 7 / 8
    )
    assert uneven.memory["activation_bytes"] == pytest.approx(
        even.memory["layer_activation_bytes"] * 15 / 16
    )


def test_layout_rules_show_the_arithmetic():
    job = Job(get_model("llama-3-405b"), 128, 4096, attention="unfused")
    c = make_cluster(H100, 512)
    with pytest.raises(InvalidInput, match="both the first and the last"):
        check_plan(job, c, Plan(4, 8, 16, first_stage_layers=7))
    with pytest.raises(InvalidInput, match=r"126\) - first\(60\) - last\(60\) = 6 < 14"):
        check_plan(job, c, Plan(4, 8, 16, first_stage_layers=60, last_stage_layers=60))
    with pytest.raises(InvalidInput, match=r"stages add up to 127 layers but the model has 126"):
        search(job, c, parse_fixed("stages=31,32,32,32,d=16,t=8"))
    with pytest.raises(InvalidInput, match=r"first=10\*\*30|more than the model's 126 layers"):
        search(job, c, {"first": 10**30, "last": 1})


def test_search_takes_the_balanced_layout_and_pins_it():
    job = Job(get_model("llama-3-405b"), 256, 4096, attention="flash", dropout=False)
    res = search(job, make_cluster(H100, 512), parse_fixed("d=4,t=8,p=16,stages=balanced"))
    assert {(r.plan.first_stage_layers, r.plan.last_stage_layers) for r in res.plans} == {(7, 7)}
    assert "first=7,last=7" in res.plans[0].plan.describe()


def test_interleaving_beyond_eight_chunks_is_searched():
    # NeMo ran GPT-3 175B with p = 8 and 12 virtual stages: 96 layers = 8 × 12.
    job = Job(get_model("gpt3-175b"), 256, 2048, attention="flash")
    fixed = parse_fixed("d=4,t=4,p=8,v=12,b=1,zero=1,recompute=none,sp=on")
    (best,) = search(job, make_cluster(H100, 128), fixed, top=1).plans
    assert best.plan.v == 12 and best.fits
    # The first stage holds p(1 + (p-1)/(p·v)) micro-batches of its 12 layers.
    held = float(ps.held_per_layer(8, 12, 64)[0])
    assert held == pytest.approx(8 * (1 + 7 / 96))


def test_plan_command_shows_the_layout_and_the_recompute(cli):
    stages = ",".join(["7"] + ["8"] * 14 + ["7"])
    args = ["plan", "llama-3-405b", "--spec", "h100-sxm", "--gpus", "512", "--global-batch",
            "128", "--seq", "4096", "--attention", "flash", "--no-dropout", "--fixed",
            f"d=4,t=8,stages={stages},recompute=layers:2", "--top", "1"]  # fmt: skip
    code, out, err = cli(*args, "--json")
    assert code == 0, err
    best = json.loads(out)["plans"][0]
    assert (best["p"], best["first_stage_layers"], best["last_stage_layers"]) == (16, 7, 7)
    assert best["recompute"] == "layers:2" and best["recompute_time_s"] > 0
    assert best["pipeline_stages"] == {"layers": [7, 8, 7], "heaviest_memory": "middle"}
    assert best["memory_breakdown_bytes"]["recompute_working_bytes"] > 0
    code, out, _ = cli(*args)
    assert code == 0
    assert "middle pipeline stage, 7,8…8,7 layers" in " ".join(out.split())
    assert "recompute=layers:2: rebuilding activations takes" in " ".join(out.split())
    code, _, err = cli(*args[:-4], "--fixed", "stages=7,8,9,7", "--top", "1")
    assert code == 2 and "middle stages must hold the same" in err


def test_recompute_layers_n_rebuilds_n_layers_on_every_stage_whatever_it_holds():
    job = Job(get_model("llama-3-405b"), 128, 4096, attention="flash", dropout=False)
    cluster = make_cluster(H100, 512)
    plan = Plan(4, 8, 16, 1, recompute="layers:2", first_stage_layers=7, last_stage_layers=7)
    r = evaluate_plan(job, cluster, plan)
    a = evaluate_arrays(job, cluster, plans_to_arrays([plan]))
    m = r.micro_batches
    last = sum(r.time[f"{k}_s"] for k in ("matmul", "attention", "elementwise", "tp_comm")) / m
    head, rebuild = float(a["head_s"][0]) / m, r.recompute_s / m
    plain = (last - head - rebuild) / 7  # a layer's forward and backward, not rebuilt
    # The middle stages hold 8 layers and rebuild 2 of them, as the 7-layer ends do.
    t_first, t_mid = 7 * plain + rebuild, 8 * plain + rebuild
    pipeline, _ = ps.pipeline_time(t_first, t_mid, last, 16, 1, m)
    assert r.time["bubble_s"] == pytest.approx(float(pipeline) - m * last)


def test_uneven_chunks_run_as_traced_by_hand_in_the_simulator():
    # p = 2, v = 2, m = 2; a layer's forward takes 1 and its backward 2. Device 0 holds 1 and
    # 2 layers in its chunks (the lighter first), device 1 holds 2 and 1 (the lighter last).
    # Traced by hand: device 1 runs F0c0 1-3, F1c0 3-5, F0c1 5-6, B0c1 6-8, F1c1 8-9,
    # B1c1 9-11, B0c0 12-16, B1c0 16-20; device 0 ends with B1c0 20-22.
    r = simulate_pipeline("interleaved", 2, 2, [[1, 2], [2, 1]], [[2, 4], [4, 2]], chunks=2)
    dev1 = [(x.kind, x.micro_batch, x.chunk, x.start_s, x.end_s) for x in r.passes if x.device]
    assert dev1 == [
        ("F", 0, 0, 1, 3), ("F", 1, 0, 3, 5), ("F", 0, 1, 5, 6), ("B", 0, 1, 6, 8),
        ("F", 1, 1, 8, 9), ("B", 1, 1, 9, 11), ("B", 0, 0, 12, 16), ("B", 1, 0, 16, 20),
    ]  # fmt: skip
    assert r.makespan_s == 22.0
    with pytest.raises(InvalidInput, match="one per chunk, got 3 for v = 2"):
        simulate_pipeline("interleaved", 2, 2, [[1, 2, 3], 1], 2.0, chunks=2)


@pytest.mark.parametrize("m", [4, 8])
def test_interleaved_uneven_chunks_step_agrees_with_the_simulator_hand_checked(m):
    # Llama 3's layout in small: p = 4, v = 2; chunks of 2 layers, the first device's first
    # chunk and the last device's last chunk a layer lighter, the output layer and loss (2
    # layers' worth) in that last chunk: layers [1, 2], [2, 2], [2, 2], [2, 1 + 2].
    # A layer's forward and backward take 3. By hand: the last device is the slowest, busy
    # m × 5 × 3; the fill and drain pass the first chunk of each other device once:
    # (1 + 2 + 2) × 3 = 15. Step 15·m + 15: 75 for m = 4, 135 for m = 8.
    chunks = [[1, 2], [2, 2], [2, 2], [2, 3]]
    sim = simulate_pipeline(
        "interleaved", 4, m, chunks, [[2 * x for x in c] for c in chunks], chunks=2
    )
    assert sim.makespan_s == 15 * m + 15
    firsts = [3.0 * c[0] for c in chunks]
    assert ps.step_closed_form([15.0, 12.0, 12.0, 15.0], m, 2, firsts) == 15 * m + 15
    pipeline, idle = ps.pipeline_time(9.0, 12.0, 15.0, 4, 2, m, (3.0, 6.0, 6.0))
    assert (float(pipeline), float(idle)) == (15 * m + 15, 15)
    # Taken as equal chunks, the first device's fill would be 9/2, not 3.
    assert float(ps.pipeline_time(9.0, 12.0, 15.0, 4, 2, m)[0]) == 15 * m + 16.5


def test_chunks_split_each_device_evenly_the_lighter_beside_embedding_and_loss():
    # Megatron-Core's account-for-embedding/loss split of 126 layers, p = 16, v = 4: 32
    # chunks of 2 except the very first and the very last, of 1.
    first, mid, last = (float(x) for x in ps.chunk_layers(7, 8, 7, 4))
    assert (first, mid, last) == (1.0, 2.0, 2.0)
    assert [float(x) for x in ps.chunk_layers(8, 8, 8, 4)] == [2.0, 2.0, 2.0]


def test_planned_interleaved_uneven_step_is_bounded_by_the_simulated_pipeline():
    # Llama 3 405B as it ran: 126 layers on 16 stages, 7, 8 × 14, 7, interleaved (v = 4).
    job = Job(get_model("llama-3-405b"), 2048, 8192, attention="flash", dropout=False)
    cluster = make_cluster(H100, 16384)
    plan = Plan(128, 8, 16, 1, v=4, zero=1, recompute="none", first_stage_layers=7,
                last_stage_layers=7)  # fmt: skip
    r = evaluate_plan(job, cluster, plan)
    arrays = evaluate_arrays(job, cluster, plans_to_arrays([plan]))
    m = r.micro_batches
    last = sum(r.time[f"{k}_s"] for k in ("matmul", "attention", "elementwise", "tp_comm")) / m
    head = float(arrays["head_s"][0]) / m
    per_layer = (last - head) / 7
    # Chunks in layers: [1, 2, 2, 2], [2, 2, 2, 2] × 14, [2, 2, 2, 1 + the head's share].
    chunks = [[per_layer * n for n in (1, 2, 2, 2)]]
    chunks += [[2 * per_layer] * 4] * 14 + [[2 * per_layer] * 3 + [per_layer + head]]
    sim = simulate_pipeline(
        "interleaved", 16, m, [[x / 3 for x in c] for c in chunks],
        [[2 * x / 3 for x in c] for c in chunks], chunks=4,
    )  # fmt: skip
    planned = last * m + r.time["bubble_s"]
    # The middle stages (8 layers) outpace the last (7 + the output layer): an upper bound,
    # within one chunk of the simulated step.
    assert sim.makespan_s <= planned <= sim.makespan_s + 2 * per_layer
    assert r.stages["layers"] == [7, 8, 7]


def test_search_interleaves_the_balanced_layout_with_lighter_end_chunks():
    job = Job(get_model("llama-3-405b"), 2048, 8192, attention="flash", dropout=False)
    cluster = make_cluster(H100, 16384)
    res = search(job, cluster, parse_fixed("d=128,t=8,p=16,stages=balanced,v=4"), top=1)
    best = res.plans[0].plan
    assert (best.v, best.first_stage_layers, best.last_stage_layers) == (4, 7, 7)
    pinned = search(
        job, cluster, parse_fixed("d=128,t=8,stages=7,8,8,8,8,8,8,8,8,8,8,8,8,8,8,7,v=2")
    )
    assert pinned.plans[0].plan.v == 2
    # Searched freely, the interleaved uneven layouts are among the candidates.
    cand = enumerate_plans(job, cluster, parse_fixed("d=128,t=8,p=16"))
    assert {(4, 7, 7), (2, 7, 7)} <= set(zip(cand["v"], cand["first"], cand["last"], strict=True))
    with pytest.raises(InvalidInput, match="leaves every chunk a layer"):
        search(job, cluster, parse_fixed("d=128,t=8,p=16,v=8"))


def _peak_layer_passes(p: int, m: int, v: int, device: int, chunks) -> int:
    """The most of its layers' activations a device holds, walking its passes in the
    interleaved schedule's order (`pipeline_sim`): a forward adds its chunk's layers, a
    backward frees them."""
    held = peak = 0
    for kind, _, chunk in _order("interleaved", device, p, m, v):
        held += chunks[chunk] if kind == "F" else -chunks[chunk]
        peak = max(peak, held)
    return peak


@pytest.mark.parametrize(
    ("p", "v", "m", "ends"),
    [(32, 3, 64, 2), (8, 4, 16, 11), (16, 4, 32, 7), (4, 2, 8, 3), (8, 12, 64, 12), (4, 3, 4, 2)],
)
def test_in_flight_layers_of_uneven_chunks_match_the_schedule(p, v, m, ends):
    # The first device's lighter chunk first, the last device's last (`chunk_layers`): for
    # 32 × 3 chunks over 94 layers with the embedding and the loss a chunk each, those chunks
    # hold no layer.
    light = ends // v
    other = (ends - light) / (v - 1)
    first, _, last = ps.held_per_layer(p, v, m, (ends, 0, ends))
    assert float(first) * ends == _peak_layer_passes(p, m, v, 0, [light] + [other] * (v - 1))
    assert float(last) * ends == _peak_layer_passes(p, m, v, p - 1, [other] * (v - 1) + [light])


def test_the_embedding_and_the_loss_may_fill_a_chunk_each_only_when_counted():
    job = Job(get_model("gpt3-175b"), 64, 2048, attention="flash")  # 96 layers
    cluster = make_cluster(H100, 32 * 2)
    plan = Plan(2, 1, 32, 1, v=3, first_stage_layers=2, last_stage_layers=2)
    with pytest.raises(InvalidInput, match=r"first\(2\) and last\(2\) must be ≥ v\(3\)"):
        check_plan(job, cluster, plan)
    ends = dict(first_stage_layers=2, last_stage_layers=2, ends_in_split=True)
    check_plan(job, cluster, Plan(2, 1, 32, 1, v=3, **ends))  # 96 chunks: 94 + 2
    with pytest.raises(InvalidInput, match=r"must be ≥ max\(v\(4\) - 1, 1\) with ends=on"):
        check_plan(job, cluster, Plan(2, 1, 32, 1, v=4, **ends))
    with pytest.raises(InvalidInput, match="ends=on counts the embedding and the loss"):
        check_plan(job, cluster, Plan(2, 1, 32, 1, v=3, ends_in_split=True))
    assert parse_fixed("ends=on,p=32") == {"ends": True, "p": 32}


def test_dualpipe_bubble_is_the_reports_formula_and_its_rules_hold():
    # DeepSeek-V3 technical report, Table 2: (PP/2 - 1)(F&B + B - 3W) with F&B = F + B. A
    # stage of 3 s a micro-batch (F 1, B 2 of which W 1): 7 × (3 + 2 - 3) = 14 s for p = 16,
    # against 1F1B's 15 × 3 = 45 s; rebuilding 0.6 s of it makes F and W 0.8: 7 × 2.8.
    assert float(ps.dualpipe_bubble(16, 3.0)) == pytest.approx(14.0)
    assert float(ps.dualpipe_bubble(16, 3.0, 0.6)) == pytest.approx(7 * (6.0 - 3.2))
    assert float(ps.dualpipe_bubble(2, 3.0)) == 0.0
    job = Job(get_model("gpt3-175b"), 64, 2048, attention="flash")
    cluster = make_cluster(H100, 64)
    for plan, why in [
        (Plan(8, 1, 8, 1, v=2, dualpipe=True), r"v\(2\) 1"),
        (Plan(16, 1, 4, 2, dualpipe=True), r"m\(2\) even and ≥ p"),
    ]:
        with pytest.raises(InvalidInput, match=why):
            check_plan(job, cluster, plan)
    dual = evaluate_plan(job, cluster, Plan(8, 1, 8, 1, dualpipe=True, recompute="full"))
    plain = evaluate_plan(job, cluster, Plan(8, 1, 8, 1, recompute="full"))
    # Two stages' layers on every device (the tied table once), p + 1 micro-batches of a
    # stage in flight.
    more = dual.memory["params_per_device"] - plain.memory["params_per_device"]
    assert more == pytest.approx(12 * get_model("gpt3-175b").params_layer)
    assert dual.memory["layer_activation_bytes"] == pytest.approx(
        plain.memory["layer_activation_bytes"] * 9 / 8
    )
    assert dual.time["bubble_s"] < plain.time["bubble_s"]
