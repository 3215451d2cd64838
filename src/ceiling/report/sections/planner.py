"""Planning a large training run: a data/tensor/pipeline split, its scaling, the bubble."""

from __future__ import annotations

from ceiling import units
from ceiling.report.compose import ReportContext, SectionOutput, Skip
from ceiling.report.sections._axes import plain_log_ticks
from ceiling.report.validated import PLANNER
from ceiling.report.work import DEMO_DEVICE, DEMO_PLAN_MODEL, Choice, ReportOptions, subject

KEY = "planner"
TITLE = "Planning a large training run"

DOUBLINGS_QUICK, DOUBLINGS_FULL = 1, 5
TOP = 3
# the pipeline figure when the best plan has no pipeline: a small illustrative case
EXAMPLE_STAGES, EXAMPLE_MICRO_BATCHES = 4, 8


def run(ctx: ReportContext, out: SectionOutput) -> None:
    from ceiling.api.plan import plan
    from ceiling.errors import CeilingError

    arguments, model, gpus_choice, device = plan_arguments(ctx.work)
    gpus = arguments["gpus"]
    doublings = DOUBLINGS_QUICK if ctx.quick else DOUBLINGS_FULL
    ctx.step(f"searching plans for {model.value} on {gpus} … {gpus * 2**doublings} GPUs")
    # the call `ceiling plan` and `ceiling.plan()` make: the same plan, or the same refusal
    try:
        planned = plan(**arguments, top=TOP, scaling=doublings)
    except CeilingError as exc:
        raise Skip(f"ceiling plan refuses: {exc}") from exc
    cfg, job, cluster, res = planned.model, planned.job, planned.cluster, planned.search
    seq, batch, spec_name = job.seq_len, job.global_batch, cluster.device.name
    out.about(
        *subject(
            [
                (model, "--model", cfg.name),
                (gpus_choice, "--gpus", f"on {gpus}"),
                (device, "--spec", f"× {_short(spec_name)}, {seq:,} tokens × {batch:,} a step"),
            ]
        )
    )
    if not res.plans:
        raise Skip(f"no plan of {cfg.name} fits {gpus} × {spec_name}")
    best = res.plans[0]
    band = planned.accuracy(best)
    out.key_figures["accuracy"] = band.to_json()
    out.key_figures["model"] = cfg.name
    out.key_figures["device"] = _short(spec_name)
    out.key_figures["gpus"] = gpus
    out.key_figures["seq"] = seq
    out.key_figures["global_batch"] = batch
    out.key("evaluated_plans", res.evaluated)
    out.key("fitting_plans", res.fitting)
    out.key_figures["best_plan"] = {**_plan_dict(best), **_breakdowns(best, cluster)}
    out.key("best_mfu", best.mfu, "predicted MFU", units.format_percent(best.mfu), "modelled",
            band.short())  # fmt: skip
    out.key("best_step_time_s", best.step_time_s, "predicted step",
            units.format_time(best.step_time_s), "modelled", band.short())  # fmt: skip
    _plans_table(out, res, cluster)
    out.text(best_plan_text(best, cluster))
    out.note(
        f"modelled: matmuls at {cluster.matmul_efficiency:.2f} of the dense bf16 peak "
        f"({cluster.efficiency_source}); MFU counts model FLOPs (6N + attention); "
        f"{PLANNER.line()}; this plan's kind: {band.text()}"
    )
    _scaling(out, planned.scaling, cfg.name)
    demo = model.demo and gpus_choice.demo and device.demo
    _pipeline(ctx, out, best, demo)
    _straggler(ctx, out, best)


def plan_arguments(w: ReportOptions) -> tuple[dict, Choice, Choice, Choice]:
    """What the section asks `ceiling.plan`, and whether each of the model, the GPU count and
    the device is the user's: the report's own `--model`, `--gpus`, `--spec`, or its
    `--profile` when a model or a GPU count was given (the plan `ceiling plan` makes with
    them, or its refusal); a demo, labelled, for each not given (a profile alone describes
    this machine, for the other sections)."""
    if w.model and not w.is_callable_model:
        model = Choice(w.model, False)
    else:
        why = "a module:callable model has no transformer shape" if w.model else None
        model = Choice(DEMO_PLAN_MODEL, True, why)
    gpus = w.cluster_gpus()
    arguments = {"model": model.value, "gpus": int(gpus.value), "seq": w.seq,
                 "global_batch": w.global_batch}  # fmt: skip
    if w.spec is not None:
        arguments["spec"], device = w.spec, Choice(w.spec, False)
    elif w.profile is not None and (w.model or w.gpus):  # as `ceiling plan --profile` takes it
        arguments["machine_profile"], device = w.profile, Choice(str(w.profile), False)
    else:
        arguments["spec"], device = DEMO_DEVICE, Choice(DEMO_DEVICE, True)
    return arguments, model, gpus, device


