import json

import pytest

from ceiling.errors import InvalidInput, UnsupportedOnDevice, WrongResult
from ceiling.measure import machine, matmul
from ceiling.measure.matmul import parse_shape, plan_matmul, run_matmul

ROW_KEYS = {"dtype", "m", "n", "k", "median_s", "best_s", "tflops", "peak_fraction"}


def test_small_fp32_matmul_is_checked_and_counted():
    r = run_matmul("fp32", 64, 48, 32, "cpu", warmup_ms=1, budget_ms=5, peak_flops_per_s=1e11)
    assert r.flops == 2 * 64 * 48 * 32
    assert r.rel_error < 1e-6
    assert r.best_s <= r.median_s
    row = r.row()
    assert row.keys() >= ROW_KEYS
    assert row["tflops"] == pytest.approx(r.flops / r.best_s / 1e12)
    assert row["peak_fraction"] == pytest.approx(r.flops / r.best_s / 1e11)


def test_wrong_result_is_an_error(monkeypatch):
    import torch

    def wrong(dtype):
        def call(ops):
            a, b, _, c = ops
            torch.matmul(a, b, out=c)
            c[0, 0] += 1e3  # one corrupted element
            return c

        return call

    monkeypatch.setattr(matmul, "_make_call", wrong)
    with pytest.raises(WrongResult, match="relative error"):
        run_matmul("fp32", 32, 32, 32, "cpu", warmup_ms=1, budget_ms=2)


def test_cpu_has_no_tf32_or_fp8():
    with pytest.raises(UnsupportedOnDevice, match="tf32"):
        run_matmul("tf32", 16, 16, 16, "cpu")
    with pytest.raises(UnsupportedOnDevice, match=r"8\.9"):
        run_matmul("fp8", 16, 16, 16, "cpu")


def test_default_plan_skips_non_native_with_reason(monkeypatch):
    native = {"fp64": True, "fp32": True, "bf16": False, "fp16": False}
    monkeypatch.setattr(machine, "native_dtypes", lambda device: native)
    plan = plan_matmul("cpu", quick=True)
    assert [d for d, _, _ in plan.runs] == ["fp64", "fp32"]
    assert "not native" in plan.skipped["bf16"] and "--dtype bf16" in plan.skipped["bf16"]
    assert set(plan.skipped) == {"tf32", "bf16", "fp16", "fp8"}


def test_explicit_non_native_runs_small(monkeypatch):
    monkeypatch.setattr(machine, "native_dtypes", lambda device: {"fp32": True})
    plan = plan_matmul("cpu", ["bf16"])
    ((dtype, shapes, native),) = plan.runs
    assert dtype == "bf16" and not native
    ((m, n, k),) = shapes
    assert m == n == k and 128 <= m <= matmul.NON_NATIVE_MAX_SIZE
    # A size the user names is respected.
    plan = plan_matmul("cpu", ["bf16"], sizes=[96])
    assert plan.runs[0][1] == [(96, 96, 96)]


def test_shapes_and_sizes_combine():
    plan = plan_matmul("cpu", ["fp32"], sizes=[64], shapes=[(8, 16, 32)])
    assert plan.runs[0][1] == [(8, 16, 32), (64, 64, 64)]


@pytest.mark.parametrize("text", ["4096x4096", "axbxc", "0x4x4", "1x2x3x4"])
def test_bad_shapes(text):
    with pytest.raises(InvalidInput):
        parse_shape(text)


def test_cli_json_rows(cli):
    code, out, _ = cli("bench", "matmul", "--dtype", "fp32", "--sizes", "64", "--json")
    assert code == 0
    data = json.loads(out)
    (row,) = data["matmul"]
    assert row.keys() >= ROW_KEYS
    assert (row["dtype"], row["m"], row["n"], row["k"]) == ("fp32", 64, 64, 64)
    assert row["rel_error"] < 1e-5
    assert data["method_version"] >= 1 and data["environment"]["torch"]
    peak = machine.datasheet_peaks("cpu").get("fp32")
    if peak:
        assert row["peak_fraction"] == pytest.approx(row["tflops"] * 1e12 / peak)


