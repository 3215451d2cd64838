"""`ceiling bench`: every benchmark on one device, and the machine profile built from them."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import functools
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ceiling.hardware.load import LoadWatch, record_busy
from ceiling.measure import machine
from ceiling.measure.blas import BLAS_DTYPES, BlasResult, framework_gap, run_numpy_matmul
from ceiling.measure.matmul import MatmulResult, plan_matmul, run_matmul
from ceiling.measure.memory import StreamResult, bandwidth_ceiling, run_naive_triad, run_stream
from ceiling.measure.overhead import OverheadResult, run_overhead
from ceiling.measure.stats import summarize
from ceiling.measure.timer import METHOD_VERSION
from ceiling.measure.transfer import (
    QUICK_SIZES_BYTES,
    SIZES_BYTES,
    TransferResult,
    run_transfer,
    skip_reason,
)

PARTS = ("matmul", "memory", "overhead", "transfer")


@dataclass(frozen=True)
class Budgets:
    """Warm-up and measurement time per timed case, in milliseconds."""

    matmul_warmup_ms: float
    matmul_ms: float
    memory_warmup_ms: float
    memory_ms: float
    overhead_ms: float
    transfer_ms: float


QUICK = Budgets(25, 200, 10, 250, 80, 50)
FULL = Budgets(100, 600, 20, 500, 250, 200)


@dataclass
class BenchReport:
    """What finished; `interrupted` when Ctrl-C stopped the run early."""

    device: str
    device_name: str
    environment: dict[str, Any]
    quick: bool
    matmul: list[MatmulResult] = field(default_factory=list)
    matmul_skipped: dict[str, str] = field(default_factory=dict)
    # numpy's matmul at the CPU shapes torch's ran at: the best BLAS path beside torch's
    matmul_blas: list[BlasResult] = field(default_factory=list)
    memory: list[StreamResult] = field(default_factory=list)
    naive_triad: StreamResult | None = None
    overhead: OverheadResult | None = None
    transfer: list[TransferResult] = field(default_factory=list)
    transfer_skipped: str | None = None
    interrupted: bool = False
    datasheet_note: str | None = None
    telemetry_reader: Any = field(default=None, repr=False)
    telemetry_unavailable: str | None = None
    # the machine's load over the run (hardware.load.LoadRecord.to_json), also kept in the
    # environment so the profile built from it knows it
    load: dict[str, Any] | None = None

    @property
    def busy_reasons(self) -> list[str]:
        return record_busy(self.load)

    @property
    def busy(self) -> bool:
        return bool(self.busy_reasons)

    def read_telemetry(self) -> dict[str, Any] | None:
        return self.telemetry_reader.read() if self.telemetry_reader is not None else None

    def telemetry_summary(self) -> dict[str, Any]:
        """Burst vs sustained clocks over the run's cases, and whether a clock fell."""
        from ceiling.hardware.telemetry import summarize

        if self.telemetry_reader is None:
            return {"source": None, "unavailable": self.telemetry_unavailable}
        rows = [r.telemetry for r in (*self.matmul, *self.memory) if r.telemetry]
        rows.sort(key=lambda t: t.get("t_s", 0.0))
        return {"source": self.telemetry_reader.source, **summarize(rows)}

    def to_json(self) -> dict[str, Any]:
        return {
            "method_version": METHOD_VERSION,
            "device": self.device,
            "device_name": self.device_name,
            "quick": self.quick,
            "interrupted": self.interrupted,
            "environment": self.environment,
            "load": self.load,
            "busy": self.busy,
            "busy_reasons": self.busy_reasons,
            "units": "seconds; tflops = 1e12 FLOP/s (multiply-add = 2 FLOPs); GB = 1e9 bytes",
            "matmul": [r.row() for r in self.matmul],
            "matmul_skipped": dict(self.matmul_skipped),
            "matmul_blas": [r.row() for r in self.matmul_blas],
            "matmul_blas_gap": framework_gap(
                [r.row() for r in self.matmul], [r.row() for r in self.matmul_blas], self.busy
            ),
            "memory": [r.row() for r in self.memory],
            "memory_naive_numpy": self.naive_triad.row() if self.naive_triad else None,
            "overhead": self.overhead.row() if self.overhead else None,
            "transfer": [r.row() for r in self.transfer],
            "transfer_skipped": self.transfer_skipped,
            "datasheet_note": self.datasheet_note,
            "telemetry": self.telemetry_summary(),
        }


def new_report(device: str, quick: bool) -> BenchReport:
    reader, why_not = machine.telemetry_reader(device)
    return BenchReport(
        device=device,
        device_name=machine.device_name(device),
        environment=machine.environment(device),
        quick=quick,
        datasheet_note=machine.datasheet_note(device),
        telemetry_reader=reader,
        telemetry_unavailable=why_not,
    )


Progress = Callable[[str], None]


@contextlib.contextmanager
def watched(report: BenchReport, watch: Callable[[], LoadWatch] = LoadWatch) -> Iterator[None]:
    """Record the machine's load over the block in `report` (and its environment), also when
    Ctrl-C ends the block early."""
    with watch() as w:
        try:
            yield
        finally:
            report.load = w.so_far().to_json()
            report.environment["load"] = report.load


