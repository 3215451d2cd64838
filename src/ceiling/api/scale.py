"""Measured scaling as a result: `ceiling.scale("synthetic", workers=[1, 2, 4])` runs a
workload on 1..N workers and fits Amdahl, Gustafson, Karp–Flatt and the USL to it."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ceiling.api.arguments import BadArgument, checked
from ceiling.api.result import Result

DEVICES = ("auto", "cpu", "cuda")


@dataclass(frozen=True)
class ScaleResult(Result):
    """The measured points per worker count (time, speedup, efficiency, Karp–Flatt, phases
    per rank), the fits (`fit`; None with one worker count), notes and warnings: `summary`
    is the record `ceiling scale --json` prints."""

    summary: dict[str, Any]
    title = "Measured scaling"

    @property
    def points(self) -> list[dict[str, Any]]:
        return self.summary["points"]

    @property
    def fit(self) -> dict[str, Any] | None:
        return self.summary["fit"]

    def record(self) -> dict[str, Any]:
        return dict(self.summary)

    def heading(self) -> str:
        s = self.summary
        verdict = f": {s['fit']['verdict']}" if s["fit"] is not None else ""
        return f"{s['workload']}: {s['mode']} scaling on {s['backend']}{verdict}"

    def figure(self):
        """Measured speedup beside each law's fit, and Karp–Flatt against N."""
        from ceiling.errors import InvalidInput
        from ceiling.render import scaling_plot

        if self.fit is None:
            raise InvalidInput("a figure needs at least two worker counts, e.g. workers=[1, 2]")
        s = self.summary
        return scaling_plot.scaling_figure(s, title=f"{s['workload']} ({s['mode']} scaling)")


def _counts(values: Iterable[int], argument: str) -> list[int]:
    counts = sorted(set(values))
    if not counts or counts[0] < 1:
        raise BadArgument(argument, f"must be whole numbers ≥ 1, got {list(values)!r}")
    return counts


def cpu_cores() -> int:
    """The cores this process may run on: the most workers that compute at the same time."""
    from ceiling.measure.scale import cpu_cores as cores

    return cores()


@checked
def scale(
    workload: str,
    *,
    workers: Iterable[int] = (1, 2, 4),
    mode: str = "strong",
    backend: str = "processes",
    steps: int = 3,
    warmup: int = 1,
    imbalance: float = 0.0,
    threads_per_worker: int | None = None,
    serial: float = 0.1,
    work_ms: float = 500.0,
    comm_bytes: float | str = 0,
    size: int = 1024,
    iterations: int = 2_000_000,
    model: str = "tiny",
    batch: int = 8,
    seq: int = 64,
    device: str = "auto",
    timeout_s: float = 300.0,
    stall_timeout_s: float = 30.0,
    predict: Iterable[int] | None = None,
    on_progress: Callable[[str], None] | None = None,
) -> ScaleResult | None:
    """Measure `workload` on each worker count and fit the scaling laws.

    `workload`: synthetic (a known `serial` fraction of `work_ms`, sleeping; `comm_bytes`
    all-reduced per step), matmul (a `size`² matmul split across workers), python (a
    pure-Python loop of `iterations`: holds the GIL), ddp (a data-parallel step of the
    built-in GPT `model`, `batch`, `seq`), or MODULE:CALLABLE called once per step as
    callable(ctx). `mode` strong splits a fixed problem N ways, weak grows it with N;
    `backend` processes (torch.distributed ranks spawned here, or the ranks of `torchrun`)
    or threads. `imbalance` gives the last worker (1 + imbalance)× the share. `predict`:
    worker counts to extrapolate the fits to. `on_progress(message)` is told each step of
    the run. Under torchrun, ranks other than 0 return None (rank 0 reports)."""
    from ceiling.measure import scale as scale_run
    from ceiling.render import scaling_summary

    if device not in DEVICES:
        raise BadArgument("device", f"must be auto, cpu or cuda, got {device!r}")
    counts = _counts(workers, "workers")
    predict_ns = [float(n) for n in _counts(predict, "predict")] if predict is not None else None
    if ":" in workload:  # the user's own: a module that does not load fails before any worker
        from ceiling.usercode import load_callable

        load_callable(workload)
    cfg = scale_run.ScaleConfig(
        workload=workload,
        workers=tuple(counts),
        mode=mode,
        backend=backend,
        steps=steps,
        warmup_steps=warmup,
        imbalance=imbalance,
        threads_per_worker=threads_per_worker,
        device=device,
        timeout_s=timeout_s,
        stall_s=stall_timeout_s,
        options=_workload_options(
            workload, serial, work_ms, comm_bytes, size, iterations, model, batch, seq
        ),
    )
    raw = scale_run.run_scaling(cfg, on_progress=on_progress)
    if raw is None:  # a rank other than 0 under torchrun: rank 0 reports
        return None
    summary = scaling_summary.summarize_run(raw, predict_ns)
    _warn_skipped(summary, cfg.workers, raw.get("world_size"))
    return ScaleResult(summary)


def _workload_options(workload: str, serial, work_ms, comm_bytes, size, iterations, model,
                      batch, seq) -> dict[str, Any]:  # fmt: skip
    """The options of a built-in workload (none for the user's own)."""
    from ceiling.units import parse_bytes

    return {
        "synthetic": {
            "serial": serial,
            "work_s": work_ms / 1e3,
            "comm_bytes": parse_bytes(comm_bytes),
        },
        "matmul": {"size": size},
        "python": {"iterations": iterations},
        "ddp": {"model": model, "batch": batch, "seq": seq},
    }.get(workload, {})


def _warn_skipped(summary: dict[str, Any], workers: tuple[int, ...], world_size) -> None:
    """Warn of the worker counts a launcher's world was too small to measure."""
    if len(summary["points"]) < len(workers):
        measured = {p["n"] for p in summary["points"]}
        skipped = [n for n in workers if n not in measured]
        summary["warnings"].append(
            f"N = {', '.join(map(str, skipped))} skipped: larger than the launcher's world size "
            f"({world_size})"
        )
