"""A measurement taken while other work shared the machine is marked busy (from a faked
load and faked CPU times), in the JSON and the output, and replaces no idle profile."""

from __future__ import annotations

import json

import pytest

from ceiling.hardware.load import Clocks, LoadRecord, LoadWatch, between

START = Clocks(wall_s=100.0, process_cpu_s=10.0, machine_cpu_s=500.0, load_1min=0.3)


def _after(wall_s, own_s, machine_s, load=0.5) -> Clocks:
    """The clocks `wall_s` later, this process having run `own_s` and all CPUs `machine_s`."""
    return Clocks(100.0 + wall_s, 10.0 + own_s, 500.0 + machine_s, load)


def test_an_idle_window_is_not_busy():
    # 10 s on 2 CPUs: this process ran both cores (19 s of CPU), others 0.5 s
    r = between(START, _after(10.0, 19.0, 19.5), cpus=2)
    assert (r.wall_s, r.process_cpu_s, r.others_cpu_s) == (10.0, 19.0, 0.5)
    assert r.reasons() == [] and not r.busy


def test_two_cpu_burners_beside_a_two_thread_measurement_are_busy():
    # each of 4 runnable threads gets half a core: this process 10 s, the burners 10 s
    r = between(START, _after(10.0, 10.0, 20.0), cpus=2)
    assert r.reasons() == ["other processes took 50.0 % of the 2 CPUs' time over 10.0 s"]


def test_a_process_that_mostly_waited_to_run_is_busy():
    # no readable machine counters; this process got 2 s of CPU in 10 s
    r = between(START, Clocks(110.0, 12.0, None, 0.5), cpus=2)
    assert r.others_cpu_s is None
    assert r.reasons() == ["this process ran 2.0 s of CPU time in 10.0 s"]


def test_a_load_above_the_cpus_as_it_started_is_busy():
    r = between(dataclass_replace(START, load_1min=11.5), _after(10.0, 19.0, 19.0), cpus=2)
    assert r.reasons() == ["the load average was 11.5 on 2 logical CPUs"]
    at_the_cpus = between(dataclass_replace(START, load_1min=2.0), _after(10.0, 19.0, 19.0), 2)
    assert not at_the_cpus.busy


def test_a_window_too_short_for_cpu_clocks_is_judged_by_load_only():
    r = between(START, _after(0.2, 0.0, 0.4), cpus=2)  # 0.2 s: all shares would be noise
    assert r.reasons() == []


def dataclass_replace(c, **kw):
    import dataclasses

    return dataclasses.replace(c, **kw)


def test_the_record_round_trips_through_json_with_its_verdict():
    r = between(START, _after(10.0, 10.0, 20.0), cpus=2)
    data = json.loads(json.dumps(r.to_json()))
    assert data["busy"] is True and data["busy_reasons"] == r.reasons()
    assert data["load_1min_start"] == 0.3 and data["load_1min_end"] == 0.5
    assert LoadRecord.from_json(data) == r


def test_a_watch_brackets_its_block_with_the_reader_it_is_given():
    readings = iter([START, _after(4.0, 1.0, 3.5)])
    with LoadWatch(read=lambda: next(readings), cpus=4) as w:
        pass
    assert w.record == LoadRecord(4, 4.0, 1.0, 2.5, 0.3, 0.5)
    assert w.record.reasons() == ["this process ran 1.0 s of CPU time in 4.0 s"]


def _fake_watch(end: Clocks, cpus: int = 2):
    def make():
        readings = iter([START, end, end])
        return LoadWatch(read=lambda: next(readings), cpus=cpus)

    return make


BURNERS = _after(10.0, 10.0, 20.0)  # two CPU burners beside the run
IDLE = _after(10.0, 19.0, 19.5)


def _report(end: Clocks):
    """A bench report of one fp32 matmul whose load window read `end`."""
    from ceiling.measure import suite
    from ceiling.measure.matmul import MatmulResult
    from ceiling.measure.stats import summarize

    report = suite.new_report("cpu", True)
    with suite.watched(report, _fake_watch(end)):
        samples = [0.01, 0.011]
        report.matmul.append(
            MatmulResult("fp32", 64, 64, 64, "cpu", samples, summarize(samples), 0.0, True)
        )
    return report


def test_a_bench_report_carries_its_load_in_the_json_and_the_environment():
    busy = _report(BURNERS)
    data = busy.to_json()
    assert data["busy"] is True
    assert data["busy_reasons"] == ["other processes took 50.0 % of the 2 CPUs' time over 10.0 s"]
    assert data["load"]["others_cpu_s"] == 10.0 and data["load"]["process_cpu_s"] == 10.0
    assert data["environment"]["load"] == data["load"]  # so the profile knows it too
    assert _report(IDLE).to_json()["busy"] is False


@pytest.fixture
def bench_run(monkeypatch):
    """`ceiling bench` whose run reads the given load; returns the default profile path."""
    from ceiling.hardware.profile import default_profile_path
    from ceiling.measure import suite

    def use(end: Clocks):
        monkeypatch.setattr(suite, "run_all", lambda *a, **k: _report(end))
        return default_profile_path()

    return use