def _short(name: str) -> str:
    from ceiling.render.legibility import short_device_name

    return short_device_name(name, 24)


def layout(plan: dict) -> str:
    """`8×2×4` with `cp 4`, `v 2` and `fp8 linear` when used (plan JSON in, text out)."""
    extra = [f"{k} {plan[k]}" for k in ("cp", "ep", "v") if plan.get(k, 1) > 1]
    if plan.get("fp8", "off") != "off":
        extra.append(f"fp8 {plan['fp8']}")
    return f"{plan['d']}×{plan['t']}×{plan['p']}" + "".join(f", {e}" for e in extra)


def _why(why: str | None) -> str:
    """`+1% step time; pipeline imbalance: the last of ...` -> `+1% step time; pipeline
    imbalance` (the whole reason stays in the JSON)."""
    if not why:
        return "best"
    head, _, rest = why.partition("; ")
    return f"{head}; {rest.split(':')[0]}" if rest else head


def _plans_table(out: SectionOutput, res, cluster) -> None:
    rows = []
    for r, why in zip(res.plans, res.why, strict=True):
        p = r.plan
        rows.append(
            [
                layout(_plan_dict(r)),
                p.micro_batch,
                f"z{p.zero}, {p.recompute}",
                units.format_bytes(r.memory_bytes_per_device, binary=True),
                units.format_time(r.step_time_s),
                units.format_percent(r.mfu),
                _why(why),
            ]
        )
    out.key_figures["plans"] = [
        {**_plan_dict(r), "why": why} for r, why in zip(res.plans, res.why, strict=True)
    ]
    out.table(
        f"Best of {res.fitting:,} fitting plans ({res.evaluated:,} evaluated) on "
        f"{cluster.nodes} nodes of {cluster.devices_per_node} (modelled)",
        ["d × t × p", "micro-batch", "ZeRO, recompute", "memory per GPU", "step", "MFU",
         "why it loses"],
        rows,
        modelled=range(7),
    )  # fmt: skip


# the parts of a step, in the words the page uses; communication: what overlap leaves exposed
COMPUTE_PARTS = {
    "matmul_s": "matmuls",
    "fp8_matmul_s": "FP8 GEMMs",
    "fp8_cast_s": "FP8 casts",
    "attention_s": "attention",
    "elementwise_s": "elementwise",
    "eager_kernels_s": "eager kernels",
    "host_s": "host-bound",
    "optimizer_s": "optimizer",
    "bubble_s": "bubble",
    "straggler_s": "stragglers",
}
COMM_PARTS = {"dp_exposed_s": "DP", "tp_comm_s": "TP", "cp_comm_s": "CP", "ep_comm_s": "EP",
              "p2p_s": "p2p"}  # fmt: skip
SHOWN_SHARE = 0.005  # a part under this share of the step is left to the JSON


