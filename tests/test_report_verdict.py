"""The verdict: findings computed from the sections' key figures, the user's work first, the
most time at stake next, each naming the JSON key its number comes from."""

from __future__ import annotations

import pytest

from ceiling.report.compose import SectionOutput, SectionResult
from ceiling.report.verdict import findings, lookup


def _section(key: str, figures: dict, status: str = "ok") -> SectionResult:
    return SectionResult(key, key, status, None, 0.0, SectionOutput(key_figures=figures))


MACHINE = {
    "best_matmul": {
        "kind": "CPU",
        "dtype": "fp32",
        "flops_per_s": 50e9,
        "reference": "theoretical",
        "share_of_reference": 0.5,
    },
    "measured_busy": False,
}
MFU = {
    "model": "gpt:tiny",
    "demo": True,
    "mfu": 0.12,
    "largest_loss": {"name": "per-op overhead", "share": 0.38, "recover": "batch larger"},
    "waterfall": [{"share": 0.12}, {"share": 0.38}, {"share": 0.5}],
}
PLANNER = {
    "model": "llama-3-70b",
    "demo": False,
    "gpus": 64,
    "device": "H100 SXM5 80GB",
    "best_plan": {"d": 8, "t": 4, "p": 2, "cp": 1, "mfu": 0.45},
    "scaling": [
        {"gpus": 64, "efficiency": 1.0, "speedup": 1.0},
        {"gpus": 256, "efficiency": 0.8, "speedup": 3.2},
    ],
}


def test_the_users_work_comes_first_then_the_most_at_stake():
    got = findings(
        [_section("machine", MACHINE), _section("mfu", MFU), _section("planner", PLANNER)]
    )
    assert [f.section for f in got] == ["planner", "mfu", "machine"]
    assert got[0].text.startswith("The best split of llama-3-70b on 64 × H100 SXM5 80GB (8×4×2)")
    assert "45.0 % MFU" in got[0].text and "from 64 to 256 GPUs gives 73.3 %" in got[0].text
    assert got[1].text == (
        "Demo: "
        "gpt:tiny trains here at 12.0 % MFU; its step loses 38.0 % to per-op overhead: "
        "batch larger."
    )
    assert "check the thread count" in got[2].text


def test_each_finding_names_the_key_of_its_number():
    sections = [_section("mfu", MFU), _section("planner", PLANNER)]
    for f in findings(sections):
        figures = {s.key: s.output.key_figures for s in sections}[f.section]
        assert lookup(figures, f.key) == f.value == f.to_json()["value"]
        assert f.to_json()["json_key"] == f"{f.section}.{f.key}"


def test_sections_that_did_not_run_or_lack_the_figure_say_nothing():
    assert findings([_section("mfu", MFU, status="skipped"), _section("planner", {})]) == []


def test_a_busy_machine_gives_no_verdict_but_says_what_to_run_again():
    reasons = ["the load average was 11.5 on 2 logical CPUs"]
    busy = {**MACHINE, "measured_busy": True, "busy_reasons": reasons}
    (f,) = findings([_section("machine", busy)])
    assert f.text == (
        "The machine was busy while this report measured (the load average was 11.5 on 2 "
        "logical CPUs), so the sections marked busy read low and no verdict is drawn from "
        "them: run `ceiling report` again on an idle machine."
    )
    assert lookup(busy, f.key) is True and f.to_json()["json_key"] == "machine.measured_busy"
    assert f.to_json()["about"] == "this machine"


def test_a_section_that_measured_under_load_gives_no_finding_of_its_own():
    """The demo MFU measured at load 11 (the issue's 2.0 %, 0.9 %, 0.6 % and 75 %) says only
    that the machine was busy; the modelled planner still has its finding."""
    from ceiling.hardware.load import Clocks, between

    start = Clocks(0.0, 0.0, 0.0, 0.2)
    load = between(start, Clocks(10.0, 10.0, 20.0, 3.1), cpus=2).to_json()
    mfu = SectionResult("mfu", "MFU", "ok", None, 0.0, SectionOutput(key_figures=MFU), load)
    got = findings([mfu, _section("planner", PLANNER), _section("machine", MACHINE)])
    assert [f.section for f in got] == ["mfu", "planner", "machine"]
    assert got[0].text.startswith(
        "The machine was busy while this report measured (other processes took 50.0 % of the 2 "
        "CPUs' time over 10.0 s), so the sections marked busy read low"
    )
    assert got[0].to_json()["json_key"] == "mfu.load.others_share" and got[0].value == 0.5
    assert not any("trains here" in f.text for f in got)


