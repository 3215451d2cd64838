"""One device rule for every command: --spec, else --profile, else the saved profile;
both together refused in the same words; every output says which device source it used."""

import json

import pytest

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
