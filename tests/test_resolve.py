"""One device rule for every command: --spec, else --profile, else the saved profile;
both together refused in the same words; every output says which device source it used."""

import json

import pytest

from ceiling.errors import InvalidInput
from ceiling.hardware.profile import MachineProfile, MeasuredDevice, save_profile
from ceiling.hardware.resolve import resolve

COMMANDS = {
    "report": ["report", "--only", "planner"],
    "trace": ["trace", "tests/data/traces-real/alexnet_a100_nosteps.json.gz"],
    "plan": ["plan", "llama-2-7b", "-n", "16", "-k", "1"],
    "decode": ["decode", "llama-2-7b", "--batch", "1"],
    "roofline": ["roofline", "--op", "matmul:256x256x256", "--dtype", "bf16"],
    "profile": ["profile", "gpt:tiny", "--device", "meta"],
}


@pytest.fixture
def h100_profile(tmp_path):
    device = MeasuredDevice(
        name="NVIDIA H100 80GB HBM3",
        kind="cuda",
        peak_flops_per_s={"bf16": 700e12, "fp32": 50e12},
        bandwidth_bytes_per_s=2.9e12,
    )
    path = tmp_path / "profile.json"
    save_profile(MachineProfile(1, "2026-01-01T00:00:00Z", "node0", {}, [device]), path)
    return path


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_spec_and_profile_together_are_refused_alike(cli, name, h100_profile):
    code, out, err = cli(*COMMANDS[name], "--spec", "h100-sxm", "--profile", h100_profile)
    assert code == 2 and out == ""
    assert err.strip() == (
        "error: give --spec or --profile, not both: --spec is a datasheet, --profile a measurement"
    )


def test_the_rule_names_its_source(h100_profile, monkeypatch):
    assert resolve("h100-sxm").source == "datasheet spec h100-sxm"
    measured = resolve(profile=h100_profile)
    assert measured.source == f"measured profile {h100_profile}" and measured.from_profile
    assert measured.spec.peak("bf16") == 700e12
    monkeypatch.setenv("CEILING_PROFILE", str(h100_profile))
    assert resolve().profile_path == h100_profile  # neither given: the saved profile


def test_outputs_say_which_device_they_used(cli, h100_profile):
    def run(*args):
        code, out, err = cli(*args, "--json")
        assert code == 0, err
        return json.loads(out)

    plan = run(*COMMANDS["plan"], "--profile", h100_profile)
    assert plan["cluster"]["device_source"] == f"measured profile {h100_profile}"
    assert run(*COMMANDS["plan"], "--spec", "h100-sxm")["cluster"]["device_source"] == (
        "datasheet spec h100-sxm"
    )
    decode = run(*COMMANDS["decode"], "--profile", h100_profile)
    assert decode["device_source"] == f"measured profile {h100_profile}"
    roof = run(*COMMANDS["roofline"], "--profile", h100_profile)
    assert roof["source"] == "profile" and roof["peak_flops_per_s"] == 700e12


def test_one_machine_for_every_source(h100_profile, monkeypatch):
    from ceiling.hardware import resolve as r

    sheet = r.resolve("h100-sxm")
    assert sheet.datasheet is sheet.spec and not sheet.from_profile
    assert sheet.datasheet_peak("bf16") == 989.5e12 and sheet.measured_peak("bf16") is None
    # a profile: its measured rates are the roof, the catalog entry of its GPU the datasheet
    measured = r.resolve(profile=h100_profile)
    assert measured.spec.peak("bf16") == 700e12 and measured.datasheet.key == "h100-sxm"
    assert measured.datasheet_peak("bf16") == 989.5e12  # MFU's peak, never the measured one
    assert measured.matmul_efficiency("bf16") == pytest.approx(700e12 / 989.5e12)
    assert measured.memory_efficiency == pytest.approx(2.9e12 / 3.35e12)
    peaks = measured.record()["peak_flops_per_s"]
    assert peaks["bf16"] == {"datasheet": 989.5e12, "measured": 700e12}
    assert peaks["fp8"] == {"datasheet": 1979e12, "measured": None}
    # a driver's name, and a trace's device properties
    assert r.by_driver_name("NVIDIA H100 80GB HBM3").key == "h100-sxm"
    assert r.by_driver_name("") is None and r.by_driver_name("Nonesuch GPU") is None
    traced, how = r.from_trace({"name": "NVIDIA H100 80GB HBM3"})
    assert traced.spec.key == "h100-sxm" and traced.source.endswith(how)
    assert r.from_trace({"name": "Nonesuch"}) == (None, "")
    # this machine: the profile of its kind, else the GPU's datasheet, else the CPU's theory
    assert r.this_machine("cuda", h100_profile).from_profile
    monkeypatch.setenv("CEILING_PROFILE", str(h100_profile.parent / "none.json"))
    here = r.this_machine("cuda", gpu_name="NVIDIA H100 80GB HBM3")
    assert here.spec.key == "h100-sxm" and "no machine profile" in here.source
    cpu = r.this_machine("cpu", read_bandwidth=lambda: 5e9)
    assert cpu.kind == "cpu" and cpu.bandwidth_bytes_per_s == 5e9
    assert cpu.datasheet_peaks == cpu.spec.peak_flops_per_s  # the theoretical peak
    with pytest.raises(InvalidInput, match="Nonesuch GPU is not in the catalog"):
        r.this_machine("cuda", gpu_name="Nonesuch GPU")
