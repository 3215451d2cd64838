"""Overheads: per-op dispatch or launch cost, Python loop vs vectorized, the GPU crossover."""

from __future__ import annotations

from ceiling import units
from ceiling.report.compose import ReportContext, SectionOutput, Skip

KEY = "overhead"
TITLE = "Overheads: dispatch, Python loops, and when a GPU pays"


def run(ctx: ReportContext, out: SectionOutput) -> None:
    # the overhead records of the profile `ceiling.api.machine_profile` loads or measures
    found = ctx.profile_result().overheads
    if not found:
        raise Skip("the machine profile holds no overhead measurement (run `ceiling bench`)")
    out.text(
        "Every PyTorch op pays a fixed dispatch (and on a GPU a launch) before any arithmetic: "
        "small ops, small batches and Python loops are all overhead."
    )
    for o in found:
        is_gpu = o.device.startswith("cuda")
        out.key(
            f"tiny_op_s_{o.device}",
            o.tiny_op_s,
            f"one tiny op, {'GPU launch' if is_gpu else 'CPU dispatch'}",
            units.format_time(o.tiny_op_s),
        )
    cpu = next((o for o in found if o.device == "cpu"), found[0])
    out.key(
        "loop_vs_vectorized",
        cpu.loop_vs_vectorized,
        "Python loop vs vectorized",
        f"{cpu.loop_vs_vectorized:,.0f}× slower",
    )
    out.key_figures["loop_s"] = cpu.loop_s
    out.key_figures["vectorized_s"] = cpu.vectorized_s
    for o in found:
        out.key_figures[f"torch_vectorized_s_{o.device}"] = o.device_vectorized_s
    bars = [
        ("Python loop", cpu.loop_s),
        ("numpy (vectorized)", cpu.vectorized_s),
        *[(f"torch on {o.device}", o.device_vectorized_s) for o in found],
    ]
    from ceiling.render import overhead_plot

    out.figure(
        overhead_plot.loop_vs_vectorized_figure(bars, cpu.loop_elements),
        "The same arithmetic three ways: the loop pays the interpreter per element.",
    )
    _crossovers(out, [c for o in found for c in o.crossovers])
    for o in found:
        for note in o.notes:
            if "crossover needs a GPU" not in note:
                out.note(note)


def _crossovers(out: SectionOutput, crossovers: list[dict]) -> None:
    if not crossovers:
        out.note("GPU-vs-CPU crossover: skipped, it needs a CUDA GPU")
        return
    from ceiling.render import overhead_plot

    for c in crossovers:
        out.key_figures[f"gpu_crossover_{c['op']}"] = c["crossover"]
        out.key_figures[f"gpu_crossover_{c['op']}_with_copies"] = c["crossover_with_transfer"]
        out.text(
            f"{c['op']}: the GPU wins {_from(c['crossover'], c['sizes'])} with the data on "
            f"it, {_from(c['crossover_with_transfer'], c['sizes'])} counting the copies."
        )
    out.figure(
        overhead_plot.crossover_figure(crossovers),
        "Below the crossover, launches and copies outweigh the GPU's throughput.",
    )


def _from(size: int | None, sizes: list[int]) -> str:
    if size is None:
        return f"at no size up to n = {max(sizes):,}"
    return f"from n = {size:,}"
