"""Where a training step's time goes, as a result: `ceiling.step("mlp", workers=[0, 2])`
(data wait, host work and device compute for each DataLoader worker count)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ceiling.api.arguments import BadArgument, checked
from ceiling.api.result import Result

DEFAULT_WORKERS = (0, 2, 4)


def _row_json(r) -> dict:
    return {
        "workers": r.workers,
        "step_s": r.step_s,
        "data_s": r.data_s,
        "host_s": r.host_s,
        "compute_s": r.compute_s,
        "sync_s": r.sync_s,
        "data_share": r.data_share,
        "loader_batches_per_s": r.loader_batches_per_s,
        "model_batches_per_s": r.model_batches_per_s,
        "loader_limits": r.loader_limits,
        "serial_fraction": r.serial_fraction,
        "amdahl_ceiling": r.amdahl_ceiling,
        "speedup_2x_device": r.speedup_on_faster_device(2.0),
        "bottleneck": r.bottleneck,
    }


@dataclass(frozen=True)
class StepBreakdownResult(Result):
    """The measured step for each loader worker count (`report`: the profiler's
    `StepReport`: rows of data wait, host and compute, the verdict, the roofs and waterfall
    of the fastest count, the method and environment)."""

    report: Any  # profile.step_run.StepReport
    title = "Training step breakdown"

    @property
    def rows(self) -> list[Any]:
        return self.report.rows

    @property
    def bottleneck(self) -> str:
        return self.report.rows[0].bottleneck

    def record(self) -> dict[str, Any]:
        from ceiling.render import waterfall

        report = self.report
        return {
            "target": report.target,
            "device": report.device,
            "dtype": report.dtype,
            "samples_per_step": report.samples_per_step,
            "slow_data": report.data_delay_s_per_sample > 0,
            "data_delay_s_per_sample": report.data_delay_s_per_sample,
            "compute_s": report.compute_s,
            "threads": report.threads,
            "typical_op_s": report.typical_op_s,
            "rows": [_row_json(r) for r in report.rows],
            "bottleneck": self.bottleneck,
            "verdict": report.verdict,
            "waterfall_workers": report.waterfall_workers,
            "roofs": waterfall.explanation_json(report.explanation),
            "method": report.method,
            "method_version": report.method_version,
            "environment": report.environment,
        }

    def heading(self) -> str:
        r = self.report
        return f"{r.target} training step on {r.device} ({r.dtype}): {self.bottleneck}"

    def figure(self):
        """Step time by loader workers, stacked: data wait, host, compute."""
        from ceiling.render import plots

        report = self.report
        fig, ax = plots.subplots(figsize=(6.4, 4.2))
        labels = [str(r.workers) for r in report.rows]
        bottom = [0.0] * len(report.rows)
        for name, attr in (("data wait", "data_s"), ("host", "host_s"), ("compute", "compute_s")):
            values = [getattr(r, attr) * 1e3 for r in report.rows]
            ax.bar(labels, values, bottom=bottom, label=name)
            bottom = [b + v for b, v in zip(bottom, values, strict=True)]
        ax.set_xlabel("DataLoader workers")
        ax.set_ylabel("time per step (ms)")
        ax.set_title(f"{report.target}: step time by loader workers")
        ax.legend()
        return fig


@checked
def step(
    target: str = "mlp",
    *,
    workers: Iterable[int] = DEFAULT_WORKERS,
    slow_data: bool = False,
    data_delay_ms: float | None = None,
    device: str = "cpu",
    dtype: str = "fp32",
    batch: int | None = None,
    steps: int = 8,
    threads: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> StepBreakdownResult:
    """Split a training step of `target` (mlp, cnn, gpt:tiny, gpt:small, or module:callable /
    file.py:callable returning {'model', 'dataloader', ...}) into data wait, host work and
    device compute, for each DataLoader worker count in `workers`; name the bottleneck and the
    Amdahl ceiling of the serial part. `slow_data` (or `data_delay_ms` per sample) makes the
    built-in dataset sleep; `progress(workers)` is told each worker count as it starts."""
    from ceiling.profile.step_run import measure_step

    counts = tuple(workers)
    if not counts or min(counts) < 0:
        raise BadArgument("workers", f"takes counts ≥ 0 like 0,2,4, got {list(counts)!r}")
    report = measure_step(
        target,
        workers=counts,
        slow_data=slow_data,
        data_delay_s=data_delay_ms / 1e3 if data_delay_ms is not None else None,
        device=device,
        dtype=dtype,
        batch=batch,
        steps=steps,
        threads=threads,
        progress=progress,
    )
    return StepBreakdownResult(report)
