import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ceiling.errors import InvalidInput
from ceiling.model.pipeline_sim import (
    bubble_formula,
    simulate_pipeline,
    simulate_straggler,
    straggler_workers,
)


@pytest.mark.parametrize(
    "schedule,p,m,v",
    [
        ("gpipe", 4, 8, 1),
        ("1f1b", 4, 8, 1),
        ("1f1b", 8, 32, 1),
        ("1f1b", 8, 3, 1),  # fewer micro-batches than stages
        ("interleaved", 4, 8, 2),
        ("interleaved", 4, 8, 4),
        ("interleaved", 8, 16, 3),
        ("interleaved", 8, 64, 2),
    ],
)
@pytest.mark.parametrize("fwd,bwd", [(1.0, 2.0), (1.0, 1.0), (0.3, 0.9)])
def test_uniform_stages_give_the_closed_form_bubble(schedule, p, m, v, fwd, bwd):
    r = simulate_pipeline(schedule, p, m, fwd, bwd, chunks=v)
    assert r.bubble_fraction == pytest.approx(bubble_formula(p, m, v), rel=1e-12, abs=1e-12)
    assert r.makespan_s == pytest.approx((m + (p - 1) / v) * (fwd + bwd), rel=1e-12)
    assert len(r.passes) == 2 * p * m * v


def test_every_pass_respects_its_dependencies_and_devices_never_overlap():
    r = simulate_pipeline(
        "interleaved", 4, 8, [1, 1.2, 0.9, 1], [2, 2.5, 2, 2], chunks=2, p2p_s=0.05
    )
    by_device = {}
    for x in r.passes:
        by_device.setdefault(x.device, []).append(x)
    for passes in by_device.values():
        for a, b in itertools.pairwise(passes):
            assert b.start_s >= a.end_s - 1e-12
    end = {(x.kind, x.micro_batch, x.chunk * 4 + x.device): x for x in r.passes}
    for (kind, mb, vs), x in end.items():
        if kind == "F" and vs > 0:
            assert x.start_s >= end[("F", mb, vs - 1)].end_s + 0.05 - 1e-12
        if kind == "B" and vs < 7:
            assert x.start_s >= end[("B", mb, vs + 1)].end_s + 0.05 - 1e-12


def test_a_slow_stage_sets_the_pace():
    # Steady state is paced by the slowest stage: m passes of (f + b) there, plus fill/drain.
    even = simulate_pipeline("1f1b", 4, 16, 1.0, 2.0)
    slow = simulate_pipeline("1f1b", 4, 16, [1, 1, 1.5, 1], [2, 2, 3, 2])
    assert slow.makespan_s > even.makespan_s
    assert slow.makespan_s >= 16 * 4.5
    assert slow.utilisation[2] == max(slow.utilisation)
    assert slow.utilisation[0] == pytest.approx(16 * 3 / slow.makespan_s)


def test_point_to_point_latency_lengthens_the_fill():
    a = simulate_pipeline("1f1b", 4, 8, 1.0, 2.0)
    b = simulate_pipeline("1f1b", 4, 8, 1.0, 2.0, p2p_s=0.1)
    # Fill and drain each cross p-1 device boundaries; in the steady state the last stage
    # also waits for each next forward to arrive, so the cost exceeds the fill alone.
    assert b.makespan_s > a.makespan_s + 2 * 3 * 0.1
    assert b.makespan_s <= a.makespan_s + 2 * (8 + 3) * 0.1


def test_in_flight_micro_batches_match_korthikanti():
    # 1F1B: the first stage holds p micro-batches; interleaved holds p·v + p - 1 chunks,
    # i.e. l layers × (1 + (p-1)/(p·v)).
    assert simulate_pipeline("1f1b", 8, 32, 1, 2).peak_in_flight[0] == 8
    r = simulate_pipeline("interleaved", 8, 32, 1, 2, chunks=3)
    assert r.peak_in_flight[0] == 8 * 3 + 8 - 1
    assert r.peak_in_flight[0] / 3 / 8 == pytest.approx(1 + 7 / 24)
    assert simulate_pipeline("gpipe", 4, 8, 1, 2).peak_in_flight[0] == 8


