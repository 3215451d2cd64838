import json

import pytest

from ceiling.hardware.profile import MachineProfile, MeasuredDevice, save_profile

PEAK = 1.0e11  # fp32 FLOP/s
BW = 2.0e10  # bytes/s -> ridge 5 FLOP/byte


@pytest.fixture
def profile(tmp_path, monkeypatch):
    cpu = MeasuredDevice(
        name="Test CPU",
        kind="cpu",
        peak_flops_per_s={"fp32": PEAK, "fp64": PEAK / 2},
        bandwidth_bytes_per_s=BW,
        datasheet_peak_flops_per_s={"fp32": 1.5 * PEAK},
    )
    path = tmp_path / "profile.json"
    save_profile(MachineProfile(1, "2026-01-01T00:00:00+00:00", "h", {}, [cpu]), path)
    monkeypatch.setenv("CEILING_PROFILE", str(path))
    return path


def test_acceptance_ops_classified(cli, profile):
    code, out, _ = cli(
        "roofline",
        "--op",
        "add:100000000",
        "--op",
        "matvec:8192",
        "--op",
        "matmul:4096x4096x4096",
        "--json",
    )
    assert code == 0
    data = json.loads(out)
    assert data["ridge_flops_per_byte"] == pytest.approx(PEAK / BW)
    assert data["profile"] == str(profile)
    rows = data["ops"]
    assert [r["bound"] for r in rows] == ["memory", "memory", "compute"]
    assert rows[0]["intensity_flops_per_byte"] == pytest.approx(1 / 12)
    assert rows[1]["intensity_flops_per_byte"] == pytest.approx(0.5, rel=1e-3)
    assert rows[2]["intensity_flops_per_byte"] == pytest.approx(4096 / 6)
    # add: 1.2e9 bytes at 2e10 B/s = 60 ms; matmul: 2*4096^3 FLOP at 1e11 = 1.374 s
    assert rows[0]["predicted_s"] == pytest.approx(0.06)
    assert rows[2]["predicted_s"] == pytest.approx(2 * 4096**3 / PEAK)
    assert rows[0]["attainable_flops_per_s"] == pytest.approx(BW / 12)


def test_spec_and_attention(cli, profile):
    code, out, _ = cli(
        "roofline",
        "--spec",
        "h100-sxm",
        "--dtype",
        "bf16",
        "--op",
        "attention:1,32,4096,128",
        "--json",
    )
    assert code == 0
    data = json.loads(out)
    assert data["source"] == "datasheet"
    naive, fused = data["ops"]
    assert naive["flops"] == fused["flops"]
    assert naive["bytes"] > 10 * fused["bytes"]
    assert (naive["bound"], fused["bound"]) == ("memory", "compute")


def test_measure_small_ops(cli, profile):
    code, out, _ = cli(
        "roofline", "--op", "add:100000", "--op", "matmul:64x64x64", "--measure", "--json"
    )
    assert code == 0
    for row in json.loads(out)["ops"]:
        assert row["measured_s"] > 0
        assert row["predicted_over_measured"] == pytest.approx(
            row["predicted_s"] / row["measured_s"]
        )
        assert row["within_30pct"] == (1 / 1.3 <= row["predicted_over_measured"] <= 1.3)


def test_plot_and_table(cli, profile, tmp_path):
    fig = tmp_path / "roof.png"
    code, out, _ = cli("roofline", "--op", "matvec:1024", "--plot", str(fig))
    assert code == 0
    text = " ".join(out.split())  # a long temporary path wraps the lines differently
    assert "ridge point 5 FLOP/byte" in text and "memory" in text
    assert fig.stat().st_size > 5000


def test_no_profile_says_what_to_do(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("CEILING_PROFILE", str(tmp_path / "none.json"))
    code, _, err = cli("roofline", "--op", "add:10")
    assert code == 2
    assert "ceiling bench --quick" in err and err.count("\n") == 1


@pytest.mark.parametrize(
    "args",
    [
        ["--op", "conv:3"],
        ["--op", "add:0"],
        ["--dtype", "fp128"],
        ["--dtype", "fp16"],
        ["--op", "add:1e400"],
        # far too large to allocate, or to time in a reasonable while
        ["--op", "add:1e13", "--measure"],
        ["--op", "matmul:65536x65536x65536", "--measure"],
    ],
)
def test_bad_input(cli, profile, args):
    code, _, err = cli("roofline", *args)
    assert code == 2 and err.startswith("error: ")


def test_measure_with_a_gpu_spec_needs_that_gpu(cli, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    # A datasheet prediction for an H100 is never set beside a CPU's timing.
    code, out, err = cli("roofline", "--spec", "h100-sxm", "--op", "add:1000", "--measure")
    assert code == 2 and "no CUDA device" in err and out == ""
