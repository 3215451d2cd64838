"""Planning a large training run: a data/tensor/pipeline split, its scaling, the bubble."""

from __future__ import annotations

from ceiling import units
from ceiling.report.compose import ReportContext, SectionOutput
from ceiling.report.sections._axes import plain_log_ticks

KEY = "planner"
TITLE = "Planning a large training run"

MODEL = "llama-3-70b"
DEVICE = "h100-sxm"
SEQ = 4096
GLOBAL_BATCH = 1024  # sequences: about 4M tokens per step
BASE_GPUS = 64
DOUBLINGS_QUICK, DOUBLINGS_FULL = 5, 7
TOP = 5
# the pipeline figure when the best plan has no pipeline: a small illustrative case
EXAMPLE_STAGES, EXAMPLE_MICRO_BATCHES = 4, 8


def run(ctx: ReportContext, out: SectionOutput) -> None:
    from ceiling.hardware import catalog
    from ceiling.model import cluster as cluster_mod
    from ceiling.model import parallel, transformer
    from ceiling.model import plan_search as search_mod

    cfg = transformer.get_model(MODEL)
    spec = catalog.get_spec(DEVICE)
    job = parallel.Job(
        cfg, GLOBAL_BATCH, SEQ, attention=cfg.trained_attention, dropout=cfg.trained_dropout
    )
    out.text(
        f"Before a large run a team decides how to split the model: data parallelism (a full "
        f"copy per device, gradients all-reduced), tensor parallelism (each layer's matrices "
        f"split, communication inside every layer, kept within a fast NVLink node) and "
        f"pipeline parallelism (layers split into stages, with a bubble while the pipeline "
        f"fills and drains). Here the planner searches every valid split of {MODEL} "
        f"({cfg.params_total / 1e9:.1f} B parameters) on {spec.name} GPUs, {SEQ:,}-token "
        f"sequences, {GLOBAL_BATCH:,} sequences per step."
    )

    def cluster_for(n: int):
        return cluster_mod.make_cluster(spec, n, dtype="bf16")

    ctx.step(f"searching plans for {MODEL} on {BASE_GPUS * 4} GPUs")
    gpus = BASE_GPUS * 4
    cluster = cluster_for(gpus)
    res = search_mod.search(job, cluster, None, top=TOP)
    best = res.plans[0]
    out.key("evaluated_plans", res.evaluated)
    out.key("fitting_plans", res.fitting)
    out.key(
        "best_plan",
        _plan_dict(best),
        f"best split on {gpus} GPUs",
        f"d {best.plan.d} · t {best.plan.t} · p {best.plan.p}",
    )
    out.key("best_mfu", best.mfu, "predicted MFU", units.format_percent(best.mfu))
    out.key("best_step_time_s", best.step_time_s, "step time", units.format_time(best.step_time_s))
    rows = []
    for r, why in zip(res.plans, res.why, strict=True):
        p = r.plan
        rows.append(
            [
                f"{p.d}×{p.t}×{p.p}" + (f", v {p.v}" if p.v > 1 else ""),
                p.micro_batch,
                p.zero,
                p.recompute,
                units.format_bytes(r.memory_bytes_per_device, binary=True),
                units.format_time(r.step_time_s),
                units.format_percent(r.mfu),
                why or "best",
            ]
        )
    out.table(
        f"Best plans on {gpus} × {spec.name} ({cluster.nodes} nodes of "
        f"{cluster.devices_per_node}), of {res.evaluated:,} evaluated, {res.fitting:,} fit",
        [
            "d × t × p",
            "micro-batch",
            "ZeRO",
            "recompute",
            "memory per GPU",
            "step time",
            "MFU",
            "why it loses",
        ],
        rows,
        note=f"Matmul efficiency {cluster.matmul_efficiency:.2f} of the dense bf16 peak "
        f"({cluster.efficiency_source}); MFU counts model FLOPs only (6N + attention).",
    )

    doublings = DOUBLINGS_QUICK if ctx.quick else DOUBLINGS_FULL
    counts = [BASE_GPUS * 2**i for i in range(doublings + 1)]
    ctx.step(f"best plan at {counts[0]} … {counts[-1]} GPUs")
    scaling = search_mod.scaling(job, cluster_for, counts, None)
    _scaling(out, scaling, counts)
    _pipeline(ctx, out, best)
    _straggler(ctx, out)


def _plan_dict(r) -> dict:
    return {
        **r.plan.to_json(),
        "memory_bytes_per_device": r.memory_bytes_per_device,
        "step_time_s": r.step_time_s,
        "mfu": r.mfu,
        "tokens_per_s": r.tokens_per_s,
    }


