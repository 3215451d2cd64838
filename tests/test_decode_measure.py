"""Measured decode: the comparison logic with fixed samples, and one small real run."""

import json

import pytest

from ceiling.hardware.catalog import DeviceSpec
from ceiling.measure.decode import DecodeRun, DecodeSamples, LocalCeiling, compare_decode
from ceiling.model.transformer import get_model


def _cpu(peak=100e9, bw=10e9):
    return DeviceSpec(
        key="cpu",
        name="Test CPU",
        vendor="",
        kind="cpu",
        driver_names=(),
        peak_flops_per_s={"fp32": peak},
        memory_bytes=16e9,
        memory_bandwidth_bytes_per_s=bw,
    )


def _run(model="gpt:small", times=(0.1, 0.1, 0.2)):
    cfg = get_model(model)
    return DecodeRun(
        method_version=1,
        environment={},
        model=cfg.name,
        config=cfg,
        device="cpu",
        dtype="fp32",
        context=0,
        weight_bytes=cfg.params_total * 4,
        kv_bytes_per_token=cfg.kv_bytes_per_token(4),
        samples=[DecodeSamples(1, list(times)), DecodeSamples(4, list(times))],
    )


def test_comparison_against_dram_roof():
    cfg = get_model("gpt:small")
    cmp = compare_decode(_run(), LocalCeiling(_cpu(), "test", cache_bytes=32 * 2**20))
    assert not cmp.in_cache
    r1 = cmp.rows[0]
    assert r1.step_time_s == 0.1 and r1.measured_tokens_per_s == pytest.approx(10.0)
    assert r1.best_tokens_per_s == pytest.approx(10.0)
    # only the position row in use is read; the tied table is read whole as the output head
    read = cfg.params_total - (cfg.max_seq - 1) * cfg.hidden
    bytes_step = read * 4 + cfg.kv_bytes_per_token(4)
    assert r1.ceiling_tokens_per_s == pytest.approx(10e9 / bytes_step)
    assert r1.mbu == pytest.approx(bytes_step / 0.1 / 10e9)
    assert r1.mfu == pytest.approx(cfg.flops_per_token(1) / 0.1 / 100e9)
    assert r1.share_of_ceiling == pytest.approx(10.0 / r1.ceiling_tokens_per_s)
    assert cmp.rows[1].measured_tokens_per_s == pytest.approx(40.0)


def test_weights_in_last_level_cache_leave_only_the_compute_roof():
    cfg = get_model("gpt:tiny")
    cmp = compare_decode(_run("gpt:tiny"), LocalCeiling(_cpu(), "test", cache_bytes=64 * 2**20))
    assert cmp.in_cache
    assert any("last-level cache" in n for n in cmp.notes)
    r = cmp.rows[0]
    assert r.memory_roof_tokens_per_s is None and r.bound == "compute"
    assert r.ceiling_tokens_per_s == pytest.approx(100e9 / cfg.flops_per_token(1))


def test_measured_above_the_ceiling_is_reported():
    cmp = compare_decode(_run(times=(1e-4,)), LocalCeiling(_cpu(), "test", cache_bytes=None))
    assert any("above the ceiling" in n for n in cmp.notes)