def bench_matmul(
    report: BenchReport,
    *,
    dtypes: list[str] | None = None,
    sizes: list[int] | None = None,
    shapes: list[tuple[int, int, int]] | None = None,
    budgets: Budgets = FULL,
    progress: Progress | None = None,
) -> None:
    plan = plan_matmul(report.device, dtypes, sizes, shapes, quick=report.quick)
    report.matmul_skipped.update(plan.skipped)
    peaks = machine.datasheet_peaks(report.device)
    for dtype, shapes_, native in plan.runs:
        for m, n, k in shapes_:
            beside = _beside_blas(report.device, dtype)
            if progress:
                progress(f"matmul {dtype} {m}x{n}x{k}" + (" beside numpy's BLAS" if beside else ""))

            torch_run = functools.partial(
                run_matmul, dtype, m, n, k, report.device,
                peak_flops_per_s=peaks.get(dtype), native=native,
            )  # fmt: skip
            if not beside:
                result = torch_run(warmup_ms=budgets.matmul_warmup_ms, budget_ms=budgets.matmul_ms)
            else:
                result, blas = _interleaved(torch_run, dtype, (m, n, k), budgets)
                report.matmul_blas.append(blas)
            telemetry = report.read_telemetry()  # the clocks the timed calls ended at
            report.matmul.append(dataclasses.replace(result, telemetry=telemetry))


# Rounds of torch's matmul and numpy's, alternated, each with its share of the time budget:
# other work that comes and goes then slows both alike, and the rounds' ratios show the spread.
BLAS_ROUNDS = 5


def _interleaved(
    torch_run: Callable[..., MatmulResult],
    dtype: str,
    shape: tuple[int, int, int],
    budgets: Budgets,
    rounds: int = BLAS_ROUNDS,
) -> tuple[MatmulResult, BlasResult]:
    """torch's and numpy's matmul at one shape in alternating rounds: each library's samples
    pooled, and the torch/BLAS rate ratio of every round on the BLAS result."""
    share = budgets.matmul_ms / rounds
    mine: list[MatmulResult] = []
    theirs: list[BlasResult] = []
    for i in range(rounds):
        warmup_ms = budgets.matmul_warmup_ms if i == 0 else 0.0  # later rounds: 2 calls
        mine.append(torch_run(warmup_ms=warmup_ms, budget_ms=share))
        theirs.append(run_numpy_matmul(dtype, *shape, warmup_ms=warmup_ms, budget_ms=share))
    ratios = tuple(b.stats.min / t.stats.min for t, b in zip(mine, theirs, strict=True))
    return _pooled(mine), dataclasses.replace(_pooled(theirs), round_ratios=ratios)


def _pooled(runs: list):
    """One result from rounds of the same measurement: every sample, the best round's rest."""
    samples = [x for r in runs for x in r.samples]
    best = min(runs, key=lambda r: r.stats.min)
    return dataclasses.replace(best, samples=samples, stats=summarize(samples))


def _beside_blas(device: str, dtype: str) -> bool:
    """Whether numpy's BLAS runs beside torch's matmul: on the CPU, for fp32 and fp64."""
    return not machine.is_cuda(device) and dtype in BLAS_DTYPES


def bench_memory(
    report: BenchReport,
    *,
    budgets: Budgets = FULL,
    naive: bool = True,
    elements: int | None = None,
    progress: Progress | None = None,
) -> None:
    report.memory = []
    run_stream(
        report.device,
        into=report.memory,
        elements=elements,
        warmup_ms=budgets.memory_warmup_ms,
        budget_ms=budgets.memory_ms,
        on_kernel=(lambda k: progress(f"memory {k}")) if progress else None,
        read_telemetry=report.read_telemetry,
    )
    if naive:
        if progress:
            progress("memory triad, naive numpy")
        report.naive_triad = run_naive_triad(
            report.memory[0].elements,
            warmup_ms=budgets.memory_warmup_ms,
            budget_ms=budgets.memory_ms,
        )


def bench_overhead(
    report: BenchReport, *, budgets: Budgets = FULL, progress: Progress | None = None
) -> None:
    if progress:
        progress("overhead")
    report.overhead = run_overhead(report.device, budget_ms=budgets.overhead_ms, quick=report.quick)


def bench_transfer(
    report: BenchReport, *, budgets: Budgets = FULL, progress: Progress | None = None
) -> None:
    reason = skip_reason(report.device)
    if reason:
        report.transfer_skipped = reason
        return
    if progress:
        progress("transfer")
    report.transfer = run_transfer(
        report.device,
        sizes=QUICK_SIZES_BYTES if report.quick else SIZES_BYTES,
        budget_ms=budgets.transfer_ms,
    )


