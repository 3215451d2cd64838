"""CPU peak arithmetic from fixed cpuinfo texts and a fake sysfs tree, plus one real smoke test."""

import pytest

from ceiling.hardware.cpu import (
    detect_cpu,
    detect_linux,
    parse_cache_size,
    parse_cpuinfo,
)
from ceiling.hardware.simd import CPU_DTYPES, CpuIdentity, peak_flops_per_s, vector_model

SAPPHIRE_RAPIDS = """\
processor\t: {n}
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 143
model name\t: Intel(R) Xeon(R) Platinum 8480+
core id\t\t: {core}
physical id\t: 0
cpu MHz\t\t: 2000.000
flags\t\t: fpu sse sse2 avx fma avx2 f16c avx512f avx512_bf16 avx512_fp16 avx512_vnni \
amx_bf16 amx_tile amx_int8
"""

ZEN4 = """\
processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 17
model name\t: AMD EPYC 9654 96-Core Processor
cpu MHz\t\t: 2400.000
flags\t\t: fpu sse2 avx fma avx2 f16c avx512f avx512dq avx512_bf16 avx512_vnni hypervisor
"""

HASWELL = """\
processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 63
model name\t: Intel(R) Xeon(R) CPU E5-2680 v3 @ 2.50GHz
cpu MHz\t\t: 1200.000
flags\t\t: fpu sse sse2 avx fma avx2 f16c
"""

NEOVERSE_N1 = """\
processor\t: 0
BogoMIPS\t: 243.75
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimddp
CPU implementer\t: 0x41
CPU architecture: 8
CPU part\t: 0xd0c
"""


def make_sysfs(root, cores_of_cpu, max_khz=None, caches=None):
    """A /sys/devices/system/cpu look-alike: topology, caches of cpu0, optional cpufreq."""
    for cpu, core in enumerate(cores_of_cpu):
        topo = root / f"cpu{cpu}" / "topology"
        topo.mkdir(parents=True)
        (topo / "core_id").write_text(f"{core}\n")
        (topo / "physical_package_id").write_text("0\n")
    caches = caches or [(1, "Data", "48K"), (1, "Instruction", "32K"), (2, "Unified", "2048K")]
    caches = [*caches, (3, "Unified", "107520K")]
    for i, (level, kind, size) in enumerate(caches):
        d = root / "cpu0" / "cache" / f"index{i}"
        d.mkdir(parents=True)
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    if max_khz:
        freq = root / "cpu0" / "cpufreq"
        freq.mkdir(parents=True)
        (freq / "cpuinfo_max_freq").write_text(f"{max_khz}\n")
    return root


def _detect(tmp_path, text, cores_of_cpu, max_khz=None, cgroup_text=None):
    cgroup = tmp_path / "cgroup"
    cgroup.mkdir()
    if cgroup_text:
        (cgroup / "cpu.max").write_text(cgroup_text)
    sysfs = make_sysfs(tmp_path / "cpu", cores_of_cpu, max_khz)
    return detect_linux(
        text,
        cpu_dir=sysfs,
        usable_cpus=set(range(len(cores_of_cpu))),
        arch="x86_64" if "vendor_id" in text else "aarch64",
        memory_bytes=64 * 2**30,
        cgroup_dir=cgroup,
        use_psutil=False,
    )


