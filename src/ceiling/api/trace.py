"""`ceiling.trace(path)`: the analysis of a torch.profiler trace (`trace/analyze.py`) as a
result that draws its figure and shows itself in a notebook."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

from ceiling.api.result import Result
from ceiling.trace.breakdown import COMPUTE, IDLE, ORDER
from ceiling.trace.results import TraceAnalysis

# the parts a step's time is split into, compute first (`RankResult.mean(part)`)
__all__ = ["COMPUTE", "IDLE", "ORDER", "TraceResult", "trace"]


class TraceResult(TraceAnalysis, Result):
    """A trace's device, its ranks (steps, ops, kernels, collectives, MFU, the critical path
    when asked) and the rows across ranks; `figure()` draws its steps and roofline."""

    @classmethod
    def of(cls, analysis: TraceAnalysis) -> TraceResult:
        return cls(**{f.name: getattr(analysis, f.name) for f in fields(analysis)})

    def figure(self):
        """Step strips, the roofline and the first rank's waterfall (a matplotlib Figure)."""
        from ceiling.render.trace_plot import build_figure

        return build_figure(self)


def trace(
    path: str | Path,
    spec: str | None = None,
    machine_profile: str | Path | None = None,
    dtype: str | None = None,
    workers: int | None = None,
    dask: str | None = None,
    progress=None,
    critical_path: bool = False,
    what_if: str | None = None,
) -> TraceResult:
    """Explain a torch.profiler trace (a file, .json.gz, or a folder of per-rank files).

    The device is `spec` (a catalog name), else `machine_profile` (a saved profile), else
    the device the trace names (its deviceProperties), matched in the catalog. `dtype`
    overrides the dtype MFU is measured against (default: the one most matmul FLOPs use).
    The ranks of a folder are read `workers` at a time in local processes (default: one per
    core; memory: this process holds no trace, only the summaries, and each worker one rank),
    or on the Dask cluster at `dask` ("local", or a scheduler's address);
    `progress(done, total)` is called as ranks finish. `critical_path`: each step's critical
    path through its dependency graph (`TraceResult.critical_path`); `what_if` (implies it):
    questions such as "gemm=2x,comm=overlap,launch=3us,link=400GB/s", each answered as the
    step re-timed on that graph.
    """
    from ceiling.trace.analyze import analyze

    options = dict(spec=spec, machine_profile=machine_profile, dtype=dtype, workers=workers)
    options.update(dask=dask, progress=progress, critical_path=critical_path, what_if=what_if)
    return TraceResult.of(analyze(path, **options))