def test_a_busy_bench_keeps_the_idle_profile_unless_forced(bench_run, cli, tmp_path):
    path = bench_run(IDLE)
    code, _out, err = cli("bench", "--quick")
    assert code == 0, err
    idle = json.loads(path.read_text())
    assert idle["environment"]["load"]["busy"] is False

    bench_run(BURNERS)
    mine = tmp_path / "mine.json"
    mine.write_text(path.read_text())
    code, out, err = cli("bench", "--quick", "--save", str(mine))
    assert code == 0, err
    text = " ".join(out.split())
    assert f"not saved to {path}: measured on a busy machine (other processes took 50.0 %" in text
    assert f"not saved to {mine}" in text and "--force replaces it" in text
    assert "busy machine: other processes took 50.0 % of the 2 CPUs' time over 10.0 s" in text
    assert "no verdict is drawn from them: run `ceiling bench` again on an idle machine" in text
    assert json.loads(path.read_text()) == idle and json.loads(mine.read_text()) == idle

    code, out, err = cli("bench", "--quick", "--force", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["busy"] is True and data["profile_saved_to"] == [str(path)]
    assert "profile_kept" not in data
    assert json.loads(path.read_text())["environment"]["load"]["busy"] is True


def test_a_busy_bench_with_no_profile_yet_saves_it_marked_busy(bench_run, cli):
    path = bench_run(BURNERS)
    code, out, err = cli("bench", "--quick", "--json")
    assert code == 0, err
    assert json.loads(out)["profile_saved_to"] == [str(path)]
    from ceiling.hardware.profile import busy_reasons, load_profile

    saved = load_profile(path)
    assert busy_reasons(saved.device("cpu").extra["environment"]) == [
        "other processes took 50.0 % of the 2 CPUs' time over 10.0 s"
    ]


@pytest.mark.parametrize("end", [IDLE, BURNERS])
def test_a_report_measuring_now_saves_the_default_profile_only_on_an_idle_machine(
    bench_run, monkeypatch, tmp_path, end
):
    from ceiling.measure import machine
    from ceiling.report.compose import ReportContext

    monkeypatch.setattr(machine, "pick_device", lambda _device: "cpu")
    default, own = bench_run(end), tmp_path / "own.json"
    steps: list[str] = []
    ctx = ReportContext(quick=True, save_profile_to=own, progress=steps.append)
    result = ctx.profile_result()
    saved = [own, default] if end is IDLE else [own]
    assert ctx.measured_now and result.measured_now and ctx.profile_file == own
    assert (
        ctx.profile_source
        == result.source
        == (f"measured now (quick benchmarks), saved to {' and '.join(map(str, saved))}")
    )
    assert default.exists() is (end is IDLE) and own.exists()
    assert [d.kind for d in ctx.profile().devices] == ["cpu"] and result.overheads == []
    assert steps[0] == "measuring the CPU's ceilings"
    assert ctx.profile_result() is result  # measured once


def _patch_watch(monkeypatch, module, end: Clocks):
    monkeypatch.setattr(module, "LoadWatch", lambda: _fake_watch(end)())


@pytest.mark.parametrize(("end", "busy"), [(BURNERS, True), (IDLE, False)])
def test_a_profile_records_its_load_and_draws_no_hint_when_busy(monkeypatch, end, busy):
    import torch

    import ceiling
    from ceiling.profile import run

    _patch_watch(monkeypatch, run, end)
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    r = ceiling.profile(model, torch.randn(8, 32), train=False, steps=2, spec="h100-sxm")
    data = r.record()
    assert data["busy"] is busy and data["load"]["wall_s"] == 10.0
    if busy:
        (hint,) = r.report.hints
        assert hint == (
            "measured while the machine was busy (other processes took 50.0 % of the 2 CPUs' "
            "time over 10.0 s): the step time, MFU and op times read low and vary, so no hint "
            "is drawn from them; run the profile again on an idle machine"
        )
    else:
        assert data["busy_reasons"] == [] and not any("busy" in h for h in r.report.hints)


def test_a_report_section_that_measured_under_load_is_marked_and_says_what_to_rerun():
    from ceiling.report.compose import ReportContext, SectionOutput, SectionSpec, run_section

    ctx = ReportContext()
    ctx.load_watch = _fake_watch(BURNERS)

    def measuring(_ctx, out: SectionOutput):
        out.key("mfu", 0.02, "MFU", "2.0 %")

    res = run_section(SectionSpec("mfu", "MFU", measuring, measures=True), ctx)
    data = res.to_json()
    assert data["busy"] is True and data["load"]["others_cpu_s"] == 10.0
    assert data["key_figures"]["load"]["busy_reasons"] == res.busy_reasons
    assert res.output.notes == []  # the page's badge and the verdict say it
    from ceiling.report.html import _section

    page = _section(res)
    assert '<span class="badge busy" title="other processes took 50.0 % of the 2 CPUs' in page
    modelled = run_section(SectionSpec("planner", "Plan", measuring), ctx)
    assert modelled.load is None and modelled.to_json()["busy"] is False
    ctx.load_watch = _fake_watch(IDLE)
    idle = run_section(SectionSpec("mfu", "MFU", measuring, measures=True), ctx)
    assert idle.to_json()["busy"] is False and "badge busy" not in _section(idle)


def test_the_figure_a_busy_window_is_quoted_by_is_its_first_reasons():
    loaded = between(dataclass_replace(START, load_1min=11.5), IDLE, cpus=2)
    assert loaded.evidence() == ("load_1min_start", 11.5)
    assert between(START, BURNERS, cpus=2).evidence() == ("others_share", 0.5)
    waited = between(START, Clocks(110.0, 12.0, None, 0.5), cpus=2)
    assert waited.evidence() == ("process_cpu_s", 2.0)
    assert between(START, IDLE, cpus=2).evidence() is None
