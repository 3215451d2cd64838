"""The public Python API: each function's typed result, its to_dict() equal to the matching
command's --json, its notebook view and figure, and one-line errors for bad arguments."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import ceiling
from ceiling.errors import CeilingError

GOLDEN = Path(__file__).parent / "golden"


def cli_json(cli, *args) -> dict:
    code, out, err = cli(*args, "--json")
    assert code == 0, err
    return json.loads(out)


def without_plot(record: dict) -> dict:
    return {k: v for k, v in record.items() if k != "plot"}


def test_import_is_cheap_and_every_name_resolves():
    probe = (
        "import sys, ceiling\n"
        "heavy = [m for m in ('torch', 'matplotlib', 'scipy') if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
        "for name in ceiling.__all__:\n"
        "    assert getattr(ceiling, name) is not None, name\n"
        "assert callable(ceiling.profile) and callable(ceiling.report)\n"
        "assert callable(ceiling.trace) and callable(ceiling.bench.matmul)\n"
        "import ceiling.profile.run, ceiling.render.plots\n"  # the packages stay packages
        "assert callable(ceiling.profile) and callable(ceiling.report)\n"
        "print('OK')\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "HEAVY []" in done.stdout and "OK" in done.stdout
    assert (Path(ceiling.__file__).parent / "py.typed").exists()


def test_amdahl_and_gustafson_match_the_commands(cli):
    a = ceiling.amdahl(0.95, ns=[1, 8, 64])
    assert isinstance(a, ceiling.api.laws.AmdahlResult)
    assert a.ceiling == pytest.approx(20.0)
    assert [r.n for r in a.rows] == [1, 8, 64]
    assert a.to_dict() == without_plot(cli_json(cli, "amdahl", "0.95", "-n", "1,8,64"))
    g = ceiling.gustafson(serial=0.1)
    assert g.alpha == pytest.approx(0.1) and g.p == pytest.approx(0.9)
    assert g.to_dict() == without_plot(cli_json(cli, "gustafson", "-s", "0.1"))
    unbounded = ceiling.amdahl(1.0)
    assert unbounded.ceiling == float("inf") and unbounded.to_dict()["ceiling"] is None


def test_fit_matches_the_command(cli):
    path = GOLDEN / "scaling_times.csv"
    from ceiling.api.measurements import read_measurements

    ns, times, _, _ = read_measurements(path)
    r = ceiling.fit(ns, times, predict=[64, 128], source=str(path))
    assert ceiling.fit(path, predict=[64, 128]) == r  # the file itself
    assert r.mode == "strong" and r.measure == "time"
    assert r.fit.amdahl is not None and 0 < r.fit.amdahl.p < 1
    assert r.to_dict() == cli_json(cli, "fit", path, "--predict", "64,128")
    # the same data in milliseconds: the same fit, limits said in ms
    ms = ceiling.fit(ns, [t * 1e3 for t in times], time_unit="ms")
    assert ms.fit.amdahl.p == pytest.approx(r.fit.amdahl.p, rel=1e-6)
    assert all(" ms per run" in line for line in ms.limits.values())


def test_fit_of_a_weak_scale_result_keeps_its_mode(tmp_path):
    path = tmp_path / "scale.json"
    points = [{"N": n, "time": 1.0 + 0.02 * n} for n in (1, 2, 4, 8)]
    path.write_text(json.dumps({"mode": "weak", "points": points}))
    assert ceiling.fit(path).mode == "weak"
    assert ceiling.fit(path, mode="strong").mode == "strong"


def test_roofline_matches_the_command(cli):
    ops = ["add:100M", "matvec:8192", "matmul:4096x4096x4096"]
    r = ceiling.roofline(ops, spec="h100-sxm")
    assert r.dtype == "bf16"  # an accelerator's tensor-core dtype by default
    assert [o["bound"] for o in r.ops] == ["memory", "memory", "compute"]
    assert r.ridge_flops_per_byte == pytest.approx(
        r.roofs["peak_flops_per_s"] / r.roofs["bandwidth_bytes_per_s"]
    )
    args = ["roofline", "--spec", "h100-sxm"] + [x for op in ops for x in ("--op", op)]
    assert r.to_dict() == without_plot(cli_json(cli, *args))


def test_decode_matches_the_command(cli):
    r = ceiling.decode("llama-3-8b", spec="h100-sxm", batch=[1, 16], context=4096)
    assert [row.batch for row in r.rows] == [1, 16]
    assert r.rows[0].bound == "memory"
    assert r.max_batch_context == 4096 and r.max_batch > 16
    args = ("decode", "llama-3-8b", "--spec", "h100-sxm", "--batch", "1,16", "--context", "4096")
    assert r.to_dict() == without_plot(cli_json(cli, *args))


def test_serve_matches_the_command(cli):
    r = ceiling.serve("llama-3-8b", spec="h100-sxm", concurrency=4, num_requests=40,
                      input_tokens=200, output_tokens=20, tp=2)  # fmt: skip
    # the 4 requests sent at the start are the closed loop's warm-up
    assert r.metrics.requests == 36 and r.inputs["layout"]["gpus"] == 2
    assert r.metrics.mean_batch <= 4
    args = ("serve", "llama-3-8b", "--spec", "h100-sxm", "--concurrency", "4", "--num-requests",
            "40", "--input-tokens", "200", "--output-tokens", "20", "--tp", "2")  # fmt: skip
    assert r.to_dict() == without_plot(cli_json(cli, *args))


def test_plan_matches_the_command(cli):
    r = ceiling.plan("llama-3-8b", 64, spec="h100-sxm", top=3, fixed={"t": 8})
    assert r.plans and all(p.plan.t == 8 for p in r.plans)
    assert r.best.step_time_s == min(p.step_time_s for p in r.plans)
    args = ("plan", "llama-3-8b", "--spec", "h100-sxm", "-n", "64", "-k", "3", "--fixed", "t=8")
    assert r.to_dict() == cli_json(cli, *args)


def test_info_matches_the_command(cli):
    r = ceiling.info()
    assert r.cpu.cores >= 1 and set(r.cpu.native) >= {"fp32", "bf16"}
    record, command = r.to_dict(), cli_json(cli, "info")
    assert record.keys() == command.keys() and record["cpu"].keys() == command["cpu"].keys()
    # a clock read twice may differ (and the peaks with it): the rest is the machine's facts
    moving = {"freq_hz", "clocks_hz", "peak_flops_per_s", "measured_vs_peak"}
    assert {k: v for k, v in record["cpu"].items() if k not in moving} == {
        k: v for k, v in command["cpu"].items() if k not in moving
    }
    assert record["torch"] == command["torch"] and record["gpus"] == command["gpus"]


def test_specs_matches_the_command(cli):
    one = ceiling.specs("h100")
    assert one.spec.key == "h100-sxm" and one.resolved.startswith("h100 is h100-sxm")
    assert one.to_dict() == cli_json(cli, "specs", "h100")
    assert "[" in one.toml() and "h100-sxm" in one.toml().lower()
    every = ceiling.specs()
    assert len(every.devices) > 10 and every.spec is None
    assert every.to_dict() == cli_json(cli, "specs")


def test_models_matches_the_command(cli):
    catalog = ceiling.models()
    assert "llama-3-8b" in catalog.models
    assert catalog.to_dict() == cli_json(cli, "models")
    custom = "custom:layers=2,hidden=256,heads=4"
    two = ceiling.models(["llama-3-8b", custom])
    assert len(two.models) == 2 and two.heading() == "Transformer shapes"
    assert two.to_dict() == cli_json(cli, "models", "llama-3-8b", custom)


def test_simulate_matches_the_commands(cli):
    p = ceiling.simulate.pipeline(stages=4, micro_batches=8, forward="10ms,10ms,10ms,15ms")
    assert p.uneven and p.sim.makespan_s == pytest.approx(p.makespan_closed_form_s)
    args = ("simulate", "pipeline", "-p", "4", "-m", "8", "--forward", "10ms,10ms,10ms,15ms")
    assert p.to_dict() == without_plot(cli_json(cli, *args))
    interleaved = ceiling.simulate.pipeline(4, 8, "interleaved", chunks=2, forward=[1.0] * 4)
    assert interleaved.uniform
    assert interleaved.sim.bubble_fraction == pytest.approx(interleaved.bubble_formula)
    args = ("simulate", "pipeline", "--schedule", "interleaved", "-v", "2")
    assert interleaved.to_dict() == without_plot(cli_json(cli, *args))
    s = ceiling.simulate.straggler(workers=16, slow=1.3, allreduce="0.2s", jitter=0.05, seed=3)
    assert s.jitter_scan and s.sim.workers == 16
    args = ("simulate", "straggler", "-n", "16", "--slow", "1.3", "--allreduce", "0.2s")
    args += ("--jitter", "0.05", "--seed", "3")
    assert s.to_dict() == without_plot(cli_json(cli, *args))
    with pytest.raises(CeilingError, match=r"^forward needs one time or one per stage"):
        ceiling.simulate.pipeline(stages=3, forward=[1, 2])


def same_except_timings(record: dict, command: dict, fixed: tuple[str, ...]) -> None:
    """Two measured records: the same keys, and the same values where nothing was timed."""
    assert record.keys() == command.keys()
    assert {k: record[k] for k in fixed} == {k: command[k] for k in fixed}


def test_step_matches_the_command(cli):
    r = ceiling.step("mlp", workers=[0], batch=8, steps=2, threads=1)
    assert [row.workers for row in r.rows] == [0] and r.report.samples_per_step == 8
    args = ("step", "mlp", "--workers", "0", "--batch", "8", "--steps", "2", "--threads", "1")
    command = without_plot(cli_json(cli, *args))
    fixed = ("target", "device", "dtype", "samples_per_step", "slow_data", "threads", "method")
    same_except_timings(r.to_dict(), command, (*fixed, "method_version"))
    assert r.to_dict()["rows"][0].keys() == command["rows"][0].keys()
    with pytest.raises(CeilingError, match=r"^workers takes counts ≥ 0"):
        ceiling.step("mlp", workers=[-1])


def test_repeat_matches_the_command(cli):
    r = ceiling.repeat("matmul", runs=2, threads=[1], deterministic_check=False)
    assert r.identical and [g["threads"] for g in r.groups] == [1]
    args = ("repeat", "matmul", "--runs", "2", "--threads", "1", "--no-deterministic-check")
    assert r.to_dict() == cli_json(cli, *args)  # one thread, one blocking: the same bits
    with pytest.raises(CeilingError, match=r"^threads must be whole numbers ≥ 1"):
        ceiling.repeat("matmul", threads=[0])


def test_scale_matches_the_command(cli):
    settings = {"backend": "threads", "workers": [1, 2], "work_ms": 20, "steps": 2}
    r = ceiling.scale("synthetic", serial=0.2, predict=[8], **settings)
    assert [p["n"] for p in r.points] == [1, 2] and r.fit is not None
    args = ("scale", "synthetic", "--serial", "0.2", "--predict", "8", "--backend", "threads")
    command = cli_json(cli, *args, "--workers", "1,2", "--work-ms", "20", "--steps", "2")
    fixed = ("workload", "mode", "backend", "steps", "timed", "timed_note", "truth")
    same_except_timings(r.to_dict(), command, fixed)
    assert [p["n"] for p in command["points"]] == [1, 2]
    assert r.to_dict()["fit"].keys() == command["fit"].keys()
    with pytest.raises(CeilingError, match=r"^workers must be whole numbers"):
        ceiling.scale("synthetic", workers=[0, 2])
    with pytest.raises(CeilingError, match=r"^device must be auto, cpu or cuda"):
        ceiling.scale("synthetic", device="tpu")


def test_notebook_views_and_figures():
    from matplotlib.figure import Figure

    results = [
        ceiling.amdahl(0.9),
        ceiling.gustafson(0.9),
        ceiling.roofline(["matmul:1024x1024x1024"], spec="a100-80gb"),
        ceiling.decode("llama-3-8b", spec="h100-sxm"),
        ceiling.fit([1, 2, 4, 8], [10.0, 5.4, 3.1, 2.0]),
        ceiling.simulate.pipeline(stages=2, micro_batches=4),
        ceiling.simulate.straggler(workers=8),
    ]
    for r in results:
        page = r._repr_html_()
        assert page.startswith("<div") and "<table>" in page and "<td>" in page
        fig = r.figure()
        assert isinstance(fig, Figure) and fig.axes
    view = ceiling.plan("llama-3-8b", 8, spec="h100-sxm", top=1)._repr_html_()
    assert "plans" in view and "step_time_s" in view
    for r in (ceiling.specs("h100-sxm"), ceiling.models("llama-3-8b"), ceiling.info()):
        assert "<table>" in r._repr_html_()  # results without a figure still show as tables


def test_notebook_view_escapes_user_text():
    r = ceiling.fit([1, 2, 4], [3.0, 1.6, 0.9], source="<script>x</script>")
    assert "<script>" not in r._repr_html_()


@pytest.mark.parametrize(
    "call",
    [
        lambda: ceiling.amdahl(1.5),
        lambda: ceiling.amdahl(0.9, serial=0.1),
        lambda: ceiling.gustafson(0.5, ns=[0]),
        lambda: ceiling.fit([1, 2], [1.0]),
        lambda: ceiling.fit([1, 2, 4], [1.0, 0.6, 0.4], time_unit="fortnight"),
        lambda: ceiling.fit([1, 2, 4], [1.0, 0.6, 0.4], mode="diagonal"),
        lambda: ceiling.roofline(["cube:12"], spec="h100-sxm"),
        lambda: ceiling.roofline(["add:1M"], spec="no-such-gpu"),
        lambda: ceiling.decode("no-such-model", spec="h100-sxm"),
        lambda: ceiling.decode("llama-3-8b", spec="h100-sxm", batch=[0]),
        lambda: ceiling.plan("llama-3-8b", 0, spec="h100-sxm"),
        lambda: ceiling.plan("llama-3-8b", 64, spec="h100-sxm", fixed={"q": 2}),
        lambda: ceiling.bench.matmul(sizes=[0]),
        lambda: ceiling.bench.matmul(shapes=[(0, 1, 1)]),
        lambda: ceiling.bench.matmul(dtypes=["fp13"]),
        lambda: ceiling.bench.comm(device="tpu"),
        lambda: ceiling.MfuMeter(),
        lambda: ceiling.MfuMeter(peak_flops_per_s=-1, model_flops_per_step=1),
    ],
)
def test_bad_arguments_raise_one_line_errors(call):
    with pytest.raises(CeilingError) as info:
        call()
    text = str(info.value)
    assert text and "\n" not in text and "Traceback" not in text


def test_trace_result_matches_the_command(cli, tmp_path):
    from matplotlib.figure import Figure

    from test_trace_cuda import cuda_trace

    path = tmp_path / "run.json"
    path.write_text(json.dumps(cuda_trace()))
    r = ceiling.trace(path, spec="h100-sxm")
    assert r.to_dict() == cli_json(cli, "trace", path, "--spec", "h100-sxm")
    assert "<table>" in r._repr_html_()
    assert isinstance(r.figure(), Figure)


def test_dir_of_the_package_lists_its_public_names_only():
    import ceiling

    assert dir(ceiling) == sorted(ceiling.__all__)
    assert not {"importlib", "annotations", "TYPE_CHECKING", "version"} & set(dir(ceiling))
