"""The machine card: what this machine is, and its measured ceilings against the datasheet."""

from __future__ import annotations

import os

from ceiling import units
from ceiling.report.compose import ReportContext, SectionOutput, Skip

KEY = "machine"
TITLE = "This machine and its ceilings"


def run(ctx: ReportContext, out: SectionOutput) -> None:
    ctx.step("detecting the CPU and GPUs")
    # the description of the hardware goes below the figure and the measured ceilings
    detail = SectionOutput()
    cpu = _cpu_card(detail)
    gpus = _gpu_card(detail)
    out.highlights.extend(detail.highlights)
    out.key_figures.update(detail.key_figures)
    if not gpus:
        out.text("No CUDA GPU is visible here, so every measurement below runs on the CPU.")
    try:
        profile = ctx.profile()
    except Skip as exc:
        out.note(f"measured ceilings: not measured — {exc}")
        profile = None
    if cpu is not None or profile is not None:
        from ceiling.report import machine_plot

        fig = machine_plot.ceilings_figure(_devices_for_plot(profile, cpu, gpus))
        if fig is not None:
            out.figure(
                fig,
                "Matrix-multiply FLOP/s per dtype and memory bandwidth: measured here (solid) "
                "against the theoretical or datasheet figure (hatched). Log scale.",
            )
    if profile is not None:
        _measured(out, profile, cpu)
        _noise_note(out, profile, ctx.profile_path is None)
    if profile is not None and not gpus and all(d.kind != "cuda" for d in profile.devices):
        _versus_gpu(out, profile, cpu)
    for kind, block in detail.blocks:
        if kind == "table":
            out.tables.append(block)
        elif kind == "text":
            out.paragraphs.append(block)
        out.blocks.append((kind, block))
    out.notes.extend(detail.notes)


def _cpu_card(out: SectionOutput):
    from ceiling.hardware import cpu as cpu_mod

    cpu = cpu_mod.detect_cpu()
    out.key("cpu_model", cpu.model, "CPU", cpu.model)
    out.key("cpu_cores", cpu.cores, "cores / threads", f"{cpu.cores} / {cpu.threads}")
    rows = [
        ["model", cpu.model],
        ["cores / threads", f"{cpu.cores} / {cpu.threads}"],
        ["clock", f"{cpu.freq_hz / 1e9:.2f} GHz" if cpu.freq_hz else "not readable"],
        ["caches", _caches(cpu.caches)],
        ["SIMD features", ", ".join(cpu.features) or "none detected"],
        ["vector model", cpu.isa],
        ["memory", units.format_bytes(cpu.memory_bytes, binary=True)],
    ]
    out.table("CPU", ["", ""], rows)
    peak_rows = []
    for dtype, peak in cpu.peak_flops_per_s.items():
        native = cpu.native.get(dtype, False)
        peak_rows.append([dtype, units.format_flops_per_s(peak), "yes" if native else "no"])
    out.table(
        "CPU theoretical peak (cores × clock × FLOPs per cycle; a multiply-add counts as 2)",
        ["dtype", "peak", "native instructions"],
        peak_rows,
        note="Without native instructions a dtype is converted to fp32 or emulated: it runs "
        "at the fp32 rate at best, often far below.",
    )
    out.key_figures["cpu_theoretical_peak_flops_per_s"] = dict(cpu.peak_flops_per_s)
    for line in (*cpu.assumptions[:1], *cpu.notes):
        out.note(line)
    return cpu


def _noise_note(out: SectionOutput, profile, measured_now: bool) -> None:
    """Ceilings measured on a busy machine read low and vary: say so, with the evidence."""
    noisy, total = [], 0
    for dev in profile.devices:
        for kind in ("matmul", "memory"):
            for rec in (dev.extra or {}).get(kind) or []:
                total += 1
                if rec.get("noisy"):
                    noisy.append(f"{rec.get('dtype', '')} {rec.get('kernel', 'matmul')}".strip())
    load = None
    if measured_now and hasattr(os, "getloadavg"):
        load = os.getloadavg()[0]
    cores = os.cpu_count() or 1
    busy = load is not None and load > 0.75 * cores
    out.key_figures["noisy_measurements"] = len(noisy)
    if load is not None:
        out.key_figures["load_average_1min"] = load
    if busy or noisy:
        parts = []
        if busy:
            parts.append(f"the load average was {load:.1f} on {cores} logical CPUs")
        if noisy:
            parts.append(f"{len(noisy)} of {total} benchmark points spread by more than 10 %")
        out.note(
            f"measured on a busy machine: {' and '.join(parts)}. Other work shared the cores, so "
            "these ceilings read low and vary between runs; `ceiling bench` on an idle machine "
            "gives the real ones."
        )


