"""The scaling summary from raw samples: which time is fitted, and what the notes claim."""

import pytest

from ceiling.render.scaling_summary import summarize_run

P_TRUE = 0.9
NS = (1, 2, 4, 8)


def _raw(workload="synthetic", mode="strong", sync_per_worker_s=0.002, steps=3):
    """A run whose work is exactly Amdahl p = 0.9 and whose synchronisation grows with N."""
    runs = []
    for n in NS:
        work = (1 - P_TRUE) + (P_TRUE / n if mode == "strong" else P_TRUE)
        sync = sync_per_worker_s * n if n > 1 else 0.0
        runs.append(
            {
                "n": n,
                "step_times_s": [work + sync] * steps,
                "work_times_s": [work] * steps,
                "phases_per_rank_s": {
                    "serial_s": [1 - P_TRUE] * n,
                    "compute_s": [work - (1 - P_TRUE)] * n,
                    "wait_s": [sync] * n,
                },
            }
        )
    return {
        "workload": workload,
        "mode": mode,
        "backend": "processes",
        "imbalance": 0.0,
        "truth": {"serial_fraction": 1 - P_TRUE, "parallel_fraction": P_TRUE},
        "runs": runs,
    }


def test_synthetic_fits_its_work_and_reports_the_synchronisation_apart():
    doc = summarize_run(_raw())
    assert doc["timed"] == "work"
    assert doc["fit"]["amdahl"]["p"] == pytest.approx(P_TRUE, abs=1e-6)
    # the same steps with the synchronisation counted scale worse, and say so
    assert doc["fit_with_sync"]["amdahl"]["p"] < P_TRUE - 0.01
    top = doc["points"][-1]
    assert top["time_s"] == pytest.approx(0.1 + 0.9 / 8)
    assert top["step_time_s"] == pytest.approx(0.1 + 0.9 / 8 + 0.016)
    assert top["sync_s"] == pytest.approx(0.016)
    truth = next(n for n in doc["notes"] if n.startswith("truth"))
    assert "p = 0.900" in truth and "measured apart" in truth and "16 ms" in truth


def test_other_workloads_fit_the_whole_step():
    doc = summarize_run(_raw(workload="matmul"))
    assert doc["timed"] == "step"
    assert doc["fit_with_sync"] is None
    assert doc["points"][-1]["time_s"] == pytest.approx(0.1 + 0.9 / 8 + 0.016)
    assert "sync_s" not in doc["points"][-1]


def test_weak_synthetic_truth_is_what_the_measurement_can_see():
    doc = summarize_run(_raw(mode="weak", sync_per_worker_s=0.0))
    assert doc["fit"]["gustafson"]["alpha"] == pytest.approx(0.0, abs=1e-4)
    truth = next(n for n in doc["notes"] if n.startswith("truth"))
    assert "Gustafson α = 0 expected" in truth
    assert "7.3× at N = 8" in truth  # 8 - 0.1 * 7 when the serial part is counted once


def test_records_without_work_times_still_fit_the_step():
    raw = _raw()
    for r in raw["runs"]:
        del r["work_times_s"]
    doc = summarize_run(raw)
    assert doc["timed"] == "step"
    assert doc["points"][-1]["time_s"] == pytest.approx(0.1 + 0.9 / 8 + 0.016)


def test_a_speedup_above_the_worker_count_is_noise_with_its_spread():
    from ceiling.render.scaling_summary import noise_mark

    raw = _raw(workload="python")
    # N = 1 steps of 1.0 to 1.5 s; at N = 2 one step ran at 0.14 s: the median 0.2 s gives
    # 1.2 / 0.2 = 6× on 2 workers (300 % efficiency), which no 2 workers can give
    raw["runs"] = [dict(raw["runs"][0], step_times_s=[1.0, 1.2, 1.5], work_times_s=[])]
    raw["runs"].append(dict(raw["runs"][0], n=2, step_times_s=[0.14, 0.2, 0.25]))
    doc = summarize_run(raw)
    top = doc["points"][-1]
    assert top["speedup"] == pytest.approx(6.0)
    assert top["noise"] is True
    assert top["speedup_range"] == pytest.approx([1.0 / 0.25, 1.5 / 0.14])
    assert noise_mark(top) == " (noise: 4–10.7× over the steps)"
    (note,) = [n for n in doc["notes"] if "can give" in n]
    assert "6.00×" in note and "300.0 %" in note and "4× to 10.7×" in note
    assert "kept out of the verdict" in note and "idle machine" in note
    # a speedup within the worker count is not noise
    assert summarize_run(_raw())["points"][-1]["noise"] is False