def best_plan_text(best, cluster) -> str:
    """What the best plan does with its step and its memory, in three sentences: stages
    and recomputation, the time split with communication exposed and hidden (and FP8's
    efficiency where FP8 runs), the heaviest stage's memory."""
    pl, step = best.plan, best.step_time_s

    def shares(items) -> list[str]:
        return [f"{name} {v / step:.0%}" for name, v in items if v / step >= SHOWN_SHARE]

    first, mid, last = best.stages.get("layers", (0, 0, 0))
    if pl.p == 1:
        head = "Best plan: no pipeline"
    elif first == mid == last:
        head = f"Best plan: {mid} layers per stage"
    else:  # uneven: the first, the middle and the last stage
        middle = {2: "", 3: f"{mid},"}.get(pl.p, f"{mid}…{mid},")
        head = f"Best plan: stages of {first},{middle}{last} layers"
    if best.recompute_s > 0:
        head += (
            f"; recompute={pl.recompute} rebuilds {best.recompute_detail['rebuilt']} "
            f"({best.recompute_s / step:.0%} of the step)"
        )
    names = {**COMPUTE_PARTS, "matmul_s": "16-bit matmuls"} if pl.fp8 != "off" else COMPUTE_PARTS
    compute = shares((name, best.time.get(k, 0.0)) for k, name in names.items())
    comm = [(name, best.time.get(k, 0.0)) for k, name in COMM_PARTS.items()]
    exposed = sum(v for _, v in comm)
    hidden = [(k.upper(), v) for k, v in best.hidden.items()]
    time = f"step: {', '.join(compute)}; communication exposed {exposed / step:.0%}"
    time += f" ({', '.join(shares(comm))})" if shares(comm) else ""
    if shares(hidden):
        time += f", hidden {', '.join(shares(hidden))}"
    if pl.fp8 != "off":
        time += (
            f"; FP8 GEMMs at {cluster.fp8_efficiency:.2f} of the FP8 peak "
            f"({cluster.fp8_efficiency_source})"
        )
    return f"{head}; {time}. {_memory_text(best)}."


def _memory_text(best) -> str:
    """The heaviest stage's memory, largest terms as a user trims them."""
    mem, pl = best.memory, best.plan

    def gib(x: float) -> str:
        return f"{x / 2**30:.1f}"

    grad = "16-bit" if pl.state_bytes_per_param == 16 else "fp32"
    terms = [
        ("weights", mem["weight_bytes"]),
        (f"{grad} gradients", mem["gradient_bytes"]),
        ("Adam", mem["optimizer_bytes"]),
        ("activations", mem["activation_bytes"]),
        ("gathered weights", mem.get("gathered_weight_bytes", 0.0)),
        ("FP8 copies", mem.get("fp8_weight_bytes", 0.0)),
    ]
    where = f"{best.stages.get('heaviest_memory', 'last')} stage" if pl.p > 1 else "GPU"
    return (
        f"Memory of the {where} ({gib(best.usable_bytes_per_device)} GiB usable): "
        + ", ".join(f"{name} {gib(v)}" for name, v in terms if v > 0)
        + " GiB"
    )


def _breakdowns(best, cluster) -> dict:
    """The best plan's time, hidden communication, memory, stages and recomputation (JSON)."""
    j = best.to_json()
    keep = ("time_breakdown_s", "hidden_comm_s", "memory_breakdown_bytes",
            "usable_bytes_per_device", "pipeline_stages", "recompute_time_s",
            "recompute_detail")  # fmt: skip
    out = {k: j[k] for k in keep}
    if best.plan.fp8 != "off":
        out["fp8_efficiency"] = cluster.fp8_efficiency
        out["fp8_efficiency_source"] = cluster.fp8_efficiency_source
    return out


def _plan_dict(r) -> dict:
    return {
        **r.plan.to_json(),
        "micro_batches": r.micro_batches,
        "memory_bytes_per_device": r.memory_bytes_per_device,
        "step_time_s": r.step_time_s,
        "mfu": r.mfu,
        "tokens_per_s": r.tokens_per_s,
    }


def _scaling(out: SectionOutput, rows, model: str) -> None:
    from ceiling.render import plots

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
        title=f"{model}: speedup from {base} GPUs (modelled)",
    )
    ax = fig.axes[0]
    ax.set_xlabel(f"GPUs ÷ {base}")
    plain_log_ticks(ax)
    for r in ok:  # the efficiency beside each point, so no table repeats the figure
        ax.annotate(f"{r.efficiency:.0%}", (r.devices / base, r.speedup),
                    textcoords="offset points", xytext=(4, -12), fontsize=8)  # fmt: skip
    out.figure(
        fig,
        "Modelled speedup of the best plan per doubling (labels: efficiency): the global "
        "batch is fixed.",
    )
    out.key_figures["scaling_plans"] = [
        {
            "gpus": r.devices,
            "plan": None if r.best is None else _plan_dict(r.best),
        }
        for r in rows
    ]