def test_cli_not_native_line(cli, monkeypatch):
    monkeypatch.setattr(machine, "native_dtypes", lambda device: {"fp32": True, "fp64": True})
    code, out, _ = cli("bench", "matmul", "--dtype", "bf16", "--sizes", "64")
    assert code == 0
    assert "bf16: not native here" in out


@pytest.mark.parametrize(
    "args", [["--dtype", "fp128"], ["--shape", "3x4"], ["--sizes", "12,x"], ["--dtype", "tf32"]]
)
def test_cli_bad_input(cli, args):
    code, out, err = cli("bench", "matmul", "--sizes", "32", *args)
    if args == ["--dtype", "tf32"]:  # on a CPU: skipped with a reason, not an error
        assert code == 0 and "tf32: skipped" in out
        return
    assert code == 2 and err.startswith("error: ")


def test_rate_above_the_peak_is_flagged_not_hidden():
    # a peak of 1 FLOP/s is certainly below the measured rate: the clock behind it is wrong
    r = run_matmul("fp32", 32, 32, 32, budget_ms=20, warmup_ms=5, peak_flops_per_s=1.0)
    assert r.peak_fraction > 1
    assert any("above the peak" in n for n in r.notes)
    clock_hz = getattr(machine.cpu_info(), "freq_hz", None)
    if clock_hz:
        # the lowest clock consistent with the rate, at the FLOPs/cycle the peak assumes
        assert r.implied_clock_hz == pytest.approx(clock_hz * r.best_flops_per_s / 1.0)
        assert r.row()["implied_clock_hz"] == r.implied_clock_hz
    honest = run_matmul("fp32", 32, 32, 32, budget_ms=20, warmup_ms=5, peak_flops_per_s=1e18)
    assert not any("above the peak" in n for n in honest.notes)


def test_fp8_operands_have_the_layouts_scaled_mm_needs():
    import torch

    ops = matmul._operands("fp8", 32, 48, 64, "cpu", torch.Generator().manual_seed(0))
    a, b, scale, _ = ops
    assert a.dtype == b.dtype == torch.float8_e4m3fn
    assert a.is_contiguous() and b.shape == (64, 48)
    assert b.stride() == (1, 64)  # B column-major: its transpose is row-major
    assert scale.dtype == torch.float32 and scale.numel() == 1
    try:
        c = matmul._make_call("fp8")(ops)
    except (RuntimeError, NotImplementedError):
        pytest.skip("this torch has no CPU _scaled_mm")
    assert c.dtype == torch.bfloat16 and c.shape == (32, 48)
    assert matmul.relative_error("fp8", ops, c) < matmul.TOLERANCE["fp8"]


def test_too_large_a_matmul_is_refused_before_allocating(cli):
    code, _out, err = cli("bench", "matmul", "--dtype", "fp32", "--sizes", "200000")
    assert code == 2 and "needs" in err and "GiB" in err and err.count("\n") == 1


@pytest.mark.parametrize("sizes", ["abc", "0", ",", "12.5", "1e400", "-4"])
def test_bad_sizes_are_one_line(cli, sizes):
    code, _, err = cli("bench", "matmul", "--sizes", sizes)
    assert code == 2 and err.startswith("error: --sizes") and err.count("\n") == 1


def test_float32_precision_setting_is_restored():
    import torch

    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("medium")
        run_matmul("fp32", 32, 32, 32, "cpu", warmup_ms=1, budget_ms=2)
        assert torch.get_float32_matmul_precision() == "medium"
    finally:
        torch.set_float32_matmul_precision(before)


def test_per_backend_tf32_setting_of_the_caller_is_respected_and_restored():
    import torch

    matmul_backend = torch.backends.cuda.matmul
    if not hasattr(matmul_backend, "fp32_precision"):
        pytest.skip("this torch has only the global float32 precision setting")
    before = matmul_backend.fp32_precision
    try:
        # torch refuses the global read once this is set; a run must still work
        matmul_backend.fp32_precision = "tf32"
        r = run_matmul("fp32", 32, 32, 32, "cpu", warmup_ms=1, budget_ms=2)
        assert r.rel_error < 1e-6
        assert matmul_backend.fp32_precision == "tf32"
    finally:
        matmul_backend.fp32_precision = before