def test_sapphire_rapids_with_smt_and_max_clock(tmp_path):
    text = "\n".join(SAPPHIRE_RAPIDS.format(n=n, core=n // 2) for n in range(4))
    cpu = _detect(tmp_path, text, cores_of_cpu=[0, 0, 1, 1], max_khz=3_800_000)
    assert (cpu.cores, cpu.threads) == (2, 4)  # SMT siblings share the FMA units
    assert cpu.freq_hz == 3.8e9 and cpu.freq_source.startswith("max clock")
    # AVX-512 with 2 FMA units: 16 lanes x 2 FLOPs x 2 units = 64 fp32 FLOPs/cycle.
    assert cpu.peak_flops_per_s["fp32"] == 2 * 3.8e9 * 64
    assert cpu.peak_flops_per_s["fp64"] == 2 * 3.8e9 * 32
    # AMX: 512 bf16 multiply-adds per cycle per core = 1024 FLOPs; int8 2048 ops.
    assert cpu.peak_flops_per_s["bf16"] == 2 * 3.8e9 * 1024
    assert cpu.peak_flops_per_s["int8"] == 2 * 3.8e9 * 2048
    # AVX512_FP16 doubles fp32.
    assert cpu.peak_flops_per_s["fp16"] == 2 * 3.8e9 * 128
    assert cpu.native == {
        "fp64": True,
        "fp32": True,
        "tf32": False,
        "bf16": True,
        "fp16": True,
        "int8": True,
    }
    assert cpu.caches == {"l1d": 48 * 1024, "l1i": 32 * 1024, "l2": 2 * 2**20, "l3": 105 * 2**20}
    assert cpu.llc_bytes == 105 * 2**20
    assert "amx_bf16" in cpu.features and "avx512_fp16" in cpu.features


def test_zen4_runs_avx512_at_avx2_width(tmp_path):
    cpu = _detect(tmp_path, ZEN4, cores_of_cpu=[0], max_khz=None)
    # No cpufreq and no '@ GHz' in the name: the cpuinfo MHz is used and called what it is.
    assert cpu.freq_hz == 2.4e9
    assert "cpu MHz" in cpu.freq_source
    assert cpu.flops_per_cycle_per_core["fp32"] == 32
    assert cpu.flops_per_cycle_per_core["bf16"] == 64  # AVX512_BF16: 2x fp32
    assert cpu.flops_per_cycle_per_core["int8"] == 128  # VNNI: 4x fp32
    assert cpu.native["bf16"] and not cpu.native["fp16"]
    assert cpu.peak_flops_per_s["fp32"] == 2.4e9 * 32
    assert any("Zen 4" in a for a in cpu.assumptions)
    assert any("virtual machine" in n for n in cpu.notes)


def test_haswell_has_no_native_bf16_and_uses_base_clock_from_name(tmp_path):
    cpu = _detect(tmp_path, HASWELL, cores_of_cpu=[0, 1, 2, 3])
    assert cpu.freq_hz == 2.5e9 and cpu.freq_source.startswith("base clock")
    assert cpu.flops_per_cycle_per_core["fp32"] == 32  # 2 FMA units x 8 lanes x 2
    assert not cpu.native["bf16"] and not cpu.native["fp16"] and not cpu.native["int8"]
    # Non-native dtypes get the fp32 rate at best, never more.
    assert cpu.peak_flops_per_s["bf16"] == cpu.peak_flops_per_s["fp32"] == 4 * 2.5e9 * 32


def test_cgroup_quota_caps_cores(tmp_path):
    cpu = _detect(tmp_path, HASWELL, cores_of_cpu=[0, 1, 2, 3], cgroup_text="150000 100000\n")
    assert cpu.cores == 2
    assert cpu.threads == 4
    assert any("quota" in n for n in cpu.notes)


def test_neoverse_n1_from_cpu_part(tmp_path):
    cpu = _detect(tmp_path, NEOVERSE_N1, cores_of_cpu=[0, 1])
    assert cpu.model == "Neoverse N1"
    assert cpu.flops_per_cycle_per_core["fp32"] == 16  # 2 x 128-bit pipes x 4 lanes x 2
    assert cpu.native["fp16"] and cpu.native["int8"] and not cpu.native["bf16"]
    assert cpu.freq_hz is None and cpu.peak_flops_per_s == {}  # no clock: no made-up peak


@pytest.mark.parametrize(
    "flags, family, model, fp32",
    [
        ({"sse2"}, 6, 15, 8),
        ({"sse2", "avx"}, 6, 42, 16),
        ({"sse2", "avx", "avx2", "fma"}, 25, 1, 32),  # Zen 3
        ({"sse2", "avx", "avx2", "fma"}, 23, 1, 16),  # Zen 1: 128-bit datapath
        ({"sse2", "avx", "avx2", "fma", "avx512f"}, 26, 2, 64),  # Zen 5: full 512-bit
    ],
)
def test_fp32_flops_per_cycle_by_isa(flags, family, model, fp32):
    vendor = "GenuineIntel" if family == 6 else "AuthenticAMD"
    ident = CpuIdentity("x86_64", vendor, family, model, None, frozenset(flags))
    vm = vector_model(ident)
    assert vm.flops_per_cycle["fp32"] == fp32
    assert vm.flops_per_cycle["fp64"] == fp32 / 2
    assert tuple(vm.flops_per_cycle) == CPU_DTYPES == tuple(vm.native)


def test_peak_is_cores_times_clock_times_flops_per_cycle():
    assert peak_flops_per_s(8, 3e9, {"fp32": 32.0}) == {"fp32": 8 * 3e9 * 32}


def test_parsers():
    assert parse_cache_size("32K") == 32768
    assert parse_cache_size("1024 KB") == 2**20
    assert parse_cache_size("32M") == 32 * 2**20
    assert parse_cache_size("big") is None
    blocks = parse_cpuinfo(ZEN4 + "\n" + ZEN4)
    assert len(blocks) == 2 and blocks[0]["cpu family"] == "25"


def test_real_detection_smoke():
    cpu = detect_cpu()
    assert cpu.cores >= 1 and cpu.threads >= cpu.cores
    assert cpu.memory_bytes > 2**27
    assert set(cpu.native) == set(CPU_DTYPES)
    assert cpu.native["fp32"] and not cpu.native["tf32"]
    if cpu.freq_hz is not None:
        assert 2e8 < cpu.freq_hz < 7e9
        assert set(cpu.peak_flops_per_s) == set(cpu.native)
        per_core = cpu.peak_flops_per_s["fp32"] / cpu.cores
        assert 1e9 < per_core < 1e12  # any CPU core: 1 GFLOP/s .. 1 TFLOP/s fp32