# Two fake machines: a 32 MiB L3 (Zen 4) and a 480 MiB last-level cache (a large Xeon).
# ~94 MB of fp32 weights miss the first and fit the second; the real cache is never asked.
@pytest.mark.slow
@pytest.mark.parametrize("llc_mib, in_cache", [(32, False), (480, True)])
def test_gpt_small_measured_never_exceeds_the_ceiling(
    cli, monkeypatch, tmp_path, llc_mib, in_cache
):
    pytest.importorskip("torch")
    import ceiling.measure.decode as decode_measure

    monkeypatch.setattr(decode_measure, "_cache_bytes", lambda device: float(llc_mib * 2**20))
    monkeypatch.setenv("CEILING_PROFILE", str(tmp_path / "no-profile.json"))
    code, out, err = cli("decode", "gpt:small", "--measure", "--batch", "1,4,16", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert [r["batch"] for r in data["rows"]] == [1, 4, 16]
    assert data["in_cache"] is in_cache
    assert data["cache_bytes"] == llc_mib * 2**20
    assert "no machine profile" in data["ceiling_source"]
    for r in data["rows"]:
        assert 0 < r["measured_tokens_per_s"] <= r["ceiling_tokens_per_s"]
        assert 0 < r["mbu"] <= 1 and 0 < r["mfu"] <= 1
        # plain rate keys are the measurement; the ceiling's carry the prefix
        assert r["tokens_per_s"] == r["measured_tokens_per_s"]
        assert r["tokens_per_s_per_sequence"] == pytest.approx(r["tokens_per_s"] / r["batch"])
        assert r["ceiling_tokens_per_s_per_sequence"] == pytest.approx(
            r["ceiling_tokens_per_s"] / r["batch"]
        )
    assert data["environment"]["torch"]
    assert data["method_version"] == 1


def test_measure_refuses_models_too_large_here(cli):
    pytest.importorskip("torch")
    code, _, err = cli("decode", "llama-3-405b", "--measure", "--batch", "1")
    assert code == 2 and "gpt:small" in err


def test_bad_device(cli):
    pytest.importorskip("torch")
    code, _, err = cli("decode", "gpt:tiny", "--measure", "--device", "tpu")
    assert code == 2 and "cpu or cuda" in err


@pytest.mark.gpu
def test_cuda_measured_decode_stays_under_the_datasheet(cli, monkeypatch, tmp_path):
    monkeypatch.setenv("CEILING_PROFILE", str(tmp_path / "no-profile.json"))
    code, out, err = cli(
        "decode", "gpt:small", "--measure", "--device", "cuda", "--batch", "1,16,64", "--json"
    )
    assert code == 0, err
    data = json.loads(out)
    assert data["weights_dtype"] == "bf16"
    for r in data["rows"]:
        assert 0 < r["measured_tokens_per_s"] <= r["ceiling_tokens_per_s"]


def test_local_ceiling_from_a_profile_takes_the_read_only_rate(tmp_path):
    from ceiling.hardware.profile import MachineProfile, MeasuredDevice, save_profile
    from ceiling.measure.decode import local_ceiling

    dev = MeasuredDevice(
        name="Test CPU",
        kind="cpu",
        peak_flops_per_s={"bf16": 50e9},
        bandwidth_bytes_per_s=5e9,
        extra={
            "memory": [{"kernel": "copy", "best_gbps": 5.0}, {"kernel": "dot", "best_gbps": 8.0}]
        },
    )
    path = save_profile(
        MachineProfile(1, "2026-01-01T00:00:00+00:00", "h", {}, [dev]), tmp_path / "p.json"
    )
    local = local_ceiling("cpu", path)
    assert local.spec.memory_bandwidth_bytes_per_s == 8e9
    assert local.spec.peak_flops_per_s["bf16"] == 50e9
    assert "fp32" in local.spec.peak_flops_per_s  # filled from the CPU's theoretical peak
    assert "profile" in local.source and "dot" in local.source and "theoretical" in local.source


def test_in_cache_batch_one_is_explained_by_the_cache_and_the_per_op_floor():
    from ceiling.measure.roofs import LocalRoofs
    from ceiling.render.decode_expected import why_measured_low

    cfg = get_model("gpt:tiny")
    # a 480 MiB cache read at 200 GB/s, 20 µs per op: 4 + 10 per layer ops dominate
    roofs = LocalRoofs(20e-6, "test", 480 * 2**20, 200e9)
    local = LocalCeiling(_cpu(), "test", cache_bytes=480 * 2**20)
    cmp = compare_decode(_run("gpt:tiny", times=(0.01,)), local, roofs)
    r = cmp.rows[0]
    kernels = cfg.layers * 10 + 4
    crow = cmp.ceiling.rows[0]
    memory_s = crow.bytes_per_step / 200e9
    assert r.expected_memory_s == pytest.approx(memory_s)
    assert r.expected_launch_s == pytest.approx(kernels * 20e-6)
    expected_step = max(memory_s, crow.compute_time_s) + kernels * 20e-6
    assert r.expected_tokens_per_s == pytest.approx(1 / expected_step)
    assert r.expected_limited_by == "launches"
    why = why_measured_low(cmp, roofs)
    assert why.startswith(f"batch 1 runs at {r.share_of_ceiling * 100:.1f} % of the ceiling")
    assert "per-op overhead" in why and "unexplained" in why
    bars = {b.name: b.seconds for b in r.waterfall}
    assert sum(bars.values()) == pytest.approx(0.01, abs=1e-15)  # the measured step
    assert bars["the ceiling (bytes at the roof bandwidth, FLOPs at peak)"] == pytest.approx(
        1 / r.ceiling_tokens_per_s
    )
    assert bars[f"per-op overhead ({kernels} ops × the per-op floor)"] == r.expected_launch_s
