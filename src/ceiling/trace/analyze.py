"""What `ceiling.trace(path)` does: read the trace(s), count each op, place it on the device's
roofline, split each step's time, compare the ranks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ceiling.errors import CeilingError, InvalidInput, UnsupportedOnDevice
from ceiling.trace.engines import check_dask, default_workers, run_ranks
from ceiling.trace.rank_summary import Prepared, TraceFacts
from ceiling.trace.ranks import cross_rank
from ceiling.trace.reader import NotATrace, read_trace, trace_files, without_gc
from ceiling.trace.results import TraceAnalysis, TraceDevice


def analyze(path: str | Path, **options: Any) -> TraceAnalysis:
    """The analysis behind `ceiling.trace` (`api/trace.py`, whose docstring says what each
    option does), as plain data: no figure, no notebook drawing of its own."""
    questions = _questions(options.pop("critical_path", False), options.pop("what_if", None))
    with without_gc():
        return _analyze(path, questions, **options)


def _questions(critical_path, what_if) -> list | None:
    """The what-if questions to answer on the critical path; None: no critical path."""
    if not isinstance(critical_path, bool):
        raise InvalidInput(f"critical_path must be True or False, got {critical_path!r}")
    if what_if is None:
        return [] if critical_path else None
    from ceiling.trace.what_if import parse

    return parse(what_if)


def _check_engine(workers, dask, progress) -> None:
    """How the ranks are read, refused in one line before any is."""
    if workers is not None and (
        isinstance(workers, bool) or not isinstance(workers, int) or workers < 1
    ):
        raise InvalidInput(f"workers must be a whole number ≥ 1, got {workers!r}")
    if dask is not None and not isinstance(dask, str):
        raise InvalidInput(f"dask must be a scheduler's address or 'local', got {dask!r}")
    if dask is not None:
        check_dask(dask)
    if progress is not None and not callable(progress):
        raise InvalidInput(f"progress must be a function of (done, total), got {progress!r}")


def _analyze(
    path,
    questions,
    spec=None,
    machine_profile=None,
    dtype=None,
    workers=None,
    dask=None,
    progress=None,
) -> TraceAnalysis:
    from ceiling.hardware.resolve import check_one_device

    check_one_device(spec, machine_profile)  # before any file is read: the one device rule
    notes: list[str] = []
    files = trace_files(path)
    _check_engine(workers, dask, progress)
    # The first trace decides the device and the dtype of the peak for every rank; read here
    # (as a pool reads ranks here too, within its memory budget) and summarised like the rest.
    n = workers if workers is not None else default_workers(len(files) - 1)
    facts, first, skipped = _first(files)
    machine, device = _device([facts], spec, machine_profile, notes)
    key = _peak_key(machine, device, dtype or facts.main_dtype, notes)
    summaries = [(facts.rank, first.summary(machine, key, questions))]
    del first  # the first trace is let go like every other
    rest = [str(f) for f in files[skipped + len(summaries) :]]
    for done in run_ranks(rest, machine, key, n, dask, progress, questions):
        if done is None:
            skipped += 1
        else:
            summaries.append(done)
    if skipped:
        notes.append(f"{skipped} JSON file(s) in the folder are not traces: passed over")
    ranks = _numbered(summaries, notes)
    names = sorted({r.device_name for r in ranks if r.device_name})
    if len(names) > 1 and spec is None and machine_profile is None:
        notes.append(
            f"the traces name different devices ({', '.join(names)}): a folder is read as one "
            f"job's ranks, each placed on {device.name or 'the first trace'}'s figures and "
            "compared with the "
            "others; read each device's traces apart"
        )
    for r in ranks:
        if r.shapes_recorded and r.model_flops_per_step is None:
            notes.append(_uncounted(r))
    if not all(r.shapes_recorded for r in ranks):
        notes.append(
            "shapes were not recorded (torch.profiler record_shapes=False): FLOPs, MFU and "
            "the roofline are unknown, not zero"
        )
    return TraceAnalysis(
        path=str(path),
        device=device,
        ranks=ranks,
        cross=cross_rank(ranks, device.link_bandwidth_bytes_per_s),
        notes=notes,
    )


def _first(files) -> tuple[TraceFacts, Prepared, int]:
    """The first file that is a trace: its facts, the trace itself, and the number of files
    before it that are JSON but no trace."""
    for skipped, f in enumerate(files):
        try:
            first = Prepared.of(read_trace(f))
        except NotATrace:
            if len(files) == 1:
                raise
            continue
        return TraceFacts.of(first), first, skipped
    raise NotATrace(f"{files[0]}: not a profiler trace (no traceEvents)")


def _peak_key(machine, device: TraceDevice, dtype: str, notes: list[str]) -> str | None:
    """The peak MFU is measured against (device's figures set), None when the device has
    none in `dtype`."""
    if machine is None:
        return None
    from ceiling.hardware.catalog import normalize_dtype
    from ceiling.model.mfu import peak_key

    key = peak_key(normalize_dtype(dtype), False, machine.kind)
    try:
        machine.spec.peak(key)
    except UnsupportedOnDevice as exc:
        notes.append(f"{exc}: no MFU or roofline")
        return None
    device.peak_key, device.peak_flops_per_s = key, machine.datasheet_peak(key)
    if device.peak_flops_per_s is None:
        notes.append(f"{machine.name} has no datasheet {key} peak: no MFU")
    return key


def _uncounted(rank) -> str:
    """Why a rank's model FLOPs are unknown though shapes were recorded: the ops whose
    arithmetic could not be counted from what the trace holds, by time."""
    ops: dict[str, float] = {}
    for o in rank.ops:
        if o.flops is None and o.category in ("matmul", "attention", "unknown"):
            ops[o.name] = ops.get(o.name, 0.0) + o.time_s
    top = sorted(ops, key=ops.get, reverse=True)[:3]
    why = (
        " (PyTorch 1.8's profiler records no convolution's stride, padding or groups)"
        if any("convolution" in name for name in top)
        else ""
    )
    return (
        f"rank {rank.rank}: model FLOPs unknown, not zero: the trace does not hold what "
        f"counting {', '.join(top) or 'some ops'} needs{why}"
    )


def _numbered(summaries, notes: list[str]) -> list:
    """Ranks by the headers' `distributedInfo`, else by file order (said when files claim
    one rank: copies of one rank's file, or files of several jobs, read as one job)."""
    named = [r for r, _ in summaries]
    ranks = [s for _, s in summaries]
    if None in named or len(set(named)) != len(named):
        claimed = [r for r in named if r is not None]
        twice = sorted({r for r in claimed if claimed.count(r) > 1})
        if twice:
            files = [s.path for (r, s) in summaries if r == twice[0]]
            notes.append(
                f"{len(files)} files say they are rank {twice[0]} ({', '.join(map(str, files[:3]))}"
                f"{', …' if len(files) > 3 else ''}): numbered by file order instead, as ranks "
                "of one job; copies of one rank's trace or traces of several jobs are not one "
                "job, and its collectives and straggler would read wrong"
            )
        named = list(range(len(ranks)))
    for r, k in zip(ranks, named, strict=True):
        r.rank = k
    return sorted(ranks, key=lambda r: r.rank)


def _device(traces, spec, profile, notes):
    """(Machine or None, TraceDevice) by the one precedence rule: --spec, --profile, the
    trace's own device properties; for a CPU trace recorded here, this machine's profile."""
    from ceiling.hardware import resolve

    on_gpu = any(t.on_gpu for t in traces)
    if spec is not None or profile is not None:
        m = resolve.resolve(spec, profile, prefer="cuda" if on_gpu else "cpu")
        source = f"--spec {spec}" if spec is not None else f"machine profile {profile}"
        return m, _trace_device(m, source)
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
    found, _ = resolve.from_trace(props[0])
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
    return found, _trace_device(found, found.source)


def _this_machine(traces):
    """The saved profile of this machine when every trace was recorded on it, else None."""
    import socket

    if not all(t.host_name == socket.gethostname() for t in traces):
        return None
    from ceiling.hardware.resolve import this_machine

    try:  # the saved profile, with this CPU's theoretical peak; refused when none is saved
        return this_machine("cpu")
    except CeilingError:
        return None


def _trace_device(m, source: str) -> TraceDevice:
    """The trace's device: the roofline it is placed under (measured for a profile) and
    the dense datasheet peaks MFU is measured against."""
    s = m.spec
    return TraceDevice(
        name=s.name,
        source=source,
        kind=s.kind,
        bandwidth_bytes_per_s=s.memory_bandwidth_bytes_per_s,
        link_bandwidth_bytes_per_s=s.link_bandwidth_bytes_per_s,
        peaks_flops_per_s=m.datasheet_peaks,
        measured_peaks_flops_per_s=dict(m.measured.peak_flops_per_s) if m.measured else {},
    )
