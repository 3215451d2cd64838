"""`ceiling info` (this machine) and `ceiling specs` (the datasheet catalog)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from ceiling.cli.app import app
from ceiling.cli.output import JsonOption, console, emit_json, table
from ceiling.units import GB, GiB, format_bandwidth, format_bytes, format_flops_per_s

# Feature groups shown by `info`, per architecture: (label, flags any of which counts).
_X86_GROUPS = [
    ("AVX2+FMA", ("avx2",), ("fma",)),
    ("AVX-512", ("avx512f",), ()),
    ("AVX512_BF16", ("avx512_bf16",), ()),
    ("AVX512_FP16", ("avx512_fp16",), ()),
    ("VNNI", ("avx512_vnni", "avx_vnni"), ()),
    ("AMX-BF16", ("amx_bf16",), ()),
    ("AMX-INT8", ("amx_int8",), ()),
    ("AMX-FP16", ("amx_fp16",), ()),
]
_ARM_GROUPS = [
    ("NEON", ("asimd",), ()),
    ("FP16", ("asimdhp", "fphp"), ()),
    ("BF16", ("bf16",), ()),
    ("dot product", ("asimddp",), ()),
    ("I8MM", ("i8mm",), ()),
    ("SVE", ("sve",), ()),
    ("SME", ("sme",), ()),
]


def _feature_summary(cpu) -> str:
    groups = _ARM_GROUPS if cpu.arch.lower() in ("aarch64", "arm64") else _X86_GROUPS
    have = set(cpu.features)
    parts = []
    for label, any_of, all_of in groups:
        ok = bool(have & set(any_of)) and set(all_of) <= have
        parts.append(f"{label} {'yes' if ok else 'no'}")
    return ", ".join(parts)


def _caches_text(caches: dict[str, int]) -> str:
    if not caches:
        return "not readable"
    names = {"l1d": "L1d", "l1i": "L1i", "l2": "L2", "l3": "L3", "l4": "L4"}
    parts = [f"{names.get(k, k)} {format_bytes(v, binary=True)}" for k, v in caches.items()]
    return ", ".join(parts) + " (one instance each)"


@app.command()
def info(json_out: JsonOption = False) -> None:
    """This machine: CPU, caches, clocks, SIMD features, theoretical peak per dtype, GPUs."""
    from ceiling.api.info import info as this_machine

    r = this_machine()
    if json_out:
        emit_json(r.to_dict())
        return
    cpu, torch_info, gpus, measured = r.cpu, r.torch, r.gpus, r.measured

    c = console()
    _render_cpu(c, cpu)
    _render_peaks(c, cpu)
    if measured:
        _render_measured(c, cpu, measured)
    for d, why in r.not_native_why.items():
        c.print(f"{d}: {why}")
    c.print("assumptions:")
    for a in cpu.assumptions:
        c.print(f"  - {a}")
    for n in cpu.notes:
        c.print(f"note: {n}")
    if torch_info is None:
        c.print("torch: not importable (measurements need it)")
    else:
        cuda = f"CUDA {torch_info['cuda_version']}" if torch_info["cuda_version"] else "CPU build"
        c.print(f"torch {torch_info['version']} ({cuda}), {torch_info['threads']} intra-op threads")
    if not gpus:
        c.print("GPUs: none visible to torch")
        return
    _render_gpus(c, gpus)


def _render_cpu(c, cpu) -> None:
    mem = f"{format_bytes(cpu.memory_bytes, binary=True)} ({format_bytes(cpu.memory_bytes)})"
    clock = f"{cpu.freq_hz / 1e9:.3g} GHz, {cpu.freq_source}" if cpu.freq_hz else cpu.freq_source
    rows = [
        ["model", f"{cpu.model} ({cpu.vendor or 'unknown vendor'}, {cpu.arch})"],
        ["usable cores / threads", f"{cpu.cores} / {cpu.threads}"],
        ["caches", _caches_text(cpu.caches)],
        ["clock", clock],
        ["SIMD", _feature_summary(cpu)],
        ["vector model", cpu.isa],
        ["memory", mem],
    ]
    facts = table("This machine's CPU", ["", ""], rows)
    facts.show_header = False
    c.print(facts)


def _render_peaks(c, cpu) -> None:
    peak_rows = [
        [
            d,
            f"{cpu.flops_per_cycle_per_core[d]:g}",
            format_flops_per_s(cpu.peak_flops_per_s[d]) if d in cpu.peak_flops_per_s else "?",
            "yes" if cpu.native[d] else "NO",
        ]
        for d in cpu.native
    ]
    c.print(
        table(
            "Theoretical CPU peak = cores × clock × FLOPs/cycle/core",
            ["dtype", "FLOPs/cycle/core", "peak", "native"],
            peak_rows,
            caption="A multiply-add counts 2 FLOPs. Measured matmul rates normally land "
            "below this; one above it means the cores run faster than the clock used here.",
        )
    )


def _render_measured(c, cpu, measured: dict) -> None:
    """The saved profile's matmul rates against the peaks, and the clock a rate above them
    implies."""
    rates = ", ".join(
        f"{d} {format_flops_per_s(r)} ({measured['peak_fraction'][d]:.0%})"
        for d, r in measured["measured_flops_per_s"].items()
        if d in measured["peak_fraction"]
    )
    c.print(f"measured (saved profile): {rates} of the peak above")
    if measured["implied_min_clock_hz"]:
        c.print(
            f"note: the measured {measured['implied_from']} rate is above the peak: at the "
            f"FLOPs/cycle assumed, the cores ran at >= "
            f"{measured['implied_min_clock_hz'] / 1e9:.2f} GHz (turbo above a nominal "
            f"clock), not the {cpu.freq_hz / 1e9:.2f} GHz readable here; the peaks above "
            "are low by as much"
        )


def _render_gpus(c, gpus) -> None:
    gpu_rows = []
    for g in gpus:
        entry = g.catalog_key or "no catalog entry (pass --spec or measure it)"
        gpu_rows.append(
            [
                str(g.index),
                g.name,
                "" if g.sms is None else str(g.sms),
                f"{format_bytes(g.memory_bytes, binary=True)} ({format_bytes(g.memory_bytes)})",
                "" if g.l2_bytes is None else format_bytes(g.l2_bytes, binary=True),
                g.compute_capability or "",
                entry,
            ]
        )
    c.print(table("GPUs", ["#", "name", "SMs", "memory", "L2", "CC", "catalog"], gpu_rows))


@app.command()
def specs(
    name: Annotated[
        str | None,
        typer.Argument(
            help="Short name (h100-sxm), driver name or your own FILE.toml; omit to list all."
        ),
    ] = None,
    template: Annotated[
        bool,
        typer.Option(
            "--template",
            help="Print a commented TOML entry to fill in for your own device (with NAME: "
            "that entry in the same form); use it with --spec FILE.toml or CEILING_CATALOG.",
        ),
    ] = False,
    json_out: JsonOption = False,
) -> None:
    """Datasheet specs: dense peaks per dtype, memory, bandwidth, links, each with its source.

    Your own devices: a TOML file in the same schema (`--template` prints one) passed as
    NAME or --spec, or a directory of them named by $CEILING_CATALOG."""
    from ceiling.api.specs import specs as catalog

    if template and name is None:  # the blank template needs no catalog
        from ceiling.hardware.spec_template import template_text

        sys.stdout.write(template_text())
        return
    r = catalog(name)
    if template:  # plain stdout: the text is TOML, and rich would read [table] headers as markup
        sys.stdout.write(r.toml())
        return
    if json_out:
        emit_json(r.to_dict())
        return
    if r.spec is not None:
        if r.resolved:
            console().print(r.resolved)
        _show_one(r.spec)
        return
    everything = r.devices

    def tflops(s, d: str) -> str:
        return f"{s.peak_flops_per_s[d] / 1e12:,.1f}" if d in s.peak_flops_per_s else "—"

    def half(s) -> str:  # bf16, else fp16 (V100, T4), else fp32: one column, not two alike
        have = [d for d in ("bf16", "fp16", "fp32") if d in s.peak_flops_per_s]
        if not have:
            return "—"
        return tflops(s, have[0]) + ("" if have[0] == "bf16" else f" {have[0]}")

    rows = [
        [
            s.key,
            half(s),
            tflops(s, "fp8"),
            f"{s.memory_bytes / GiB:g}",
            f"{s.memory_bytes / GB:.1f}",
            f"{s.memory_bandwidth_bytes_per_s / 1e12:.2f}",
            f"{s.link_bandwidth_bytes_per_s / 1e9:g}" if s.link_bandwidth_bytes_per_s else "—",
        ]
        for s in everything
    ]
    c = console()
    c.print(
        table(
            "Device catalog (datasheet figures)",
            ["name", "bf16 TFLOP/s", "fp8 TFLOP/s", "GiB", "GB", "mem TB/s", "link GB/s"],
            rows,
            caption=(
                "Dense peaks (2:4-sparse figures halved; fp16 or fp32 where there is no bf16); a "
                "multiply-add counts 2 FLOPs. "
                "Memory in GiB (2³⁰ B) and GB (10⁹ B); TB = 10¹² bytes; link = device-to-"
                "device, one direction. `ceiling specs NAME` shows one entry and its sources."
            ),
        )
    )


def _each_way(bytes_per_s: float | None, missing: str) -> str:
    """A link's one-way bandwidth as the catalog lists it."""
    return f"{format_bandwidth(bytes_per_s)} each way" if bytes_per_s else missing