def _caches(caches) -> str:
    if isinstance(caches, dict):
        items = caches.items()
    else:
        items = ((k, getattr(caches, k, None)) for k in ("l1d_bytes", "l2_bytes", "l3_bytes"))
    parts = []
    for name, v in items:
        if v:
            label = name.replace("_bytes", "").upper()
            parts.append(f"{label} {units.format_bytes(v, binary=True)}")
    return ", ".join(parts) or "not readable"


def _gpu_card(out: SectionOutput) -> list:
    from ceiling.hardware import gpu as gpu_mod

    gpus = gpu_mod.detect_gpus()
    out.key("gpu_count", len(gpus))
    if not gpus:
        return []
    rows = []
    for g in gpus:
        match = getattr(g, "catalog_key", None) or getattr(g, "spec_key", None) or "—"
        rows.append(
            [
                g.name,
                g.sms if g.sms is not None else "—",
                units.format_bytes(g.memory_bytes, binary=True),
                units.format_bytes(g.l2_bytes, binary=True) if g.l2_bytes else "—",
                match,
            ]
        )
    out.table("GPUs", ["name", "SMs", "memory", "L2", "catalog entry"], rows)
    return gpus


def _achieved(value: float, ref: float | None) -> str:
    if not ref:
        return "—"
    share = units.format_percent(value / ref)
    return f"{share} (above: see note)" if value > ref else share


def _measured(out: SectionOutput, profile, cpu) -> None:
    rows = []
    measured = {}
    above = []
    for dev in profile.devices:
        for dtype, value in sorted(dev.peak_flops_per_s.items(), key=lambda kv: -kv[1]):
            ref = (dev.datasheet_peak_flops_per_s or {}).get(dtype)
            if ref and value > ref:
                above.append(f"{dev.name} {dtype}")
            rows.append(
                [
                    dev.name,
                    dtype,
                    units.format_flops_per_s(value),
                    units.format_flops_per_s(ref) if ref else "—",
                    _achieved(value, ref),
                ]
            )
        bw = dev.bandwidth_bytes_per_s
        ref_bw = dev.datasheet_bandwidth_bytes_per_s
        if bw:
            rows.append(
                [
                    dev.name,
                    "memory bandwidth",
                    units.format_bandwidth(bw),
                    units.format_bandwidth(ref_bw) if ref_bw else "—",
                    _achieved(bw, ref_bw),
                ]
            )
        measured[dev.name] = {
            "kind": dev.kind,
            "peak_flops_per_s": dict(dev.peak_flops_per_s),
            "bandwidth_bytes_per_s": bw,
            "datasheet_peak_flops_per_s": dict(dev.datasheet_peak_flops_per_s or {}),
            "datasheet_bandwidth_bytes_per_s": ref_bw,
        }
    out.key_figures["measured"] = measured
    best = max(
        ((d, dt, v) for d in profile.devices for dt, v in d.peak_flops_per_s.items()),
        key=lambda t: t[2],
        default=None,
    )
    if best is not None:
        out.highlight(f"best matmul ({best[0].name}, {best[1]})", units.format_flops_per_s(best[2]))
    bws = [d for d in profile.devices if d.bandwidth_bytes_per_s]
    if bws:
        top = max(bws, key=lambda d: d.bandwidth_bytes_per_s)
        out.highlight(
            f"memory bandwidth ({top.name})", units.format_bandwidth(top.bandwidth_bytes_per_s)
        )
    out.key_figures["measured_above_reference"] = above
    clock = f"{cpu.freq_hz / 1e9:.2f} GHz " if cpu is not None and cpu.freq_hz else ""
    out.table(
        "Measured ceilings against the theoretical (CPU) or datasheet (GPU) figure",
        ["device", "what", "measured", "theoretical / datasheet", "achieved"],
        rows,
        note="Matrix multiply: best FLOP/s over the size sweep, FLOPs = 2·M·N·K (a multiply-add "
        "counts 2). Bandwidth: STREAM triad, GB = 10⁹ bytes. CPU theoretical peak: cores × "
        f"the {clock}clock the system reports × FLOPs per cycle; no datasheet bandwidth is "
        "known for a CPU.",
    )
    if above:
        out.note(
            f"measured above the theoretical peak ({', '.join(above)}): that peak assumes the "
            f"{clock}clock the system reports, but the cores run faster (turbo, or a virtual "
            "machine that shows only the nominal clock). The measurement is the real ceiling; "
            "shares of that theoretical peak, here and in the MFU section, read too high."
        )


