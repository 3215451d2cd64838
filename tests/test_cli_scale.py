import json
import shlex

import pytest

from ceiling.measure import scale_workloads as wl
from ceiling.measure.scale import ScaleConfig


def test_config_validation_messages():
    with pytest.raises(ValueError, match="increase without repeats"):
        ScaleConfig("synthetic", (2, 1))
    with pytest.raises(ValueError, match="unknown workload 'quux'"):
        ScaleConfig("quux", (1, 2))
    with pytest.raises(ValueError, match="ddp workload needs --backend processes"):
        ScaleConfig("ddp", (1, 2), backend="threads")
    with pytest.raises(ValueError, match="mode must be strong or weak"):
        ScaleConfig("synthetic", (1,), mode="diagonal")


def test_share_splits_strong_keeps_weak_and_loads_the_straggler():
    ctx = wl.StepContext(rank=3, n=4, mode="strong", device="cpu", backend="threads")
    assert ctx.share(8.0) == 2.0
    ctx.imbalance = 0.5
    assert ctx.share(8.0) == 3.0
    ctx.rank = 0
    assert ctx.share(8.0) == 2.0
    ctx.mode = "weak"
    assert ctx.share(8.0) == 8.0


def test_bad_worker_list_is_one_line(cli):
    code, _, err = cli("scale", "synthetic", "--workers", "1,x")
    assert code == 2
    assert err.startswith("error: worker counts must be whole numbers")


@pytest.mark.slow
def test_synthetic_recovers_the_serial_fraction(cli):
    """Acceptance: p within 0.03 of 0.9 from 1, 2, 4, 8 sleeping gloo workers."""
    code, out, err = cli("scale", "synthetic", "--serial", "0.1", "--workers", "1,2,4,8", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert abs(doc["fit"]["amdahl"]["p"] - 0.9) < 0.03
    assert doc["fit"]["usl"]["sigma"] >= 0
    assert doc["fit"]["usl"]["kappa"] >= 0
    assert [p["n"] for p in doc["points"]] == [1, 2, 4, 8]
    for p in doc["points"]:
        assert set(p) >= {"n", "time_s", "speedup", "efficiency", "karp_flatt"}
        assert p["efficiency"] == pytest.approx(p["speedup"] / p["n"])
    assert doc["points"][0]["karp_flatt"] is None
    assert doc["truth"]["parallel_fraction"] == 0.9
    assert doc["backend_engine"] == "gloo"
    assert doc["method_version"] >= 1 and doc["environment"]["cpu_cores"] >= 1


def test_threads_backend_imbalance_and_weak_scaling(cli, tmp_path):
    """Threads need no start-up: weak scaling recovers α and the straggler's cost is shown."""
    fig = tmp_path / "s.png"
    code, out, err = cli(
        "scale",
        "synthetic",
        "--backend",
        "threads",
        "--workers",
        "1,2,4",
        "--mode",
        "weak",
        "--serial",
        "0.2",
        "--work-ms",
        "100",
        "--imbalance",
        "0.5",
        "--steps",
        "2",
        "--json",
        "--plot",
        fig,
    )
    assert code == 0, err
    doc = json.loads(out)
    assert doc["backend"] == "threads"
    assert doc["fit"]["best"] == "gustafson"
    assert any("sleeping releases the GIL" in n for n in doc["notes"])
    assert any("load imbalance" in n and "1.5×" in n for n in doc["notes"])
    top = doc["points"][-1]
    # The straggler sleeps 0.5 × 80 ms longer; the others wait for it at the barrier.
    others = top["wait_s_per_rank"][:-1]
    assert all(w > 0.02 for w in others)
    assert top["imbalance_loss"] > 0
    assert fig.stat().st_size > 0


def test_python_loop_on_threads_is_called_concurrency(cli):
    code, out, err = cli(
        *shlex.split(
            "scale python --backend threads --workers 1,2 --iterations 200000 --steps 2 --json"
        )
    )
    assert code == 0, err
    doc = json.loads(out)
    assert any("concurrency, not parallelism" in n for n in doc["notes"])


def test_user_callable_on_threads(cli):
    code, out, err = cli(
        *shlex.split(
            "scale test_distributed_jobs:user_step --backend threads --workers 1,2 --steps 2 --json"
        )
    )
    assert code == 0, err
    doc = json.loads(out)
    assert [p["n"] for p in doc["points"]] == [1, 2]
    # a 10 ms sleep lasts at least 10 ms on any machine; how much longer is the machine's
    # load, so only the order is asserted: half the work each, less time than all of it
    one, two = doc["points"]
    assert two["compute_s"] >= 0.01 * (1 - 1e-9)
    assert two["compute_s"] < one["compute_s"]


def test_one_worker_count_is_measured_not_fitted(cli):
    code, out, err = cli(
        *shlex.split("scale synthetic --backend threads --workers 2 --work-ms 20 --json")
    )
    assert code == 0, err
    doc = json.loads(out)
    assert doc["fit"] is None
    assert doc["points"][0]["speedup"] is None
    # measured, not fitted: the serial part sleeps until 10 % of 20 ms has passed (at least
    # 2 ms; how much longer is this machine's load, not the logic)
    assert doc["points"][0]["serial_s"] >= 0.002 * (1 - 1e-9)
    assert doc["warnings"] == [
        "one worker count: nothing to fit; give several, e.g. --workers 1,2,4"
    ]


def test_a_failing_user_callable_is_one_line(cli):
    # time.sleep(ctx) raises TypeError inside the worker thread
    code, _, err = cli("scale", "time:sleep", "--backend", "threads", "--workers", "1")
    assert code == 2
    assert err.startswith("error: your time:sleep raised TypeError")
    assert "Traceback" not in err


@pytest.mark.slow
def test_ddp_reports_compute_and_communication(cli):
    code, out, err = cli(
        *shlex.split("scale ddp --workers 1,2 --batch 4 --seq 32 --steps 2 --json")
    )
    assert code == 0, err
    doc = json.loads(out)
    assert doc["backend_engine"] == "gloo"
    assert doc["truth"]["grad_bytes_per_step"] > 1e6
    for p in doc["points"]:
        assert p["compute_s"] > 0
        assert p["comm_s"] > 0
        assert p["optimizer_s"] > 0
        assert p["time_s"] >= p["compute_s"]