def _pipeline(ctx: ReportContext, out: SectionOutput, best, demo: bool) -> None:
    """The best plan's pipeline simulated at its stages, micro-batches and chunks; with no
    pipeline in the plan, an example only when the whole section is a demo (a user's page
    draws nothing the user's plan does not do)."""
    from ceiling.api.simulate import bubble_formula
    from ceiling.render import pipeline_plot as plot

    pl = best.plan
    if pl.p == 1 and not demo:
        out.key_figures["pipeline"] = None
        out.text(
            "The best plan has no pipeline, so no bubble: `ceiling simulate pipeline` draws "
            "one for the stages and micro-batches you give it."
        )
        return
    ours = pl.p > 1
    p = pl.p if ours else EXAMPLE_STAGES
    m = best.micro_batches if ours else EXAMPLE_MICRO_BATCHES
    v = pl.v if ours else 2
    ctx.step(f"simulating a {p}-stage pipeline")
    # forward 1 unit, backward 2 (the backward does twice the matmul work)
    chunks = max(v, 2)
    one = _simulated("1f1b", p, m, 1)
    inter = _simulated("interleaved", p, m, chunks)
    out.key_figures["pipeline"] = {
        "of_best_plan": ours,
        "stages": p,
        "micro_batches": m,
        "chunks": chunks,
        "bubble_1f1b": one.bubble_fraction if one else None,
        "bubble_interleaved": inter.bubble_fraction if inter else None,
        "formula_1f1b": bubble_formula(p, m),
        "formula_interleaved": bubble_formula(p, m, chunks),
    }
    drawn = inter if ours and v > 1 else one
    if drawn is None:  # too many passes to draw: the closed form says the same
        out.text(
            f"The best plan's pipeline: {p} stages, {m} micro-batches"
            + (f", {v} chunks per device" if v > 1 else "")
            + f": a bubble of {bubble_formula(p, m, v):.1%} ((p−1)/(v·m))."
        )
        return
    whose = "The best plan's pipeline" if ours else "An example pipeline (the plan has none)"
    if drawn is inter:
        shape, other = f", {v} chunks per device", ""
        if one is not None:
            other = f"; {one.bubble_fraction:.1%} without interleaving"
    else:
        shape = ", 1F1B"
        other = f"; {inter.bubble_fraction:.1%} with {chunks} chunks per device" if inter else ""
    out.figure(
        plot.pipeline_figure(drawn, unit_label="forward passes"),
        f"{whose}, simulated: {p} stages, {m} micro-batches{shape}: the bubble (white) is "
        f"{drawn.bubble_fraction:.1%}{other}.",
    )


def _simulated(schedule: str, p: int, m: int, chunks: int):
    """The simulated step (`ceiling simulate pipeline`'s), or None where the schedule cannot
    run that shape (interleaving with m not a multiple of p) or it is too large to draw."""
    from ceiling.api.simulate import pipeline
    from ceiling.errors import CeilingError

    try:
        return pipeline(p, m, schedule, chunks, forward=1.0, backward=2.0).sim
    except CeilingError:
        return None


# what if one data-parallel rank of the best plan ran this much slower
STRAGGLER_SLOW = 1.25


def _straggler(ctx: ReportContext, out: SectionOutput, best) -> None:
    """One rank of the best plan's data-parallel group slower: the rest wait at the
    gradient all-reduce (its exposed part stays on the step's critical path)."""
    from ceiling.api.simulate import straggler

    n, slow = best.plan.d, STRAGGLER_SLOW
    if n < 2:
        out.key_figures["straggler"] = None
        return
    ctx.step(f"simulating {n} data-parallel ranks with a straggler")
    allreduce = best.time.get("dp_exposed_s", 0.0)
    work = best.step_time_s - allreduce
    # the calls `ceiling simulate straggler` makes, with and without the slow rank
    slowed = straggler(n, work, slow, 1, allreduce=allreduce)
    res, even = slowed.sim, straggler(n, work, 1.0, 0, allreduce=allreduce).sim
    out.key_figures["straggler"] = {
        "workers": n,
        "slow_factor": slow,
        "work_s": work,
        "allreduce_s": allreduce,
        "step_s": res.step_s,
        "mean_wait_s": res.mean_wait_s,
        "efficiency": res.efficiency,
        "efficiency_without_straggler": even.efficiency,
    }
    out.figure(
        slowed.figure(),
        f"Simulated: one of the best plan's {n} data-parallel ranks {slow:g}× slower; the rest "
        f"wait (red) at the all-reduce: step {units.format_time(even.step_s)} → "
        f"{units.format_time(res.step_s)}, efficiency {even.efficiency:.0%} → "
        f"{res.efficiency:.0%}.",
    )