def test_bad_pipeline_input_is_explained():
    with pytest.raises(InvalidInput, match=r"m\(6\) % p\(4\) = 2"):
        simulate_pipeline("interleaved", 4, 6, 1, 2, chunks=2)
    with pytest.raises(InvalidInput, match="one time per stage"):
        simulate_pipeline("1f1b", 4, 8, [1, 2], 2)
    with pytest.raises(InvalidInput, match="schedule"):
        simulate_pipeline("zigzag", 4, 8, 1, 2)
    with pytest.raises(InvalidInput, match="interleaved"):
        simulate_pipeline("1f1b", 4, 8, 1, 2, chunks=2)


def test_one_straggler_makes_everyone_wait():
    r = simulate_straggler([1.0, 1.0, 1.0, 1.3], allreduce_s=0.2)
    assert r.step_s == pytest.approx(1.5)
    assert r.wait_s == pytest.approx((0.3, 0.3, 0.3, 0.0))
    assert r.mean_wait_s == pytest.approx(0.225)
    assert r.slowdown == pytest.approx(1.5 / 1.2)
    assert r.efficiency == pytest.approx(1.075 / 1.5)


def test_jitter_grows_the_expected_wait_with_more_workers():
    few = simulate_straggler(straggler_workers(4, 1.0, jitter=0.05, seed=1))
    many = simulate_straggler(straggler_workers(1024, 1.0, jitter=0.05, seed=1))
    assert many.mean_wait_s > few.mean_wait_s
    # Expected max of 1024 normals is about 3.2 sigma above the mean.
    assert 0.12 < many.step_s - 1.0 < 0.22
    with pytest.raises(InvalidInput):
        straggler_workers(4, 1.0, slow_factor=0.5)


def test_a_deep_narrow_pipeline_gives_the_closed_form_makespan():
    # m = 1 and thousands of stages: each backward waits on the next stage's, so a sweep
    # over every device per pass would be quadratic here; the result must stay exact.
    p = 3000
    r = simulate_pipeline("1f1b", p, 1, 1.0, 2.0)
    assert r.makespan_s == pytest.approx(p * 3.0)
    assert len(r.passes) == 2 * p
    assert r.bubble_fraction == pytest.approx(bubble_formula(p, 1))


def test_a_simulation_too_large_is_refused_with_the_arithmetic():
    from ceiling.model.pipeline_sim import MAX_PASSES

    with pytest.raises(InvalidInput, match=r"p\(100000\) × m\(10\) × v\(1\) = 2,000,000"):
        simulate_pipeline("1f1b", 100_000, 10, 1.0, 2.0)
    assert MAX_PASSES < 2 * 100_000 * 10


# ---- the commands ---------------------------------------------------------------------


