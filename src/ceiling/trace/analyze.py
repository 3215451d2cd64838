"""`ceiling.trace(path)`: read the trace(s), count each op, place it on the device's
roofline, split each step's time, compare the ranks."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from ceiling.errors import CeilingError, UnsupportedOnDevice
from ceiling.trace import optree
from ceiling.trace.links import Links
from ceiling.trace.rank import MODEL_CATEGORIES, Roof, analyze_rank, record_precisions
from ceiling.trace.ranks import cross_rank
from ceiling.trace.reader import read_traces, trace_files, without_gc
from ceiling.trace.results import TraceDevice, TraceResult


def analyze(
    path: str | Path,
    spec: str | None = None,
    profile: str | Path | None = None,
    dtype: str | None = None,
) -> TraceResult:
    """Explain a torch.profiler trace (a file, .json.gz, or a folder of per-rank files).

    The device is `spec` (a catalog name), else `profile` (a saved machine profile), else
    the device the trace names (its deviceProperties), matched in the catalog. `dtype`
    overrides the dtype MFU is measured against (default: the one most matmul FLOPs use).
    """
    with without_gc():
        return _analyze(path, spec, profile, dtype)


def _analyze(path, spec, profile, dtype) -> TraceResult:
    notes: list[str] = []
    traces = read_traces(path)
    cost = _cost_rule(traces)
    if Path(path).is_dir():
        skipped = len(trace_files(path)) - len(traces)
        if skipped:
            notes.append(f"{skipped} JSON file(s) in the folder are not traces: passed over")
    records = [optree.counted_ops(t.cpu_ops, cost) for t in traces]
    links = [Links(t, r) for t, r in zip(traces, records, strict=True)]  # may add records
    precisions = [record_precisions(t, li) for t, li in zip(traces, links, strict=True)]
    spec_obj, device = _device(traces, spec, profile, notes)
    roof = None
    if spec_obj is not None:
        from ceiling.hardware.catalog import normalize_dtype
        from ceiling.model.mfu import peak_key

        main = dtype or _main_dtype(records, precisions)
        key = peak_key(normalize_dtype(main), False, spec_obj.kind)
        try:
            main = spec_obj.peak(key)
        except UnsupportedOnDevice as exc:
            notes.append(f"{exc}: no MFU or roofline")
        else:
            device.peak_key, device.peak_flops_per_s = key, main
            roof = Roof(_peak_of(spec_obj), main, spec_obj.memory_bandwidth_bytes_per_s)
    ranks = [
        analyze_rank(t, r, roof, t.rank, li, p)
        for t, r, li, p in zip(traces, records, links, precisions, strict=True)
    ]
    if not all(r.shapes_recorded for r in ranks):
        notes.append(
            "shapes were not recorded (torch.profiler record_shapes=False): FLOPs, MFU and "
            "the roofline are unknown, not zero"
        )
    return TraceResult(
        path=str(path),
        device=device,
        ranks=ranks,
        cross=cross_rank(ranks, device.link_bandwidth_bytes_per_s),
        notes=notes,
    )


def _cost_rule(traces):
    """The op cost rule: shapes are replayed on torch's meta device; a trace without any
    recorded shapes has nothing to replay, so torch is not even loaded for it (the kernels'
    names still tell what each one is)."""
    if not any("Input Dims" in e.args for t in traces for e in t.cpu_ops):
        return lambda name, args: None
    from ceiling.trace.op_cost import cost

    return cost


def _peak_of(spec_obj):
    def peak(dtype_key: str | None) -> float | None:
        if dtype_key is None:
            return None
        return spec_obj.peak_flops_per_s.get(dtype_key)

    return peak


def _main_dtype(records, precisions) -> str:
    """The dtype most model FLOPs ran in (the kernel's precision over the op's dtype)."""
    flops: dict[str, float] = defaultdict(float)
    for recs, ran_in in zip(records, precisions, strict=True):
        for i, r in enumerate(recs):
            c = r.cost
            dt = ran_in.get(i) or (c.dtype if c is not None else None)
            if c is not None and c.category in MODEL_CATEGORIES and dt:
                flops[dt] += c.flops or 1.0
    return max(flops, key=flops.get) if flops else "fp32"


def _device(traces, spec, profile, notes):
    """(DeviceSpec or None, TraceDevice) by the one precedence rule: --spec, --profile,
    the trace's own device name; for a CPU trace recorded here, this machine's profile."""
    if spec is not None or profile is not None:
        from ceiling.hardware.resolve import resolve_device

        prefer = "cuda" if any(t.on_gpu for t in traces) else "cpu"
        s = resolve_device(spec, profile, prefer=prefer)
        source = f"--spec {spec}" if spec is not None else f"machine profile {profile}"
        return s, _trace_device(s, source)
    on_gpu = any(t.on_gpu for t in traces)
    props = [d for t in traces for d in t.devices[:1]] or [
        {"name": n} for t in traces for n in t.device_names[:1]
    ]
    if not props and not on_gpu and (here := _this_machine(traces)) is not None:
        return here, _trace_device(here, "this machine's profile (the trace was recorded here)")
    if not props:
        if on_gpu:
            notes.append(
                "the trace does not name its GPU (no deviceProperties): pass --spec NAME "
                "(`ceiling specs` lists them) for MFU and the roofline"
            )
            return None, TraceDevice(None, "not named in the trace")
        notes.append(
            "the trace names no device (a CPU run): pass --spec NAME or --profile FILE for "
            "MFU and the roofline"
        )
        return None, TraceDevice(None, "none")
    from ceiling.hardware.identify import identify

    found = identify(props[0])
    name = str(props[0].get("name") or "unnamed device")
    if found is None:
        notes.append(
            f"device {name!r} from the trace is not in the catalog: MFU and the roofline are "
            "unavailable; pass --spec NAME (`ceiling specs` lists them)"
        )
        return None, TraceDevice(name, "trace deviceProperties (not in the catalog)")
    names = sorted({str(p.get("name")) for p in props})
    if len(names) > 1:
        notes.append(f"the trace names several devices ({', '.join(names)}); using {name}")
    return found.spec, _trace_device(found.spec, f"trace deviceProperties, {found.how}")


def _this_machine(traces):
    """The saved profile of this machine when every trace was recorded on it, else None."""
    import socket

    if not all(t.host_name == socket.gethostname() for t in traces):
        return None
    from ceiling.hardware.resolve import resolve_device

    try:  # the saved profile by the one rule; refused when none is saved
        return resolve_device(None, None, prefer="cpu")
    except CeilingError:
        return None


def _trace_device(s, source: str) -> TraceDevice:
    return TraceDevice(
        name=s.name,
        source=source,
        kind=s.kind,
        bandwidth_bytes_per_s=s.memory_bandwidth_bytes_per_s,
        link_bandwidth_bytes_per_s=s.link_bandwidth_bytes_per_s,
    )