def test_roofs_that_over_predict_the_step_are_said_so():
    over = {
        **MFU,
        "waterfall": [{"share": 0.3}, {"share": 0.38}, {"share": 0.47}, {"share": -0.15}],
    }
    (f,) = findings([_section("mfu", over)])
    assert f.text == (
        "Demo: "
        "gpt:tiny trains here at 12.0 % MFU; its step loses 38.0 % to per-op overhead, though "
        "the roofs over-predict the step by 15.0 %: batch larger."
    )


def test_a_part_larger_than_the_step_is_named_without_its_share():
    # the roofs put per-op overhead at 1.035 steps: no step loses more than all of itself
    loss = {"name": "per-op overhead", "share": 1.035, "recover": "batch larger"}
    waterfall = [{"share": 0.1}, {"share": 1.035}, {"share": 0.05}, {"share": -0.185}]
    (f,) = findings([_section("mfu", {**MFU, "largest_loss": loss, "waterfall": waterfall})])
    assert f.text == (
        "Demo: "
        "gpt:tiny trains here at 12.0 % MFU; its largest part is per-op overhead, but the roofs "
        "over-predict the step by 18.5 %: batch larger."
    )
    assert "103.5" not in f.text and f.value == 1.035 and f.stake == 1.0


def _decode_figures(**serving) -> dict:
    base = {"context": 4096, "max_batch": 130, "crossover_batch": None, "batch": 130}
    return {
        "headline": {
            "model": "llama-3-8b",
            "device": "H100",
            "expected_tokens_per_s": 135.0,
            "ceiling_tokens_per_s": 210.0,
            "crossover_batch": 317,
            "serving": {**base, **serving},
            "demo": True,
        }
    }


def test_decode_advice_is_the_batch_whose_kv_caches_fit_at_the_stated_context():
    fig = _decode_figures(
        bound_by="memory capacity", tokens_per_s=4050.0, tokens_per_s_per_sequence=31.2
    )
    (f,) = findings([_section("decode", fig)])
    assert f.text == (
        "Demo: "
        "llama-3-8b should decode at about 135 tokens/s on H100 at batch 1; at 4,096 tokens of "
        "context the KV caches of 130 sequences fit beside the weights, still memory-bound: "
        "about 4,050 tokens/s in all (30×) but 31 tokens/s each, so batch up to 130 if that "
        "latency is acceptable."
    )
    assert "317" not in f.text  # the short-prompt crossover is no batch to serve


def test_decode_advice_stops_at_the_crossover_when_it_comes_before_memory_runs_out():
    fig = _decode_figures(
        max_batch=900,
        crossover_batch=200,
        batch=200,
        bound_by="compute",
        tokens_per_s=13_500.0,
        tokens_per_s_per_sequence=67.5,
    )
    (f,) = findings([_section("decode", fig)])
    assert f.text.endswith(
        "at 4,096 tokens of context it turns compute-bound at batch 200: about 13,500 tokens/s "
        "in all (100×) but 68 tokens/s each, so batch up to 200; more only adds latency."
    )


def test_decode_advice_when_no_second_sequence_fits():
    (f,) = findings([_section("decode", _decode_figures(max_batch=1, batch=1))])
    assert "only one sequence's KV cache fits beside the weights: quantise" in f.text
    (f,) = findings([_section("decode", _decode_figures(max_batch=0, batch=0))])
    assert "not one sequence's KV cache fits" in f.text


