import json

import pytest

from ceiling.errors import InvalidInput, MalformedFile
from ceiling.hardware.profile import (
    MachineProfile,
    MeasuredDevice,
    default_profile_path,
    load_profile,
    save_profile,
)
from ceiling.hardware.resolve import resolve_device


def _profile() -> MachineProfile:
    cpu = MeasuredDevice(
        name="AMD EPYC",
        kind="cpu",
        peak_flops_per_s={"fp32": 2.0e11, "fp64": 1.0e11},
        bandwidth_bytes_per_s=2.0e10,
        datasheet_peak_flops_per_s={"fp32": 3.3e11},
        memory_bytes=24e9,
        vendor="amd",
        extra={"matmul": [{"dtype": "fp32", "m": 1024}]},
    )
    return MachineProfile(1, "2026-01-01T00:00:00+00:00", "box", {"torch": "2.13.0"}, [cpu])


def test_round_trip_is_atomic_and_exact(tmp_path):
    path = tmp_path / "sub" / "p.json"
    save_profile(_profile(), path)
    assert list(path.parent.iterdir()) == [path]  # no temp file left behind
    data = json.loads(path.read_text())
    assert data["method_version"] == 1
    assert data["devices"][0]["peak_flops_per_s"] == {"fp32": 2.0e11, "fp64": 1.0e11}
    assert data["devices"][0]["bandwidth_bytes_per_s"] == 2.0e10
    assert load_profile(path) == _profile()


def test_default_path(monkeypatch, tmp_path):
    monkeypatch.setenv("CEILING_PROFILE", str(tmp_path / "x.json"))
    assert default_profile_path() == tmp_path / "x.json"
    monkeypatch.delenv("CEILING_PROFILE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    p = default_profile_path()
    assert p.parent == tmp_path / "ceiling" and p.name.startswith("profile-")


def test_as_spec_carries_measured_figures(tmp_path):
    spec = _profile().devices[0].as_spec()
    assert spec.kind == "cpu"
    assert spec.peak("fp32") == 2.0e11
    assert spec.memory_bandwidth_bytes_per_s == 2.0e10


def test_resolve_prefers_spec_then_profile(tmp_path, monkeypatch):
    path = tmp_path / "p.json"
    save_profile(_profile(), path)
    assert resolve_device(profile=path).peak("fp32") == 2.0e11
    monkeypatch.setenv("CEILING_PROFILE", str(path))
    assert resolve_device().memory_bandwidth_bytes_per_s == 2.0e10  # no cuda: falls to cpu
    assert resolve_device(spec="h100-sxm").kind == "gpu"
    with pytest.raises(InvalidInput, match="not both"):
        resolve_device(spec="h100-sxm", profile=path)


def test_resolve_without_anything_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("CEILING_PROFILE", str(tmp_path / "missing.json"))
    with pytest.raises(InvalidInput, match="ceiling bench --quick"):
        resolve_device()


@pytest.mark.parametrize("text", ["not json", "[1, 2]", '{"devices": []}', '{"method_version": 1}'])
def test_malformed_files(tmp_path, text):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(MalformedFile):
        load_profile(path)


def test_bad_device_record():
    with pytest.raises(InvalidInput):
        MeasuredDevice(name="x", kind="tpu", peak_flops_per_s={}, bandwidth_bytes_per_s=None)
    with pytest.raises(InvalidInput):
        MeasuredDevice(
            name="x", kind="cpu", peak_flops_per_s={"fp32": 0.0}, bandwidth_bytes_per_s=1
        )


def test_profile_from_a_newer_method_is_refused_naming_both_versions(tmp_path):
    from ceiling.hardware.profile import METHOD_VERSION

    data = _profile().to_json()
    data["devices"][0]["fields_added_later"] = {"x": 1}  # ignored, not a failure
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    assert load_profile(path).devices[0].peak_flops_per_s == {"fp32": 2.0e11, "fp64": 1.0e11}
    # a method this build does not know measured differently: its numbers are not used
    data["method_version"] = 99
    path.write_text(json.dumps(data))
    with pytest.raises(MalformedFile, match=f"method 99; .* up to {METHOD_VERSION}"):
        load_profile(path)


def test_cli_reads_a_malformed_profile_in_one_line(cli, tmp_path):
    path = tmp_path / "p.json"
    path.write_text('{"method_version": 1, "created": "x", "host": "h", "devices": [{"name": 1}]}')
    code, out, err = cli("roofline", "--profile", str(path), "--op", "add:100")
    assert code == 2 and out == "" and err.startswith("error: ") and err.count("\n") == 1
