import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

from ceiling.hardware import cpu as cpu_module
from ceiling.hardware import gpu as gpu_module
from ceiling.hardware.cpu import detect_linux
from ceiling.hardware.gpu import gpu_info_from_properties

OLD_AVX2_CPU = """\
processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 63
model name\t: Intel(R) Xeon(R) CPU E5-2680 v3 @ 2.50GHz
flags\t\t: fpu sse2 avx fma avx2 f16c
"""

H100_PROPS = SimpleNamespace(
    name="NVIDIA H100 80GB HBM3",
    multi_processor_count=132,
    total_memory=85_520_809_984,
    L2_cache_size=52_428_800,
    major=9,
    minor=0,
)


def test_specs_h100_json(cli):
    code, out, _ = cli("specs", "h100-sxm", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["peak_flops_per_s"]["bf16"] == pytest.approx(989e12, rel=0.01)
    assert data["peak_flops_per_s"]["fp8"] == pytest.approx(1979e12, rel=1e-3)
    assert data["memory_bandwidth_bytes_per_s"] == pytest.approx(3.35e12)
    assert data["memory_gib"] == 80 and data["memory_gb"] == pytest.approx(85.9, abs=0.05)
    assert "nvidia.com" in data["source"]


def test_specs_by_driver_name(cli):
    code, out, _ = cli("specs", "NVIDIA A100-SXM4-80GB", "--json")
    assert code == 0
    assert json.loads(out)["key"] == "a100-80gb"


def test_specs_unknown_is_one_line_exit_2(cli):
    code, out, err = cli("specs", "nosuchgpu")
    assert code == 2
    assert out == ""
    assert err.startswith("error: unknown device 'nosuchgpu'")
    assert err.count("\n") == 1


def test_specs_lists_every_entry_with_a_source(cli):
    code, out, _ = cli("specs", "--json")
    assert code == 0
    devices = json.loads(out)["devices"]
    assert len(devices) >= 17
    assert all(d["source"].count("http") >= 1 for d in devices)
    code, out, _ = cli("specs")
    assert code == 0
    for key in ("h100-sxm", "mi300x", "tpu-v5e"):
        assert key in out
    assert "GiB" in out and "GB" in out and "TB/s" in out
    assert "989.5" in out  # h100 dense bf16 in TFLOP/s


def test_info_json_has_cores_peaks_and_native_flags(cli):
    code, out, _ = cli("info", "--json")
    assert code == 0
    data = json.loads(out)
    cpu = data["cpu"]
    assert isinstance(cpu["cores"], int) and cpu["cores"] >= 1
    assert set(cpu["native"]) >= {"fp32", "bf16", "fp16"}
    if cpu["freq_hz"] is not None:
        assert set(cpu["peak_flops_per_s"]) == set(cpu["native"])
        assert cpu["peak_flops_per_s"]["fp32"] > 0
    assert isinstance(data["gpus"], list)


def test_info_says_plainly_when_bf16_is_emulated(cli, tmp_path, monkeypatch):
    fake = detect_linux(
        OLD_AVX2_CPU,
        cpu_dir=tmp_path,
        usable_cpus={0, 1},
        arch="x86_64",
        memory_bytes=16 * 2**30,
        cgroup_dir=tmp_path,
        use_psutil=False,
    )
    monkeypatch.setattr(cpu_module, "detect_cpu", lambda: fake)
    code, out, _ = cli("info")
    assert code == 0
    flat = " ".join(out.split())
    assert "bf16 matmul runs in emulation here, often hundreds of times slower than fp32" in flat
    assert "AVX512_BF16 no" in flat and "AVX2+FMA yes" in flat
    assert "GiB" in flat
    code, out, _ = cli("info", "--json")
    data = json.loads(out)["cpu"]
    assert data["native"]["bf16"] is False
    assert "emulation" in data["not_native_why"]["bf16"]
    assert data["peak_flops_per_s"]["fp32"] == 2 * 2.5e9 * 32


def test_gpu_matched_to_catalog():
    g = gpu_info_from_properties(0, H100_PROPS)
    assert g.catalog_key == "h100-sxm"
    assert (g.sms, g.l2_bytes, g.compute_capability) == (132, 52_428_800.0, "9.0")
    unknown = gpu_info_from_properties(1, SimpleNamespace(name="Mystery GPU", total_memory=1))
    assert unknown.catalog is None and unknown.sms is None


def test_info_shows_gpus(cli, monkeypatch):
    monkeypatch.setattr(
        gpu_module, "detect_gpus", lambda: [gpu_info_from_properties(0, H100_PROPS)]
    )
    code, out, _ = cli("info", "--json")
    assert code == 0
    gpus = json.loads(out)["gpus"]
    if not gpus:  # torch not importable: info skips GPU detection
        pytest.skip("torch is not importable here")
    assert gpus[0]["catalog_key"] == "h100-sxm"
    assert gpus[0]["catalog_peak_flops_per_s"]["bf16"] == pytest.approx(989.5e12)


def test_specs_does_not_import_torch():
    code = (
        "import sys\n"
        "from ceiling.cli.app import main\n"
        "main(['specs', 'h100-sxm', '--json'])\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.gpu
def test_real_gpus_detected_and_described():
    gpus = gpu_module.detect_gpus()
    assert gpus
    for g in gpus:
        assert g.name and g.sms and g.sms > 0
        assert g.memory_bytes > 2**30


def test_a_measured_rate_above_the_peak_bounds_the_clock(cli, tmp_path, monkeypatch):
    from ceiling.hardware.cpu import detect_cpu
    from ceiling.hardware.profile import MachineProfile, MeasuredDevice, save_profile

    cpu = detect_cpu()
    if not cpu.freq_hz or not cpu.peak_flops_per_s.get("fp32"):
        pytest.skip("no readable clock here")
    path = tmp_path / "p.json"
    dev = MeasuredDevice(
        name=cpu.model,
        kind="cpu",
        peak_flops_per_s={"fp32": 1.5 * cpu.peak_flops_per_s["fp32"]},
        bandwidth_bytes_per_s=1e10,
    )
    save_profile(MachineProfile(2, "x", "h", {}, [dev]), path)
    monkeypatch.setenv("CEILING_PROFILE", str(path))
    code, out, _ = cli("info", "--json")
    m = json.loads(out)["cpu"]["measured_vs_peak"]
    assert code == 0 and m["peak_fraction"]["fp32"] == pytest.approx(1.5)
    assert m["implied_min_clock_hz"] == pytest.approx(1.5 * cpu.freq_hz)
    code, out, _ = cli("info")
    assert "rate is above the peak" in " ".join(out.split())  # whatever the line wrapping
    monkeypatch.setenv("CEILING_PROFILE", str(tmp_path / "none.json"))
    code, out, _ = cli("info", "--json")
    assert json.loads(out)["cpu"]["measured_vs_peak"] is None
