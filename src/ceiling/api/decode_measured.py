"""Real decode steps timed here beside this machine's ceiling: `ceiling.decode(model,
measure=True)`, as `ceiling decode MODEL --measure`.

The model is built here with random weights; KV-cache decode steps are timed at each batch
and set against the local ceiling (the saved machine profile, else the detected CPU's
theoretical peak with a quick bandwidth measurement), with MBU, MFU and a waterfall.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ceiling.api.arguments import argument_named
from ceiling.api.decode_views import ceiling_json, decode_figure
from ceiling.api.result import Result
from ceiling.errors import InvalidInput, argument


def refuse_with_measure(spec, tp, kv_dtype, activations, prompt) -> None:
    """Settings that measuring cannot honour, refused before anything runs."""
    if spec is not None:
        raise InvalidInput(
            f"{argument('measure')} compares with this machine's ceiling: drop "
            f"{argument('spec')} (or pass {argument('machine_profile')})"
        )
    if tp != 1:
        raise InvalidInput(f"{argument('measure')} runs on one device: drop {argument('tp')}")
    for name, value in (
        ("kv_dtype", kv_dtype),
        ("activations", activations),
        ("prompt", prompt),
    ):
        if value is not None:
            raise InvalidInput(
                f"{argument('measure')} keeps weights, activations and KV cache in one dtype "
                f"and times decode steps only: drop {argument(name)}"
            )


def _row(mr, cr) -> dict[str, Any]:
    """One batch: the ceiling's row with the measured rates (the plain rate keys are
    measured; the ceiling's carry "ceiling_")."""
    return {
        **cr.to_json(),
        "tokens_per_s": mr.measured_tokens_per_s,
        "tokens_per_s_per_sequence": mr.measured_tokens_per_s / mr.batch,
        "ceiling_tokens_per_s_per_sequence": mr.ceiling_tokens_per_s / mr.batch,
        "step_time_s": mr.step_time_s,
        "bound": mr.bound,
        "measured_tokens_per_s": mr.measured_tokens_per_s,
        "best_tokens_per_s": mr.best_tokens_per_s,
        "ceiling_tokens_per_s": mr.ceiling_tokens_per_s,
        "memory_roof_tokens_per_s": mr.memory_roof_tokens_per_s,
        "compute_roof_tokens_per_s": mr.compute_roof_tokens_per_s,
        "share_of_ceiling": mr.share_of_ceiling,
        "mbu": mr.mbu,
        "mfu": mr.mfu,
        "noisy": mr.noisy,
        "samples": mr.samples,
        "ceiling_step_time_s": cr.step_time_s,
        "expected_tokens_per_s": mr.expected_tokens_per_s,
        "expected_limited_by": mr.expected_limited_by,
        "waterfall": [
            {"name": b.name, "seconds": b.seconds, "recover": b.recover} for b in mr.waterfall or []
        ],
    }


@dataclass(frozen=True)
class MeasuredDecodeResult(Result):
    """Measured decode against the local ceiling: `run` (the timed steps), `comparison`
    (rows per batch: measured and ceiling tokens/s, MBU, MFU, expected, waterfall), `roofs`
    (this machine's per-op floor and cache bandwidth)."""

    model: Any  # TransformerConfig
    run: Any  # measure.decode run
    comparison: Any  # measure.decode.compare_decode result
    roofs: Any  # measure.roofs.local_roofs result
    local: Any  # the local ceiling (its spec)
    context: int
    title = "Measured decode"

    @property
    def rows(self) -> list[Any]:
        return self.comparison.rows

    @property
    def ceiling(self) -> Any:
        return self.comparison.ceiling

    def why_low(self) -> str:
        from ceiling.render.decode_expected import why_measured_low

        return why_measured_low(self.comparison, self.roofs)

    def record(self) -> dict[str, Any]:
        cmp, run, c = self.comparison, self.run, self.comparison.ceiling
        out = ceiling_json(self.model, c)
        out.update(
            {
                "measured": True,
                "method_version": run.method_version,
                "environment": run.environment,
                "measure_device": run.device,
                "ceiling_source": cmp.ceiling_source,
                "cache_bytes": cmp.cache_bytes,
                "in_cache": cmp.in_cache,
                "notes": cmp.notes,
                "why_low": self.why_low(),
                "per_op_s": self.roofs.per_op_s,
                "cache_bandwidth_bytes_per_s": self.roofs.cache_bandwidth_bytes_per_s,
                "rows": [_row(mr, cr) for mr, cr in zip(cmp.rows, c.rows, strict=True)],
            }
        )
        return out

    def heading(self) -> str:
        return f"{self.model.name} decoded on {self.run.device} ({self.run.dtype})"

    def figure(self):
        from ceiling.model.decode import DecodeSetup

        cmp = self.comparison
        setup = DecodeSetup(weights_dtype=self.run.dtype, context=self.context,
                            weights_counted="read")  # fmt: skip
        measured = ([r.batch for r in cmp.rows], [r.measured_tokens_per_s for r in cmp.rows])
        return decode_figure(
            self.model, self.local.spec, setup, cmp.ceiling, measured, cmp.in_cache
        )


def decode_measured(
    cfg,
    batches: list[int],
    context: int,
    *,
    weights: str | None = None,
    device: str | None = None,
    profile: Path | str | None = None,
    on_batch: Callable[[int], None] | None = None,
) -> MeasuredDecodeResult:
    """Time real decode steps of the model `cfg` at each batch here (see the module)."""
    from ceiling.measure.decode import (
        MEASURED_DTYPES,
        check_device,
        compare_decode,
        decode_matmul_rates,
        default_device,
        local_ceiling,
        run_decode,
    )
    from ceiling.measure.roofs import local_roofs
    from ceiling.vocabulary import normalize_dtype

    dev_name = check_device(device or default_device())
    if weights is not None:
        with argument_named("weights"):
            weights = normalize_dtype(weights, MEASURED_DTYPES, what="weights", usage=" to measure")
    local = local_ceiling(dev_name, profile)
    run = run_decode(cfg, sorted(set(batches)), context, dev_name, weights, on_batch=on_batch)
    roofs = local_roofs(dev_name, local.cache_bytes, profile)
    rates = decode_matmul_rates(run, local.cache_bytes)
    cmp = compare_decode(run, local, roofs, rates)
    return MeasuredDecodeResult(cfg, run, cmp, roofs, local, context)