def test_ops_below_their_roofs_get_what_to_do_not_a_share_of_unexplained():
    mfu = {
        **MFU,
        "largest_loss": {
            "name": "unexplained: other ops beyond their roof and floor",
            "share": 0.67,
            "recover": "look at the op table",
        },
        "categories": [
            {"name": "matmul", "time_s": 0.6, "flops": 1e9, "bound": "compute"},
            {"name": "elementwise", "time_s": 0.2, "flops": 1e6, "bound": "memory"},
        ],
    }
    (got,) = findings([_section("mfu", mfu)])
    assert "unexplained" not in got.text
    assert got.text.startswith(
        "Demo: "
        "gpt:tiny trains here at 12.0 % MFU; 67.0 % of its step is ops running slower than "
        "their roofs predict: start with the matmul ops (75.0 % of the op time): see what this "
        "machine's matmul reaches"
    )
    busy = {**MACHINE, "measured_busy": True, "busy_reasons": ["noisy"]}
    texts = [f.text for f in findings([_section("mfu", mfu), _section("machine", busy)])]
    assert texts[0].startswith("The machine was busy") and "Matmuls reach" not in texts[1]
    elementwise = {**mfu, "categories": [{"name": "elementwise", "time_s": 1.0}]}
    (got,) = findings([_section("mfu", elementwise)])
    assert "elementwise ops (100.0 % of the op time): fuse them (torch.compile)" in got.text


def test_a_scaling_section_with_impossible_speedups_gives_no_finding():
    scaling = {
        "speedup_at_max_n": {"python_processes": 7.14},
        "speedup_noise": {"python_processes": [2.1, 9.8]},
        "max_n": 2,
    }
    assert findings([_section("scaling", scaling)]) == []


def test_a_demo_finding_says_it_is_a_demo_in_its_text_and_json():
    got = findings([_section("mfu", MFU), _section("planner", PLANNER)])
    demo, users = got[1], got[0]
    assert demo.text.startswith("Demo: gpt:tiny trains here")
    assert demo.to_json()["about"] == "a built-in demo" and demo.to_json()["demo"] is True
    assert not users.text.startswith("Demo") and users.to_json()["about"] == "your work"
    machine = findings([_section("machine", MACHINE)])[0].to_json()
    assert machine["about"] == "this machine" and machine["demo"] is False


TRACE = {"step_s": 0.1, "largest_loss": {"name": "idle", "seconds": 0.04, "share": 0.4}}


def _idle_advice(reasons):
    loss = {**TRACE["largest_loss"], "idle_reasons_s": reasons}
    (f,) = findings([_section("trace", {**TRACE, "largest_loss": loss})])
    return f.text


def test_idle_advice_follows_what_the_trace_shows_the_host_doing():
    no_data = {"waiting on data": 0.0, "synchronisation": 0.03, "launch-bound": 0.01}
    assert "remove .item(), .cpu()" in _idle_advice(no_data)
    assert "loader" not in _idle_advice(no_data)  # 0 s of data loading: no loader advice
    assert "DataLoader workers" in _idle_advice({"waiting on data": 0.03, "other": 0.01})
    assert "CUDA graphs" in _idle_advice({"launch-bound": 0.03, "other": 0.01})
    assert "loader" not in _idle_advice({}) and "host time line" in _idle_advice({})
    assert "loader" not in _idle_advice(None)


def test_the_planner_finding_says_what_the_gpus_added_last_give():
    """From 64 to 256 GPUs the speedup goes 1 → 3.2: the 192 added GPUs give 2.2 of the 3
    they would alone (73 %), too little; 64 → 128 at 1.909×: 91 %, no advice."""
    (f,) = findings([_section("planner", PLANNER)])
    assert "the step from 64 to 256 GPUs gives 73.3 % of what the added GPUs would alone" in f.text
    assert f.text.endswith("grow the global batch before the cluster.")
    assert f.stake == pytest.approx(1 - 2.2 / 3)
    rows = [{"gpus": 64, "efficiency": 1.0, "speedup": 1.0},
            {"gpus": 128, "efficiency": 0.9545, "speedup": 1.909}]  # fmt: skip
    (f,) = findings([_section("planner", {**PLANNER, "scaling": rows})])
    assert "gives 90.9 % of what the added GPUs would alone." in f.text
