"""FLOPs per cycle per core from a CPU's instruction set: the arithmetic behind a CPU peak.

peak FLOP/s = cores x clock x FLOPs/cycle/core, and for vector FMA code
    FLOPs/cycle/core = lanes per vector x 2 (a fused multiply-add is 2 FLOPs) x FMA pipes.
Where a cheaper format has its own dot-product or matrix instruction (AVX512_BF16, VNNI,
AMX, ARM BFMMLA/SDOT) that instruction's rate is used and the dtype is marked native.
A dtype without such an instruction is computed by converting to fp32 first (or, inside
PyTorch's CPU matmul, by a scalar fallback); its rate is shown as the fp32 rate at best,
and `native` is False.

Everything here is a pure function of the CPU's identity and feature flags, so it can be
tested with fixed inputs. The assumptions it makes are returned alongside the numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

# The dtypes a CPU peak is given for; fp8 has no CPU instructions and is left out.
CPU_DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "int8")

# Flags (Linux /proc/cpuinfo spelling) that decide the peak; `info` shows these.
PEAK_FEATURES = (
    "sse2",
    "avx",
    "fma",
    "avx2",
    "f16c",
    "avx512f",
    "avx512_bf16",
    "avx512_fp16",
    "avx512_vnni",
    "avx_vnni",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
    "amx_fp16",
    "asimd",
    "asimdhp",
    "asimddp",
    "bf16",
    "i8mm",
    "sve",
    "sve2",
    "sme",
)

# ARM cores known to have four 128-bit FP/SIMD pipes (others are assumed to have two).
_ARM_FOUR_PIPES = {
    0xD40: "Neoverse V1",
    0xD4F: "Neoverse V2",
    0xD84: "Neoverse V3",
    0xD44: "Cortex-X1",
    0xD48: "Cortex-X2",
    0xD4E: "Cortex-X3",
}
ARM_PART_NAMES = {
    0xD0C: "Neoverse N1",
    0xD49: "Neoverse N2",
    0xD8E: "Neoverse N3",
    0xD0B: "Cortex-A76",
    0xD41: "Cortex-A78",
    **_ARM_FOUR_PIPES,
}


@dataclass(frozen=True)
class CpuIdentity:
    """What identifies a core's vector hardware. family/model are x86 CPUID values."""

    arch: str  # "x86_64", "aarch64", ...
    vendor: str = ""  # "GenuineIntel", "AuthenticAMD", "ARM", "Apple"
    family: int | None = None
    model: int | None = None
    arm_part: int | None = None
    flags: frozenset[str] = frozenset()


@dataclass(frozen=True)
class VectorModel:
    """FLOPs per cycle per core for each dtype, whether the dtype is native, and why."""

    isa: str
    flops_per_cycle: dict[str, float]
    native: dict[str, bool]
    assumptions: tuple[str, ...]


def _x86_fp32(cpu: CpuIdentity) -> tuple[str, float, list[str]]:
    """(ISA label, fp32 FLOPs/cycle/core, assumptions) for the widest FMA path."""
    f = cpu.flags
    amd = cpu.vendor == "AuthenticAMD"
    if "avx512f" in f:
        if amd and cpu.family == 0x19:
            return (
                "AVX-512 on Zen 4 (2 x 256-bit FMA pipes)",
                8 * 2 * 2,
                [
                    "Zen 4 executes a 512-bit instruction as two 256-bit halves: "
                    "2 FMA pipes x 8 fp32 lanes x 2 FLOPs = 32 fp32 FLOPs/cycle, as with AVX2"
                ],
            )
        if amd:
            return (
                "AVX-512 (2 x 512-bit FMA pipes)",
                16 * 2 * 2,
                ["AMD Zen 5 server/desktop cores: full 512-bit datapath, 2 FMA pipes"],
            )
        return (
            "AVX-512 (2 FMA units)",
            16 * 2 * 2,
            [
                "Intel server cores with AVX-512: 2 FMA units x 16 fp32 lanes x 2 FLOPs = 64 "
                "fp32 FLOPs/cycle (some Xeon Silver/Bronze and client parts have 1 unit: half)"
            ],
        )
    if "avx2" in f and "fma" in f:
        if amd and cpu.family == 0x17 and (cpu.model or 0) < 0x30:
            return (
                "AVX2 + FMA on Zen 1 (2 x 128-bit FMA pipes)",
                4 * 2 * 2,
                ["Zen/Zen+ split 256-bit instructions into two 128-bit halves"],
            )
        return (
            "AVX2 + FMA (2 FMA units)",
            8 * 2 * 2,
            ["2 FMA units x 8 fp32 lanes x 2 FLOPs = 32 fp32 FLOPs/cycle"],
        )
    if "avx" in f:
        return (
            "AVX, no FMA",
            8 * 2,
            ["one 256-bit multiply and one 256-bit add per cycle: 16 fp32 FLOPs/cycle"],
        )
    return (
        "SSE2",
        4 * 2,
        ["one 128-bit multiply and one 128-bit add per cycle: 8 fp32 FLOPs/cycle"],
    )