def _scaling(out: SectionOutput, rows, counts) -> None:
    from ceiling.report import plots

    ok = [r for r in rows if r.best is not None]
    if len(ok) < 2:
        out.note("scaling view: fewer than two GPU counts have a plan that fits")
        return
    out.key_figures["scaling"] = [
        {"gpus": r.devices, "speedup": r.speedup, "efficiency": r.efficiency, "mfu": r.best.mfu}
        for r in ok
    ]
    base = ok[0].devices
    fig = plots.speedup_figure(
        {"best plan at each size": ([r.devices / base for r in ok], [r.speedup for r in ok])},
        title=f"{MODEL}: speedup from {base} GPUs (×{base} on the axis)",
    )
    ax = fig.axes[0]
    ax.set_xlabel(f"GPUs ÷ {base}")
    plain_log_ticks(ax)
    out.figure(
        fig,
        "Predicted speedup of the best plan as the cluster doubles, against ideal scaling. "
        "The gap grows as communication and the fixed global batch (fewer micro-batches per "
        "pipeline, more data-parallel traffic per token) eat into each doubling.",
    )
    last = ok[-1]
    out.highlight(
        f"{last.devices} GPUs vs {base}",
        f"{last.speedup:.1f}× ({units.format_percent(last.efficiency)} efficient)",
    )
    out.table(
        "Where adding GPUs stops paying",
        ["GPUs", "best d × t × p", "step time", "speedup", "efficiency", "MFU"],
        [
            [
                r.devices,
                f"{r.best.plan.d}×{r.best.plan.t}×{r.best.plan.p}" if r.best else "—",
                units.format_time(r.best.step_time_s) if r.best else "no plan fits",
                f"{r.speedup:.2f}×" if r.best else "—",
                units.format_percent(r.efficiency) if r.best else "—",
                units.format_percent(r.best.mfu) if r.best else "—",
            ]
            for r in rows
        ],
    )


def _pipeline(ctx: ReportContext, out: SectionOutput, best) -> None:
    from ceiling.model import pipeline_sim as sim
    from ceiling.report import pipeline_plot as plot

    p = best.plan.p if best.plan.p > 1 else EXAMPLE_STAGES
    m = EXAMPLE_MICRO_BATCHES
    ctx.step(f"simulating a {p}-stage pipeline")
    # forward 1 unit, backward 2 (the backward does twice the matmul work)
    one = sim.simulate_pipeline("1f1b", p, m, 1.0, 2.0)
    inter = sim.simulate_pipeline("interleaved", p, m, 1.0, 2.0, chunks=2)
    out.key_figures["pipeline"] = {
        "stages": p,
        "micro_batches": m,
        "bubble_1f1b": one.bubble_fraction,
        "bubble_interleaved_v2": inter.bubble_fraction,
        "formula_1f1b": sim.bubble_formula(p, m),
        "formula_interleaved_v2": sim.bubble_formula(p, m, 2),
    }
    out.text(
        f"The pipeline bubble: with p = {p} stages and m = {m} micro-batches, each device "
        f"idles while the pipeline fills and drains — {one.bubble_fraction:.1%} of the compute "
        f"time with 1F1B ((p−1)/m = {sim.bubble_formula(p, m):.1%}), and "
        f"{inter.bubble_fraction:.1%} when each device holds v = 2 interleaved chunks "
        f"((p−1)/(v·m) = {sim.bubble_formula(p, m, 2):.1%}). The simulator finds these from "
        "the order of events, not from the formula."
    )
    out.figure(
        plot.pipeline_figure(one, unit_label="forward passes"),
        f"1F1B schedule, {p} stages, {m} micro-batches, backward twice as long as forward: "
        "blue forward, orange backward, numbers are micro-batches; white space is the bubble.",
    )


# a data-parallel step of 8 workers, one of them 25 % slower, the all-reduce a tenth of a step
STRAGGLER_WORKERS, STRAGGLER_SLOW, STRAGGLER_ALLREDUCE = 8, 1.25, 0.1


def _straggler(ctx: ReportContext, out: SectionOutput) -> None:
    from ceiling.model import pipeline_sim as sim
    from ceiling.report import pipeline_plot as plot

    ctx.step("simulating a data-parallel step with a straggler")
    n, slow = STRAGGLER_WORKERS, STRAGGLER_SLOW
    times = sim.straggler_workers(n, 1.0, slow_factor=slow, slow_count=1)
    res = sim.simulate_straggler(times, STRAGGLER_ALLREDUCE)
    even = sim.simulate_straggler(sim.straggler_workers(n, 1.0), STRAGGLER_ALLREDUCE)
    out.key_figures["straggler"] = {
        "workers": n,
        "slow_factor": slow,
        "allreduce_s": STRAGGLER_ALLREDUCE,
        "step_s": res.step_s,
        "mean_wait_s": res.mean_wait_s,
        "efficiency": res.efficiency,
        "efficiency_without_straggler": even.efficiency,
    }
    out.text(
        f"Load imbalance: parallel work ends when the slowest worker ends. In a data-parallel "
        f"step of {n} workers where one takes {slow:g}× as long (a busier host, a slower GPU, "
        f"longer sequences), the other {n - 1} wait at the gradient all-reduce: the step takes "
        f"{res.step_s / even.step_s:.2f}× as long and efficiency falls from "
        f"{even.efficiency:.0%} to {res.efficiency:.0%}. This loss comes on top of Amdahl's "
        "serial part: it wastes parallelism already paid for."
    )
    out.figure(
        plot.straggler_figure(res),
        f"{n} data-parallel workers with 1 s of compute each, worker 0 {slow:g}× slower, a "
        f"{STRAGGLER_ALLREDUCE:g} s all-reduce: blue compute, red waiting for "
        "the slowest, green the all-reduce all of them join.",
    )