def test_simulate_pipeline_command_reports_the_exact_bubble(cli, tmp_path):
    import json

    fig = tmp_path / "pipe.png"
    code, out, err = cli(
        "simulate",
        "pipeline",
        "-p",
        "4",
        "-m",
        "8",
        "--schedule",
        "interleaved",
        "-v",
        "2",
        "--json",
        "--plot",
        fig,
    )
    assert code == 0, err
    data = json.loads(out)
    assert data["bubble_fraction"] == pytest.approx(3 / 16)
    assert data["bubble_formula"] == pytest.approx(3 / 16)
    assert fig.stat().st_size > 5000
    code, out, _ = cli(
        "simulate", "pipeline", "-p", "4", "-m", "8", "--forward", "10ms,10ms,15ms,10ms"
    )
    assert code == 0 and "(p-1)/(v·m) = 37.50% holds only for uniform stages" in out
    assert "stage 2 (45 ms per micro-batch) sets the pace" in " ".join(out.split())
    code, out, _ = cli(
        "simulate", "pipeline", "-p", "4", "-m", "8", "--forward", "10ms,10ms,15ms,10ms", "--json"
    )
    data = json.loads(out)
    # 1F1B with every stage at the mean (11.25 ms + 22.5 ms): (m + p - 1) × 33.75 ms
    assert data["balanced_makespan_s"] == pytest.approx(11 * 0.03375)
    # the 45 ms stage sets the pace: slower than the same work split evenly
    assert data["makespan_s"] > data["balanced_makespan_s"]
    # The closed form m·max + (Σ - max): 8 × 45 + 3 × 30 ms, an upper bound (stage 3 idles).
    assert data["makespan_closed_form_s"] == pytest.approx(0.45)
    assert data["makespan_s"] <= data["makespan_closed_form_s"] + 1e-12
    code, out, _ = cli(
        "simulate", "pipeline", "-p", "4", "-m", "8", "--forward", "10ms,10ms,10ms,15ms", "--json"
    )
    data = json.loads(out)
    # With the last stage the slowest it is exact: 8 × 45 + 3 × 30 ms.
    assert data["makespan_s"] == pytest.approx(data["makespan_closed_form_s"]) == 0.45
    code, out, _ = cli("simulate", "pipeline", "-p", "400", "-m", "1")
    assert code == 0 and "of 400 stages shown" in " ".join(out.split())
    assert out.count("\n") < 60  # a summary table, not 400 rows


def test_simulate_straggler_command(cli, tmp_path):
    import json

    fig = tmp_path / "s.svg"
    code, out, err = cli(
        "simulate",
        "straggler",
        "-n",
        "16",
        "--slow",
        "1.3",
        "--allreduce",
        "0.2s",
        "--json",
        "--plot",
        fig,
    )
    assert code == 0, err
    data = json.loads(out)
    assert data["step_s"] == pytest.approx(1.5)
    assert data["mean_wait_s"] == pytest.approx(0.3 * 15 / 16)
    assert fig.exists()
    code, out, _ = cli("simulate", "straggler", "-n", "1024", "--jitter", "0.02")
    assert code == 0 and "expected slowest grows" in out


def test_simulate_bad_input_is_one_line_exit_2(cli):
    for args, msg in [
        (["pipeline", "-p", "4", "-m", "6", "--schedule", "interleaved", "-v", "2"], "m(6) % p(4)"),
        (["pipeline", "-p", "4", "--forward", "1,2"], "one per stage"),
        (["pipeline", "--schedule", "zigzag"], "--schedule"),
        (["pipeline", "--plot", "x.pdf"], ".png or .svg"),
        (["pipeline", "-p", "100000", "-m", "100"], "20,000,000 passes"),
        (["straggler", "--slow", "0.5"], "slow factor"),
        (["straggler", "-n", "0"], "workers"),
    ]:
        code, _, err = cli("simulate", *args)
        assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, (args, err)
        assert msg in err, (msg, err)


@settings(max_examples=60, deadline=None)
@given(
    p=st.integers(1, 8),
    rounds=st.integers(1, 5),
    v=st.integers(1, 4),
    data=st.data(),
)
def test_any_schedule_finishes_and_uniform_bubbles_are_exact(p, rounds, v, data):
    m = p * rounds
    schedule = "interleaved" if v > 1 else data.draw(st.sampled_from(["gpipe", "1f1b"]))
    times = st.floats(0.1, 5.0)
    fwd = data.draw(st.lists(times, min_size=p, max_size=p))
    bwd = data.draw(st.lists(times, min_size=p, max_size=p))
    r = simulate_pipeline(schedule, p, m, fwd, bwd, chunks=v, p2p_s=0.01)
    assert r.makespan_s >= r.ideal_s - 1e-9
    assert len(r.passes) == 2 * p * m * v
    u = simulate_pipeline(schedule, p, m, 1.0, 2.0, chunks=v)
    assert u.bubble_fraction == pytest.approx(bubble_formula(p, m, v), abs=1e-12)