def _show_one(spec) -> None:
    c = console()
    rows = [[d, f"{spec.peak_flops_per_s[d] / 1e12:,.2f}"] for d in spec.dtypes]
    c.print(
        table(
            f"{spec.name} ({spec.key}): dense peak per dtype",
            ["dtype", "TFLOP/s"],
            rows,
            caption="Dense (2:4-sparse figures halved); int8 in operations/s.",
        )
    )
    facts = [
        ["memory", f"{spec.memory_bytes / GiB:g} GiB = {spec.memory_bytes / GB:.1f} GB"],
        ["memory bandwidth", format_bandwidth(spec.memory_bandwidth_bytes_per_s)],
        ["device-to-device link", _each_way(spec.link_bandwidth_bytes_per_s, "none listed")],
        ["host link (PCIe)", _each_way(spec.pcie_bandwidth_bytes_per_s, "not listed")],
        ["L2", format_bytes(spec.l2_bytes, binary=True) if spec.l2_bytes else "not listed"],
        ["SMs / CUs", str(spec.sms) if spec.sms else "not listed"],
        ["driver names", ", ".join(spec.driver_names) or "—"],
        ["defined in", spec.origin],
    ]
    t = table(None, ["", ""], facts)
    t.show_header = False
    c.print(t)
    c.print("sources:")
    by_text: dict[str, list[str]] = {}
    for key, text in spec.sources.items():
        by_text.setdefault(text, []).append(key)
    for text, keys in by_text.items():
        c.print(f"  {', '.join(keys)}: {text}")
