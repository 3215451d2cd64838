import json

import pytest

from ceiling.measure import suite


def test_transfer_is_skipped_on_cpu(cli):
    code, out, _ = cli("bench", "transfer", "--device", "cpu", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["transfer"] == [] and "CUDA" in data["transfer_skipped"]
    code, out, _ = cli("bench", "transfer", "--device", "cpu")
    assert "transfer: skipped" in out


def test_overhead_json(cli):
    code, out, _ = cli("bench", "overhead", "--quick", "--device", "cpu", "--json")
    assert code == 0
    o = json.loads(out)["overhead"]
    assert o["tiny_op_s"] > 0 and o["loop_elements"] == 1_000_000
    assert o["loop_vs_vectorized"] == pytest.approx(o["loop_s"] / o["vectorized_s"])
    assert any("scaled" in n for n in o["notes"])
    assert o["crossovers"] == []
    # a new buffer's first touch and the elementwise functions' cost, kept raw
    assert len(o["first_touch"]["fresh_s"]) == len(o["first_touch"]["sizes_bytes"]) > 1
    assert o["first_touch_s_per_byte"] >= 0 and o["functions"]["best_s"]["gelu[tanh]"] > 0


def test_unknown_device(cli):
    code, _, err = cli("bench", "memory", "--device", "tpu")
    assert code == 2 and err.startswith("error: ")


def test_ctrl_c_keeps_what_finished(monkeypatch):
    def fake_matmul(report, **kwargs):
        report.matmul_skipped["fp8"] = "done before the interrupt"

    def interrupted(report, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(suite, "bench_matmul", fake_matmul)
    monkeypatch.setattr(suite, "bench_memory", interrupted)
    report = suite.run_all("cpu", quick=True)
    assert report.interrupted
    assert report.matmul_skipped == {"fp8": "done before the interrupt"}
    assert report.overhead is None


@pytest.mark.slow
def test_quick_bench_writes_profiles(cli, tmp_path, monkeypatch):
    default = tmp_path / "default.json"
    monkeypatch.setenv("CEILING_PROFILE", str(default))
    extra = tmp_path / "extra.json"
    code, out, _ = cli("bench", "--quick", "--save", str(extra), "--json")
    assert code == 0
    data = json.loads(out)
    assert data["profile_saved_to"] == [str(default), str(extra)]
    for path in (default, extra):
        profile = json.loads(path.read_text())
        assert profile["method_version"] >= 1
        assert profile["environment"]["torch"] and profile["environment"]["blas"]
        (dev,) = profile["devices"]
        assert dev["kind"] == "cpu"
        assert dev["peak_flops_per_s"]["fp32"] > 0
        assert dev["bandwidth_bytes_per_s"] > 0
        # each device keeps the environment it was measured in
        assert dev["extra"]["environment"]["device"] == "cpu"
        best_fp32 = max(r["tflops"] for r in data["matmul"] if r["dtype"] == "fp32")
        assert dev["peak_flops_per_s"]["fp32"] == pytest.approx(best_fp32 * 1e12)


def test_interrupted_run_keeps_earlier_figures(monkeypatch):
    from ceiling.hardware.profile import MachineProfile, MeasuredDevice

    report = suite.new_report("cpu", quick=True)
    report.interrupted = True  # stopped before any matmul or memory result
    old = MeasuredDevice(
        name=report.device_name,
        kind="cpu",
        peak_flops_per_s={"fp32": 1e11},
        bandwidth_bytes_per_s=2e10,
    )
    other = MeasuredDevice(
        name="Some GPU", kind="cuda", peak_flops_per_s={"bf16": 1e15}, bandwidth_bytes_per_s=3e12
    )
    previous = MachineProfile(1, "t", "h", {}, [other, old])
    profile = suite.build_profile(report, previous)
    assert [d.name for d in profile.devices] == ["Some GPU", report.device_name]
    assert profile.devices[1].peak_flops_per_s == {"fp32": 1e11}
    assert profile.devices[1].bandwidth_bytes_per_s == 2e10


def test_unwritable_save_path_fails_before_measuring(cli, monkeypatch, tmp_path):
    def never(*args, **kwargs):
        raise AssertionError("measured although the result could not be saved")

    monkeypatch.setattr(suite, "run_all", never)
    monkeypatch.setenv("CEILING_PROFILE", str(tmp_path / "p.json"))
    blocker = tmp_path / "file"
    blocker.write_text("x")
    for target in (blocker / "p.json", tmp_path):
        code, _out, err = cli("bench", "--quick", "--save", str(target))
        assert code == 2 and err.startswith("error: cannot write") and err.count("\n") == 1


def test_device_copy_counts_read_and_write():
    from ceiling.measure.stats import summarize
    from ceiling.measure.transfer import TransferResult

    d2d = TransferResult("d2d", "device", 1000, [1e-6], summarize([1e-6]))
    h2d = TransferResult("h2d", "pinned", 1000, [1e-6], summarize([1e-6]))
    assert d2d.best_gbps == pytest.approx(1.0) and d2d.best_traffic_gbps == pytest.approx(2.0)
    assert h2d.best_traffic_gbps == pytest.approx(h2d.best_gbps)
    assert d2d.row()["best_traffic_gbps"] == pytest.approx(2.0)


def test_planned_steps_match_the_progress_calls(monkeypatch):
    from ceiling.measure import machine

    monkeypatch.setattr(machine, "native_dtypes", lambda device: {"fp32": True})
    report = suite.new_report("cpu", quick=True)
    calls = []
    suite.bench_matmul(report, sizes=[32, 48], budgets=suite.QUICK, progress=calls.append)
    # one step per shape: torch's matmul and numpy's BLAS beside it, in alternating rounds
    assert suite.planned_steps(report, ("matmul",), sizes=[32, 48]) == len(calls) == 2
    assert calls[0] == "matmul fp32 32x32x32 beside numpy's BLAS"
    assert len(report.matmul_blas[0].round_ratios) == suite.BLAS_ROUNDS
    assert suite.planned_steps(report, ("matmul",), dtypes=["FP32", "bf16"], sizes=[32]) == 2
    assert suite.planned_steps(report, ("memory", "overhead", "transfer")) == 5 + 1 + 1