def planned_steps(
    report: BenchReport,
    parts: tuple[str, ...] = PARTS,
    *,
    dtypes: list[str] | None = None,
    sizes: list[int] | None = None,
    shapes: list[tuple[int, int, int]] | None = None,
) -> int:
    """How many progress steps a run will report (for a progress bar's length).

    Exact for the default plan; with explicit dtypes it assumes every one of them runs.
    """
    from ceiling.measure.matmul import DEFAULT_SIZES, MATMUL_DTYPES, QUICK_SIZES

    steps = 0
    if "matmul" in parts:
        if dtypes:
            kind = "cuda" if machine.is_cuda(report.device) else "cpu"
            per_dtype = len(shapes or []) + len(sizes or []) or len(
                (QUICK_SIZES if report.quick else DEFAULT_SIZES)[kind]
            )
            asked = {d.strip().lower() for d in dtypes} & set(MATMUL_DTYPES)
            steps += per_dtype * len(asked)
        else:
            plan = plan_matmul(report.device, None, sizes, shapes, quick=report.quick)
            steps += sum(len(s) for _d, s, _ in plan.runs)
    if "memory" in parts:
        from ceiling.measure.memory import KERNELS

        steps += len(KERNELS) + 1  # + the naive numpy triad
    steps += "overhead" in parts
    steps += "transfer" in parts and machine.is_cuda(report.device)
    return steps


def run_all(
    device: str,
    quick: bool,
    progress: Progress | None = None,
    parts: tuple[str, ...] = PARTS,
    after_each: Callable[[BenchReport], None] | None = None,
) -> BenchReport:
    """Run the parts in order; Ctrl-C stops the run and keeps what already finished.
    `after_each(report)` is called as each step starts (the one before it has finished)
    and at the end: a journal keeps what finished with it."""
    report = new_report(device, quick)
    budgets = QUICK if quick else FULL

    def step(text: str) -> None:
        if after_each:
            after_each(report)
        if progress:
            progress(text)

    steps = {
        "matmul": bench_matmul,
        "memory": bench_memory,
        "overhead": bench_overhead,
        "transfer": bench_transfer,
    }
    try:
        with watched(report):
            for part in parts:
                steps[part](report, budgets=budgets, progress=step)
    except KeyboardInterrupt:
        report.interrupted = True
    if after_each:
        after_each(report)
    return report


def finished_rows(report: BenchReport) -> dict[str, list[Any]]:
    """The measurements that have finished, by kind, each list in the order it grows."""
    rows: dict[str, list[Any]] = {
        "matmul": report.matmul,
        "matmul_blas": report.matmul_blas,
        "memory": report.memory,
        "transfer": report.transfer,
    }
    for kind, one in (("memory_naive_numpy", report.naive_triad), ("overhead", report.overhead)):
        if one is not None:
            rows[kind] = [one]
    return rows


def build_profile(report: BenchReport, previous=None):
    """A MachineProfile from a report; devices of `previous` measured elsewhere are kept."""
    from ceiling.hardware.profile import MachineProfile, MeasuredDevice

    peaks: dict[str, float] = {}
    for r in report.matmul:
        peaks[r.dtype] = max(peaks.get(r.dtype, 0.0), r.best_flops_per_s)
    device = report.device
    kind = "cuda" if machine.is_cuda(device) else "cpu"
    bandwidth = bandwidth_ceiling(report.memory) if report.memory else None
    same = [
        d
        for d in (previous.devices if previous else [])
        if (d.name, d.kind) == (report.device_name, kind)
    ]
    if report.interrupted and same:
        # A run stopped early keeps the earlier figures for what it did not reach.
        peaks = {**same[0].peak_flops_per_s, **peaks}
        bandwidth = bandwidth or same[0].bandwidth_bytes_per_s
    l2 = None
    sms = None
    if kind == "cuda":
        l2 = machine.last_level_cache_bytes(device)
        sms = report.environment.get("sms")
    info = machine.cpu_info() if kind == "cpu" else None
    measured = MeasuredDevice(
        name=report.device_name,
        kind=kind,
        peak_flops_per_s=peaks,
        bandwidth_bytes_per_s=bandwidth,
        datasheet_peak_flops_per_s=machine.datasheet_peaks(device),
        datasheet_bandwidth_bytes_per_s=machine.datasheet_bandwidth(device),
        memory_bytes=machine.device_memory_bytes(device),
        l2_bytes=l2,
        sms=sms,
        vendor=(getattr(info, "vendor", "") or "") if info else "nvidia",
        extra={
            k: v
            for k, v in report.to_json().items()
            if k
            in (
                "matmul",
                "matmul_skipped",
                "matmul_blas",
                "matmul_blas_gap",
                "memory",
                "memory_naive_numpy",
                "overhead",
                "quick",
            )
            or k.startswith("transfer")
            # each device keeps the environment it was measured in: the profile's top-level
            # one is the latest run's, which may be another device's
            or k == "environment"
            or k == "telemetry"  # the clocks and power the figures were measured at
        },
    )
    keep = []
    if previous is not None:
        keep = [d for d in previous.devices if (d.name, d.kind) != (measured.name, measured.kind)]
    return MachineProfile(
        method_version=METHOD_VERSION,
        created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        host=socket.gethostname(),
        environment=report.environment,
        devices=[*keep, measured],
    )
