"""The machine card: what this machine is, and its measured ceilings against the datasheet."""

from __future__ import annotations

from ceiling import units
from ceiling.report.compose import ReportContext, SectionOutput, Skip

KEY = "machine"
TITLE = "This machine and its ceilings"


def run(ctx: ReportContext, out: SectionOutput) -> None:
    ctx.step("detecting the CPU and GPUs")
    # the description of the hardware goes below the figure and the measured ceilings
    detail = SectionOutput()
    from ceiling.api.info import info

    here = info()  # the CPU and the GPUs `ceiling info` describes
    gpus = here.gpus
    cpu = _cpu_card(detail, here.cpu, bool(gpus))
    _gpu_card(detail, gpus)
    out.key_figures.update(detail.key_figures)
    try:
        profile = ctx.profile()
    except Skip as exc:
        out.note(f"measured ceilings: not measured — {exc}")
        profile = None
    if cpu is not None or profile is not None:
        from ceiling.render import machine_plot

        fig = machine_plot.ceilings_figure(_devices_for_plot(profile, cpu, gpus))
        if fig is not None:
            out.figure(
                fig,
                "Measured here (solid) against the theoretical or datasheet figure (hatched); "
                "log scale.",
            )
    if profile is not None:
        _measured(out, profile, cpu)
        _framework_gap(out, profile)
        _noise_note(out, profile)
    if profile is not None and not gpus and all(d.kind != "cuda" for d in profile.devices):
        _versus_gpu(out, profile, cpu)
    for kind, block in detail.blocks:
        if kind == "table":
            out.tables.append(block)
        elif kind == "text":
            out.paragraphs.append(block)
        out.blocks.append((kind, block))
    out.notes.extend(detail.notes)


def _cpu_card(out: SectionOutput, cpu, has_gpu: bool):
    out.key_figures["cpu_model"] = cpu.model
    out.key_figures["cpu_cores"] = cpu.cores
    clock = f"{cpu.freq_hz / 1e9:.2f} GHz" if cpu.freq_hz else "clock not readable"
    out.text(
        f"{cpu.model}: {cpu.cores} cores / {cpu.threads} threads, {clock}, {_caches(cpu.caches)}, "
        f"{cpu.isa}, {units.format_bytes(cpu.memory_bytes, binary=True)}"
        + ("." if has_gpu else "; no CUDA GPU visible.")
    )
    out.key_figures["cpu"] = {
        "model": cpu.model,
        "cores": cpu.cores,
        "threads": cpu.threads,
        "freq_hz": cpu.freq_hz,
        "caches": _caches(cpu.caches),
        "features": list(cpu.features),
        "isa": cpu.isa,
        "memory_bytes": cpu.memory_bytes,
        "native": dict(cpu.native),
    }
    out.key_figures["cpu_theoretical_peak_flops_per_s"] = dict(cpu.peak_flops_per_s)
    out.key_figures["cpu_notes"] = list(cpu.notes)
    return cpu


def _noise_note(out: SectionOutput, profile) -> None:
    """Ceilings measured on a busy machine read low and vary: say so, with the evidence."""
    noisy, total = [], 0
    for dev in profile.devices:
        for kind in ("matmul", "memory"):
            for rec in (dev.extra or {}).get(kind) or []:
                total += 1
                if rec.get("noisy"):
                    noisy.append(f"{rec.get('dtype', '')} {rec.get('kernel', 'matmul')}".strip())
    from ceiling.api.machine_profile import busy_reasons

    busy = list(dict.fromkeys(r for d in profile.devices for r in busy_reasons(_env(d))))
    parts = [*busy]
    if noisy:
        parts.append(f"{len(noisy)} of {total} benchmark points spread by more than 10 %")
    out.key_figures["noisy_measurements"] = len(noisy)
    out.key_figures["measured_busy"] = bool(parts)
    out.key_figures["busy_reasons"] = parts
    if parts:
        out.note(
            f"measured on a busy machine: {' and '.join(parts)}; these ceilings read low "
            "(`ceiling bench` on an idle machine)"
        )


def _env(device) -> dict:
    return (device.extra or {}).get("environment") or {}


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


