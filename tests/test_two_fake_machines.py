"""Machine-dependent paths under two made-up 2-core machines, never this one's facts.

A: AMD Zen 4 (AVX-512 executed at AVX2 width), 32 MiB L3. B: an Intel Xeon with AVX-512 and
AMX, 480 MiB last-level cache. Each path that reads the machine (the
CPU's peak, cache-sized benchmarks and decode, the caps on workers) must follow the fake.
"""

from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from ceiling.errors import InvalidInput
from ceiling.hardware import capacity
from ceiling.hardware import cpu as cpu_mod

GiB = 2**30
MiB = 2**20

ZEN4 = """\
processor\t: {n}
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 17
model name\t: AMD EPYC 9R14 2-Core Processor
core id\t\t: {n}
physical id\t: 0
cpu MHz\t\t: 2600.000
flags\t\t: fpu sse2 avx fma avx2 f16c avx512f avx512dq avx512_bf16 avx512_vnni
"""

XEON = """\
processor\t: {n}
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 207
model name\t: Intel(R) Xeon(R) Platinum 8580
core id\t\t: {n}
physical id\t: 0
cpu MHz\t\t: 2000.000
flags\t\t: fpu sse sse2 avx fma avx2 f16c avx512f avx512_bf16 avx512_fp16 avx512_vnni \
amx_bf16 amx_tile amx_int8
"""


@dataclass(frozen=True)
class FakeMachine:
    name: str
    cpuinfo: str
    max_khz: int
    llc: str  # sysfs size text
    llc_bytes: int
    fp32_flops_per_cycle: int  # per core
    bf16_flops_per_cycle: int


MACHINES = [
    FakeMachine("zen4-32MiB-L3", ZEN4, 3_700_000, "32768K", 32 * MiB, 32, 64),
    FakeMachine("xeon-amx-480MiB-LLC", XEON, 4_000_000, "491520K", 480 * MiB, 64, 1024),
]


def _sysfs(root, llc):
    for n in range(2):
        topo = root / f"cpu{n}" / "topology"
        topo.mkdir(parents=True)
        (topo / "core_id").write_text(f"{n}\n")
        (topo / "physical_package_id").write_text("0\n")
    for i, (level, kind, size) in enumerate(
        [
            (1, "Data", "48K"),
            (1, "Instruction", "32K"),
            (2, "Unified", "2048K"),
            (3, "Unified", llc),
        ]
    ):
        d = root / "cpu0" / "cache" / f"index{i}"
        d.mkdir(parents=True)
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    freq = root / "cpu0" / "cpufreq"
    freq.mkdir(parents=True)
    return freq


@pytest.fixture(params=MACHINES, ids=lambda m: m.name)
def machine(request, tmp_path, monkeypatch):
    """Every reader of the machine sees the fake: cpuinfo and sysfs, two usable cores,
    16 GiB available of 32 GiB."""
    m = request.param
    freq = _sysfs(tmp_path / "cpu", m.llc)
    (freq / "cpuinfo_max_freq").write_text(f"{m.max_khz}\n")
    (tmp_path / "cgroup").mkdir()
    info = cpu_mod.detect_linux(
        "\n".join(m.cpuinfo.format(n=n) for n in range(2)),
        cpu_dir=tmp_path / "cpu",
        usable_cpus={0, 1},
        arch="x86_64",
        memory_bytes=32 * GiB,
        cgroup_dir=tmp_path / "cgroup",
        use_psutil=False,
    )
    monkeypatch.setattr(cpu_mod, "detect_cpu", lambda: info)
    monkeypatch.setattr("os.sched_getaffinity", lambda _pid: {0, 1}, raising=False)
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    memory = SimpleNamespace(total=32 * GiB, available=16 * GiB)
    monkeypatch.setattr("psutil.virtual_memory", lambda: memory)
    return m, info


def test_the_cpu_peak_follows_the_machine(machine, tmp_path, monkeypatch):
    m, info = machine
    clock = m.max_khz * 1e3
    assert info.cores == 2 and info.llc_bytes == m.llc_bytes
    assert info.peak_flops_per_s["fp32"] == 2 * clock * m.fp32_flops_per_cycle
    assert info.peak_flops_per_s["bf16"] == 2 * clock * m.bf16_flops_per_cycle
    # the dense peak MFU is measured against (no profile saved) comes from the same detection
    from ceiling.hardware.resolve import this_machine

    monkeypatch.setenv("CEILING_PROFILE", str(tmp_path / "none.json"))
    here = this_machine("cpu", read_bandwidth=lambda: 1e10)
    assert here.datasheet_peak("fp32") == info.peak_flops_per_s["fp32"]


def test_cache_sized_work_follows_the_machine(machine):
    from ceiling.measure import decode, memory
    from ceiling.measure import machine as machine_mod

    m, _ = machine
    assert machine_mod.last_level_cache_bytes("cpu") == m.llc_bytes
    assert decode._cache_bytes("cpu") == m.llc_bytes
    # STREAM arrays: 4 × the LLC (at least 64 MiB), at most a quarter of memory over 3 arrays
    want = min(max(4 * m.llc_bytes, 64 * MiB), 0.25 * 32 * GiB / 3)
    assert memory.array_elements("cpu") == int(want // 8)
    # gpt:small's weights (about 94 MB in fp32) stay in a 480 MiB cache, not in 32 MiB
    from ceiling.model.transformer import get_model

    weights = get_model("gpt:small").params_total * 4
    assert (weights <= m.llc_bytes) == (m.llc_bytes > 400 * MiB)


def test_worker_caps_follow_the_cores(machine, cli):
    from ceiling.measure import scale

    assert capacity.local_room() == capacity.Room(16 * GiB, 2)
    capacity.check_workers(16, capacity.local_room())
    with pytest.raises(InvalidInput, match=r"17 worker processes on 2 core\(s\)"):
        capacity.check_workers(17, capacity.local_room())
    assert scale.threads_per_worker(scale.ScaleConfig("synthetic", (1, 2))) == 1
    assert scale.threads_per_worker(scale.ScaleConfig("synthetic", (1,))) == 2
    for args in (["scale", "synthetic", "--workers", "17"], ["bench", "comm", "-w", "17"]):
        code, _, err = cli(*args, "--device", "cpu")
        assert code == 2 and "17 worker processes on 2 core(s)" in err, err