def _x86(cpu: CpuIdentity) -> VectorModel:
    f = cpu.flags
    isa, fp32, notes = _x86_fp32(cpu)
    fpc = {"fp64": fp32 / 2, "fp32": fp32, "tf32": fp32}
    native = {"fp64": True, "fp32": True, "tf32": False}
    notes.append("fp64 lanes are half as many as fp32 lanes")
    notes.append("tf32 is a GPU tensor-core format; a CPU computes it as fp32")

    if "amx_bf16" in f:
        fpc["bf16"], native["bf16"] = 1024.0, True
        notes.append(
            "AMX-BF16: one tile multiply (16x16 fp32 outputs, 32 bf16 products each) every "
            "16 cycles = 512 multiply-adds = 1024 FLOPs/cycle/core, if the tiles are kept fed"
        )
    elif "avx512_bf16" in f:
        fpc["bf16"], native["bf16"] = 2 * fp32, True
        notes.append("AVX512_BF16 dot product: 2 bf16 products per fp32 lane, twice the fp32 rate")
    else:
        fpc["bf16"], native["bf16"] = fp32, False

    if "amx_fp16" in f:
        fpc["fp16"], native["fp16"] = 1024.0, True
        notes.append("AMX-FP16: same tile rate as AMX-BF16, 1024 FLOPs/cycle/core")
    elif "avx512_fp16" in f:
        fpc["fp16"], native["fp16"] = 2 * fp32, True
        notes.append("AVX512_FP16: 32 fp16 lanes per 512-bit FMA, twice the fp32 rate")
    else:
        fpc["fp16"], native["fp16"] = fp32, False
        if "f16c" in f:
            notes.append("fp16 without AVX512_FP16/AMX-FP16: F16C only converts to fp32")

    if "amx_int8" in f:
        fpc["int8"], native["int8"] = 2048.0, True
        notes.append("AMX-INT8: 1024 multiply-adds = 2048 int8 ops/cycle/core")
    elif "avx512_vnni" in f or "avx_vnni" in f:
        fpc["int8"], native["int8"] = 4 * fp32, True
        notes.append("VNNI dot product: 4 int8 products per 32-bit lane, 4x the fp32 rate")
    else:
        fpc["int8"], native["int8"] = fp32, False
        notes.append("int8 without VNNI/AMX needs several instructions per dot product")
    return _ordered(isa, fpc, native, notes)


def _ordered(isa: str, fpc: dict, native: dict, notes: list[str]) -> VectorModel:
    return VectorModel(
        isa,
        {d: float(fpc[d]) for d in CPU_DTYPES},
        {d: bool(native[d]) for d in CPU_DTYPES},
        tuple(notes),
    )


def _arm(cpu: CpuIdentity) -> VectorModel:
    f = cpu.flags
    pipes = 4 if cpu.arm_part in _ARM_FOUR_PIPES or cpu.vendor == "Apple" else 2
    fp32 = 4 * 2 * pipes  # 128-bit NEON: 4 fp32 lanes
    label = ARM_PART_NAMES.get(cpu.arm_part or -1, cpu.vendor or "ARM")
    notes = [
        f"{label}: {pipes} x 128-bit FMA pipes x 4 fp32 lanes x 2 FLOPs = {fp32} fp32 "
        "FLOPs/cycle (SVE width adds nothing when the pipes are 128 bits wide)",
        "fp64 lanes are half as many as fp32 lanes",
        "tf32 is a GPU tensor-core format; a CPU computes it as fp32",
    ]
    fpc = {"fp64": fp32 / 2, "fp32": fp32, "tf32": fp32}
    native = {"fp64": True, "fp32": True, "tf32": False}
    if "bf16" in f:
        fpc["bf16"], native["bf16"] = 2 * fp32, True
        notes.append("ARM BF16 (BFDOT/BFMMLA): taken as twice the fp32 rate")
    else:
        fpc["bf16"], native["bf16"] = fp32, False
    if "asimdhp" in f or "fphp" in f or cpu.vendor == "Apple":
        fpc["fp16"], native["fp16"] = 2 * fp32, True
        notes.append("ARMv8.2 FP16 arithmetic: 8 fp16 lanes per 128-bit FMA")
    else:
        fpc["fp16"], native["fp16"] = fp32, False
    if "asimddp" in f or "i8mm" in f:
        fpc["int8"], native["int8"] = 4 * fp32, True
        notes.append("SDOT/SMMLA: 4 int8 products per 32-bit lane, 4x the fp32 rate")
    else:
        fpc["int8"], native["int8"] = fp32, False
    return _ordered(f"NEON ({pipes} x 128-bit pipes)", fpc, native, notes)


def vector_model(cpu: CpuIdentity) -> VectorModel:
    """FLOPs/cycle/core per dtype (a multiply-add counts 2) and the assumptions behind it."""
    arch = cpu.arch.lower()
    if arch in ("x86_64", "amd64", "i686", "i386", "x86"):
        return _x86(cpu)
    if arch in ("aarch64", "arm64"):
        return _arm(cpu)
    fpc = {d: 2.0 for d in CPU_DTYPES}
    native = {d: d in ("fp64", "fp32") for d in CPU_DTYPES}
    return VectorModel(
        f"unknown ({cpu.arch})",
        fpc,
        native,
        (f"no vector model for {cpu.arch}: one scalar FMA per cycle assumed",),
    )


def peak_flops_per_s(cores: int, clock_hz: float, flops_per_cycle: dict[str, float]) -> dict:
    """cores x clock x FLOPs/cycle/core for every dtype."""
    return {d: cores * clock_hz * fpc for d, fpc in flops_per_cycle.items()}