def _gpu_card(out: SectionOutput, gpus) -> list:
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
        dev, dtype, value = best
        out.highlight(f"best matmul ({dtype})", units.format_flops_per_s(value))
        ref = (dev.datasheet_peak_flops_per_s or {}).get(dtype)
        if ref:
            out.key_figures["best_matmul"] = {
                "device": dev.name,
                "kind": "CPU" if dev.kind == "cpu" else "GPU",
                "dtype": dtype,
                "flops_per_s": value,
                "reference": "theoretical" if dev.kind == "cpu" else "datasheet",
                "reference_flops_per_s": ref,
                "share_of_reference": value / ref,
            }
    bws = [d for d in profile.devices if d.bandwidth_bytes_per_s]
    if bws:
        top = max(bws, key=lambda d: d.bandwidth_bytes_per_s)
        out.highlight("memory bandwidth", units.format_bandwidth(top.bandwidth_bytes_per_s))
    out.key_figures["measured_above_reference"] = above
    clock = f"{cpu.freq_hz / 1e9:.2f} GHz " if cpu is not None and cpu.freq_hz else ""
    out.table(
        "Measured ceilings against the theoretical (CPU) or datasheet (GPU) figure",
        ["device", "what", "measured", "reference", "of reference"],
        rows,
        modelled=(3,),
    )
    out.note(
        "matmul: best FLOP/s over the size sweep, 2·M·N·K FLOPs; bandwidth: STREAM triad, "
        f"GB = 10⁹ bytes; CPU reference: cores × the {clock}clock reported × FLOPs per cycle"
    )
    if above:
        out.note(
            f"measured above the theoretical peak ({', '.join(above)}): the cores run faster "
            f"than the {clock}clock reported (turbo, or a VM); shares of that peak read high"
        )


def _framework_gap(out: SectionOutput, profile) -> None:
    """torch's best CPU matmul against numpy's BLAS measured beside it, per dtype: the
    machine's ceiling is the best library's, and the framework's share of it is a finding."""
    from ceiling.render.bench_tables import framework_gap_sentence

    gaps = {}
    for dev in profile.devices:
        for gap in (dev.extra or {}).get("matmul_blas_gap") or []:
            gaps[gap["dtype"]] = gap
    if not gaps:
        return
    out.key_figures["framework_gap"] = gaps
    if len(gaps) == 1:
        (gap,) = gaps.values()
        out.note(framework_gap_sentence(gap) + " (numpy measured beside torch, same shapes)")
        return
    # one sentence for every dtype: the ratios side by side, the largest gap said
    from ceiling.render.bench_tables import NO_VERDICT

    ratios = ", ".join(f"{g['ratio']:.2f}× ({d})" for d, g in sorted(gaps.items()))
    library = next(iter(gaps.values()))["library"]
    said = f"torch's best matmul reaches {ratios} of {library}'s, same shapes"
    gaps_found = [g["ratio"] for g in gaps.values() if g.get("verdict") == "framework gap"]
    unsure = sorted({g.get("verdict", "inconclusive") for g in gaps.values()} & set(NO_VERDICT))
    if gaps_found:
        worst = min(gaps_found)
        said += f": the framework leaves up to {(1 - worst) * 100:.0f} % of this CPU unused"
    elif unsure:
        said += f": {NO_VERDICT[unsure[0]]}"
    out.note(said)


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
                    "name": ref.name,
                    "kind": "cuda",
                    "measured": {},
                    "reference": {k: v for k, v in ref.peak_flops_per_s.items() if k in local},
                    "bandwidth": None,
                    "reference_bandwidth": ref.memory_bandwidth_bytes_per_s,
                }
            )
    return devices


def _reference_gpu():
    from ceiling.api.specs import specs

    (spec,) = specs(REFERENCE_GPU).devices
    return spec


def _versus_gpu(out: SectionOutput, profile, cpu=None) -> None:
    """How far a datasheet GPU is from this CPU's measured ceilings, in one sentence."""
    ref = _reference_gpu()
    dev = profile.device("cpu")
    if ref is None or not dev.peak_flops_per_s:
        return
    dtype, here = max(dev.peak_flops_per_s.items(), key=lambda kv: kv[1])
    gpu_dtype = "bf16" if "bf16" in ref.peak_flops_per_s else dtype
    gpu = ref.peak_flops_per_s[gpu_dtype]
    out.key_figures["reference_gpu"] = ref.key
    out.key_figures["reference_gpu_compute_ratio"] = gpu / here
    if dev.bandwidth_bytes_per_s:
        bw_ratio = ref.memory_bandwidth_bytes_per_s / dev.bandwidth_bytes_per_s
        out.key_figures["reference_gpu_bandwidth_ratio"] = bw_ratio
    bw = (
        f" and {out.key_figures['reference_gpu_bandwidth_ratio']:,.0f}× the bandwidth"
        if "reference_gpu_bandwidth_ratio" in out.key_figures
        else ""
    )
    out.note(
        f"{ref.name} (datasheet, dense {gpu_dtype}): {gpu / here:,.0f}× this CPU's measured "
        f"matmul rate{bw}"
    )
