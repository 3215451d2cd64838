"""The parallelism planner as a result: `ceiling.plan("llama-3-8b", 64, spec="h100-sxm")`."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ceiling.api.arguments import BadArgument, argument_named, checked
from ceiling.api.result import Result
from ceiling.errors import InvalidInput

# Beyond these no cluster or training run exists, and the search's work grows with them.
MAX_DEVICES = 2**20
MAX_GLOBAL_BATCH = 2**24
MAX_DOUBLINGS = 8


def _count(value: Any, what: str, hi: int) -> int:
    given = value  # refused as written: '1e308', not its 309 digits
    if isinstance(value, str):
        from ceiling.errors import CeilingError
        from ceiling.units import parse_count

        try:
            value = parse_count(value)
        except CeilingError:
            value = None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= hi:
        raise BadArgument(
            what,
            f"must be between 1 and {hi:,} (more is beyond any cluster or training run), "
            f"got {given!r}",
        )
    return value


# A link below a byte per second or above a petabyte per second exists nowhere (and
# 1e-300 B/s would make every time infinite).
BANDWIDTH_RANGE = (1.0, 1e15)


def _bandwidth(value: str | float | None, name: str) -> float | None:
    """A link bandwidth: text with its unit ("100GB/s") or bytes/s."""
    if value is None:  # not given
        return None
    if isinstance(value, str):
        from ceiling.units import parse_bandwidth

        with argument_named(name):
            value = parse_bandwidth(value)
    low, high = BANDWIDTH_RANGE
    if not low <= value <= high:
        raise BadArgument(name, f"must be between 1 B/s and 1 PB/s, got {value:g} B/s")
    return float(value)


def build_cluster(
    spec: str | None,
    profile: Path | str | None,
    gpus: int,
    gpus_per_node: int | None,
    intra_bw: str | float | None,
    inter_bw: str | float | None,
    matmul_efficiency: float | None,
    dtype: str,
):
    """The cluster from a catalog spec, or a measured profile (its efficiencies measured)."""
    from ceiling.hardware.resolve import resolve
    from ceiling.model.cluster import (
        efficiencies_from_profile,
        fp8_efficiency_from_profile,
        make_cluster,
    )
    from ceiling.vocabulary import normalize_dtype

    with argument_named("dtype"):
        dtype = normalize_dtype(dtype)
    mm_eff, mem_eff, source, fp8_eff = matmul_efficiency, None, None, None
    resolved = resolve(spec, profile)
    device = resolved.spec
    if resolved.from_profile:
        from ceiling.hardware.catalog import match_driver_name

        measured = resolved.measured
        device = match_driver_name(measured.name)
        if device is None:
            raise InvalidInput(
                f"the profiled device {measured.name!r} is not in the catalog, so its links "
                "and node are unknown; pass --spec NAME"
            )
        prof_mm, mem_eff = efficiencies_from_profile(measured, device, dtype)
        fp8_eff = fp8_efficiency_from_profile(measured, device)
        if mm_eff is None:
            mm_eff = prof_mm
            source = f"measured by `ceiling bench` ({resolved.profile_path})"
    if dtype not in device.peak_flops_per_s:
        have = ", ".join(device.dtypes)
        raise BadArgument("dtype", f"{dtype}: {device.name} has no such peak (it has {have})")
    if mm_eff is not None and not 0 < mm_eff <= 1:
        raise BadArgument("matmul_efficiency", f"must be in (0, 1], got {mm_eff}")
    cluster = make_cluster(
        device,
        gpus,
        gpus_per_node,
        intra_node_bandwidth_bytes_per_s=_bandwidth(intra_bw, "intra_bw"),
        inter_node_bandwidth_bytes_per_s=_bandwidth(inter_bw, "inter_bw"),
        matmul_efficiency=mm_eff,
        memory_efficiency=mem_eff,
        dtype=dtype,
        efficiency_source=source,
        device_source=resolved.source,
    )
    # A measured FP8 rate prices FP8 GEMMs at their own share of the FP8 peak.
    return replace(cluster, fp8_matmul_efficiency=fp8_eff) if fp8_eff else cluster


def _loss(loss: str) -> str:
    from ceiling.model.parallel import LOSS

    if loss not in LOSS:
        raise BadArgument("loss", f"must be one of {', '.join(LOSS)}, got {loss!r}")
    return loss


def training_job(
    cfg, seq, global_batch, attention, dropout, headroom, dp_overlap, tokens, loss="fp32"
):
    """The Job to plan and whether its kernel and dropout come from the model's published
    training recipe (catalog data) rather than the caller."""
    from ceiling.model.parallel import ATTENTION, Job

    if attention is not None and attention not in ATTENTION:
        raise BadArgument("attention", f"must be one of {', '.join(ATTENTION)}, got {attention!r}")
    recipe = attention is None and dropout is None
    s = seq if seq is not None else min(cfg.max_seq, 4096)
    if s < 1:
        raise BadArgument("seq", f"must be ≥ 1, got {s}")
    if s > cfg.max_seq:
        raise BadArgument(
            "seq",
            f"{s} > {cfg.name}'s {cfg.max_seq} positions; plan a longer context with "
            f"custom:...,max_seq={s}",
        )
    if isinstance(tokens, str):
        from ceiling.units import parse_count

        tokens = parse_count(tokens)
    job = Job(
        cfg,
        _count(global_batch, "global_batch", MAX_GLOBAL_BATCH)
        if global_batch
        else max(1, round(4 * 2**20 / s)),
        s,
        attention=attention if attention is not None else cfg.trained_attention,
        dropout=dropout if dropout is not None else cfg.trained_dropout,
        headroom=headroom,
        overlap_dp=dp_overlap,
        token_budget=float(tokens) if tokens else None,
        loss=_loss(loss),
    )
    return job, recipe


def assumptions(cluster, job, recipe: bool) -> dict:
    fp8 = "fp8" in cluster.device.peak_flops_per_s
    return {
        "matmul_efficiency": cluster.matmul_efficiency,
        "efficiency_source": cluster.efficiency_source,
        "memory_efficiency": cluster.memory_efficiency,
        "attention": job.attention,
        "dropout": job.dropout,
        "attention_and_dropout_from": "the model's published training recipe"
        if recipe
        else "the command line",
        "headroom": job.headroom,
        "loss": job.loss,
        "dp_overlap": "gradient reduction overlaps the last micro-batch's backward"
        if job.overlap_dp
        else "none (gradient reduction after the backward)",
        "tp_overlap": "as each plan's tp_overlap (off unless pinned: tensor-parallel "
        "collectives exposed; on: all but the first of t chunks hidden behind the GEMMs)",
        "attention_efficiency": cluster.attention_efficiency,
        # FP8 GEMMs' share of the FP8 peak and where it comes from (None: the device has no FP8).
        "fp8_matmul_efficiency": cluster.fp8_efficiency if fp8 else None,
        "fp8_efficiency_source": cluster.fp8_efficiency_source if fp8 else None,
        "gemm_shape": "each GEMM at the matmul efficiency times its tile utilisation over "
        "the device's SMs (padding and wave quantisation)",
        "flops": "a multiply-add counts as 2; peaks are dense",
    }


def _fixed_text(fixed: str | dict | None) -> str | None:
    """Pins as the command line spells them: {"t": 8, "sp": False} -> "t=8,sp=off"."""
    if not isinstance(fixed, dict):
        return fixed

    def text(v: Any) -> str:
        return ("on" if v else "off") if isinstance(v, bool) else str(v)

    return ",".join(f"{k}={text(v)}" for k, v in fixed.items())


@dataclass(frozen=True)
class PlanResult(Result):
    """The ranked plans (`search.plans`, with `search.why` each loses to the best), the job
    and cluster they were planned for, and the same job on 2N, 4N, ... (`scaling`)."""

    model: Any  # TransformerConfig
    job: Any  # model.parallel.Job
    cluster: Any  # model.cluster.Cluster
    search: Any  # model.plan_search result
    scaling: list[Any]
    assumptions: dict[str, Any]
    fixed: dict[str, Any]
    title = "Training plan"

    @property
    def plans(self) -> list[Any]:
        return self.search.plans

    @property
    def best(self) -> Any:
        return self.search.plans[0]

    def record(self) -> dict[str, Any]:
        job, result = self.job, self.search
        return {
            "model": self.model.name,
            "params_total": self.model.params_total,
            "global_batch": job.global_batch,
            "seq_len": job.seq_len,
            "tokens_per_step": job.global_batch * job.seq_len,
            "cluster": self.cluster.to_json(),
            "assumptions": self.assumptions,
            "fixed": self.fixed,
            "evaluated": result.evaluated,
            "fitting": result.fitting,
            "plans": [r.to_json(w) for r, w in zip(result.plans, result.why, strict=True)],
            "scaling": [row.to_json() for row in self.scaling],
        }

    def heading(self) -> str:
        b = self.best
        return (
            f"{self.model.name} on {self.cluster.devices} × {self.cluster.device.name}: best "
            f"step {b.step_time_s:.3g} s, MFU {b.mfu:.1%}"
        )


@checked
def plan(
    model: str,
    gpus: int | str,
    *,
    spec: str | None = None,
    profile: Path | str | None = None,
    gpus_per_node: int | None = None,
    global_batch: int | str | None = None,
    seq: int | None = None,
    top: int = 5,
    fixed: str | dict | None = None,
    attention: str | None = None,
    dropout: bool | None = None,
    dp_overlap: bool = True,
    headroom: float = 0.10,
    matmul_efficiency: float | None = None,
    intra_bw: str | float | None = None,
    inter_bw: str | float | None = None,
    dtype: str = "bf16",
    tokens: float | str | None = None,
    loss: str = "fp32",
    scaling: int = 0,
) -> PlanResult:
    """Plan training of `model` (catalog name, "custom:..." or "hf:PATH") on `gpus` devices
    of a catalog `spec` (or the saved profile's device): every valid data/tensor/pipeline/
    expert split evaluated for memory and step time, the `top` fastest that fit ranked.
    `fixed` pins plan fields ("d=8,t=8" or {"t": 8}); `scaling` also plans at 2N, 4N, ...;
    link bandwidths are text with a unit ("100GB/s") or bytes/s."""
    from ceiling.model.plan_search import parse_fixed, search
    from ceiling.model.plan_search import scaling as scaling_rows
    from ceiling.model.transformer import parse_model
    from ceiling.vocabulary import normalize_dtype

    if not 0 <= scaling <= MAX_DOUBLINGS:
        raise BadArgument(
            "scaling", f"must be between 0 and {MAX_DOUBLINGS} doublings, got {scaling}"
        )
    cfg = parse_model(model)
    job, recipe = training_job(
        cfg, seq, global_batch, attention, dropout, headroom, dp_overlap, tokens, loss
    )
    n = _count(gpus, "gpus", MAX_DEVICES)
    pins = parse_fixed(_fixed_text(fixed))
    with argument_named("dtype"):
        fp8 = normalize_dtype(dtype) == "fp8"
    if fp8:
        # Real FP8 runs put only the linear layers' GEMMs in FP8; the rest stays 16-bit.
        dtype = "bf16"
        pins.setdefault("fp8", "linear")

    def cluster_for(count: int):
        return build_cluster(
            spec, profile, count, gpus_per_node, intra_bw, inter_bw, matmul_efficiency, dtype
        )

    cluster = cluster_for(n)
    result = search(job, cluster, pins, top=top)
    doublings = [n * 2**i for i in range(scaling + 1)]
    rows = scaling_rows(job, cluster_for, doublings, pins) if scaling else []
    return PlanResult(cfg, job, cluster, result, rows, assumptions(cluster, job, recipe), pins)