REFERENCE_GPU = "h100-sxm"  # the reference point for "why GPUs"


def _devices_for_plot(profile, cpu, gpus) -> list[dict]:
    """One entry per device: measured and reference FLOP/s per dtype, and bandwidths.

    Without a local GPU a catalog GPU is added as a datasheet-only comparison, so the page
    shows the CPU-GPU gap with this machine's own numbers on one side.
    """
    devices = []
    if profile is not None:
        for dev in profile.devices:
            devices.append(
                {
                    "name": dev.name,
                    "kind": dev.kind,
                    "measured": dict(dev.peak_flops_per_s),
                    "reference": dict(dev.datasheet_peak_flops_per_s or {}),
                    "bandwidth": dev.bandwidth_bytes_per_s,
                    "reference_bandwidth": dev.datasheet_bandwidth_bytes_per_s,
                }
            )
    elif cpu is not None:
        devices.append(
            {
                "name": cpu.model,
                "kind": "cpu",
                "measured": {},
                "reference": dict(cpu.peak_flops_per_s),
                "bandwidth": None,
                "reference_bandwidth": None,
            }
        )
    has_gpu = bool(gpus) or any(
        getattr(d, "kind", "") == "cuda" for d in (profile.devices if profile else [])
    )
    if devices and not has_gpu:
        ref = _reference_gpu()
        if ref is not None:
            local = {dt for d in devices for dt in (*d["measured"], *d["reference"])}
            devices.append(
                {
                    "name": f"{ref.name} (datasheet, for comparison)",
                    "measured": {},
                    "reference": {k: v for k, v in ref.peak_flops_per_s.items() if k in local},
                    "bandwidth": None,
                    "reference_bandwidth": ref.memory_bandwidth_bytes_per_s,
                }
            )
    return devices


def _reference_gpu():
    from ceiling.hardware import catalog

    return catalog.get_spec(REFERENCE_GPU)


def _versus_gpu(out: SectionOutput, profile, cpu=None) -> None:
    """The CPU-vs-GPU table with this machine's measured numbers on the CPU side."""
    ref = _reference_gpu()
    dev = profile.device("cpu")
    if ref is None or not dev.peak_flops_per_s:
        return
    dtype, here = max(dev.peak_flops_per_s.items(), key=lambda kv: kv[1])
    gpu_dtype = "bf16" if "bf16" in ref.peak_flops_per_s else dtype
    gpu = ref.peak_flops_per_s[gpu_dtype]
    rows = [
        [
            "matrix multiply",
            f"{units.format_flops_per_s(here)} ({dtype})",
            f"{units.format_flops_per_s(gpu)} ({gpu_dtype})",
            f"{gpu / here:,.0f}×",
        ]
    ]
    out.key_figures["reference_gpu"] = ref.key
    out.key_figures["reference_gpu_compute_ratio"] = gpu / here
    if dev.bandwidth_bytes_per_s:
        bw_ratio = ref.memory_bandwidth_bytes_per_s / dev.bandwidth_bytes_per_s
        rows.append(
            [
                "memory bandwidth",
                units.format_bandwidth(dev.bandwidth_bytes_per_s),
                units.format_bandwidth(ref.memory_bandwidth_bytes_per_s),
                f"{bw_ratio:,.0f}×",
            ]
        )
        out.key_figures["reference_gpu_bandwidth_ratio"] = bw_ratio
    cores = cpu.cores if cpu is not None else os.cpu_count()
    rows.insert(
        0,
        [
            "parallel units",
            f"{cores} core{'s' if cores != 1 else ''}, complex, fast per task",
            f"{ref.sms} SMs of many simple lanes" if ref.sms else "thousands of simple lanes",
            "",
        ],
    )
    rows.insert(
        1,
        ["good at", "branching, sequential logic", "the same operation on a lot of data", ""],
    )
    out.table(
        f"Why GPUs: this CPU (measured) against the {ref.name} (datasheet, dense)",
        ["", "this machine", ref.name, "GPU / here"],
        rows,
        note="A matrix multiply is millions of independent dot products; a GPU has thousands "
        "of simple cores to run them at once and several times the memory bandwidth.",
    )
