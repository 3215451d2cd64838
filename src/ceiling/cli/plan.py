"""`ceiling plan`: split transformer training over data, tensor and pipeline parallelism."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Annotated

import typer
from typer.core import TyperCommand

from ceiling.cli.app import app
from ceiling.cli.device_options import ProfileOption, SpecOption
from ceiling.cli.inputs import GlobalBatchOption, GpusOption, ModelArg, SeqOption
from ceiling.cli.output import JsonOption, PlotOption, console, emit_json, table
from ceiling.units import format_bytes, format_number, format_percent, format_time

PLAN_HELP = """Plan training of MODEL on N devices: data (d), tensor (t) and pipeline (p)
parallelism, expert parallelism (ep) for mixture-of-experts models, micro-batch,
interleaving (v), ZeRO stage (3 = FSDP), recomputation and sequence parallelism. Every valid
plan is evaluated — memory per device (weights, gradients,
optimizer state, activations of the micro-batches in flight, with headroom), time per step
(matmuls at the device's matmul efficiency, memory-bound kernels, tensor-parallel
collectives, pipeline bubble and sends, expert all-to-all, data-parallel reduction), MFU,
HFU and hardware TFLOP/s per device (Megatron's figure, counting recomputation) — and those
that fit are ranked by step time, with why each loses to the best.

MODEL is a catalog name (`ceiling models`), custom:layers=..,hidden=..,heads=..,... or
hf:PATH (a Hugging Face config.json, or the folder holding one).

--fixed pins plan fields and searches the rest. Its keys: {fixed_keys}. Axes searched
unless pinned: d, t, p, b, v, ep, etp, zero, recompute, sp, cp and the stage layout; the others
hold their default unless pinned. Example: --fixed d=32,t=8,p=2,recompute=full,sp=off; a mixture
of experts: --fixed ep=8; long context: --fixed cp=2,tp_overlap=on,fp8=linear

Time per step splits into 16-bit GEMMs (at the device's matmul efficiency times each GEMM's
tile utilisation over the SMs), attention (causal blocks at the fused kernel's efficiency),
FP8 GEMMs and casts, memory-bound kernels (and eager kernels' extra traffic), and the
communication left exposed; what overlap hides is shown beside it. A mixture of experts adds
its grouped GEMMs at the rows each expert sees, routing and permutation traffic, and the
dispatch/combine all-to-alls on the link each hop crosses, at the busiest expert rank's load.
A layer whose kernels take the host longer to launch one by one than the GPU to run them is
host-bound: the wait is its own part of the step ("host"), which CUDA graphs (--cuda-graphs)
and the MoE router and permutation fusions (--moe-fusion) shorten.

FLOPs count a multiply-add as 2; peaks are dense. Memory in GiB (2^30 bytes)."""


class PlanCommand(TyperCommand):
    """`ceiling plan`, whose help lists the `--fixed` keys from the plan axes (`Axis.help`),
    built when the help is read: the axes need numpy, which other commands never load."""

    @property
    def help(self) -> str | None:
        from ceiling.model.plan.axes import fixed_help

        text = self._help_template
        return text.replace("{fixed_keys}", fixed_help()) if text else text

    @help.setter
    def help(self, text: str | None) -> None:
        self._help_template = text


GpusPerNodeOption = Annotated[
    int | None, typer.Option("--gpus-per-node", help="Devices per node (default: catalog).")
]
TopOption = Annotated[int, typer.Option("--top", "-k", help="How many plans to show.")]
FixedOption = Annotated[
    str | None, typer.Option("--fixed", help="Pin plan axes: d=..,t=..,p=..,b=..,... (keys above).")
]
AttentionOption = Annotated[
    str | None,
    typer.Option(
        "--attention",
        help="flash (the default, for every model): FlashAttention or a kernel like it, no "
        "s×s scores in memory; unfused: the scores in memory (Megatron-LM's 2021 kernels).",
    ),
]
DropoutOption = Annotated[
    bool | None,
    typer.Option(
        "--dropout/--no-dropout",
        help="Whether the model trains with dropout. Default: as its config says.",
    ),
]
LossOption = Annotated[
    str | None,
    typer.Option(
        "--loss",
        help="The cross-entropy kernel, for the logits' memory on the last stage: fp32 "
        "(the default; Megatron-LM: fp32 softmax and gradient in place, 6 bytes per token "
        "per vocabulary entry at the peak), eager (PyTorch F.cross_entropy on upcast logits, "
        "as torchtitan: 12), fused (gradient written over the 16-bit logits: 2).",
    ),
]
AttentionKernelOption = Annotated[
    str | None,
    typer.Option(
        "--attention-kernel",
        help="fa2, fa3 or cudnn: the fused attention kernel whose published rate (by head "
        "dim and length, Hopper) prices attention. Default: the framework's (cudnn).",
    ),
]
MoeDispatcherOption = Annotated[
    str | None,
    typer.Option(
        "--moe-dispatcher",
        help="alltoall (NCCL: every routed copy sent) or deepep (once per destination node, "
        "forwarded over NVLink inside it); default: searched where the framework offers it.",
    ),
]
MoeImbalanceOption = Annotated[
    float | None,
    typer.Option(
        "--moe-imbalance",
        help="The busiest expert rank's tokens over the even share (≥ 1; default 1.25, a "
        "capacity factor; 1 = forced balance).",
    ),
]
MoeNodeLimitOption = Annotated[
    int | None,
    typer.Option(
        "--moe-node-limit",
        help="DeepEP node-limited routing: a token goes to at most this many nodes (0: none; "
        "default: the model's group-limited routing, DeepSeek-V3's topk_group 4).",
    ),
]
StepJitterOption = Annotated[
    float | None,
    typer.Option(
        "--step-jitter",
        help="Relative variation of one device's step time (default clusters.toml's 0.02): a "
        "synchronous step waits for the slowest device, the 'straggler' part; 0 leaves it out.",
    ),
]
CudaGraphsOption = Annotated[
    bool | None,
    typer.Option(
        "--cuda-graphs/--no-cuda-graphs",
        help="Replay attention, the MoE router and dense FFNs as CUDA graphs (one launch each "
        "a pass) instead of launching each kernel from the host. Default: the framework's "
        "recipe (off; maxtext's compiled programs on).",
    ),
]
MoeFusionOption = Annotated[
    bool | None,
    typer.Option(
        "--moe-fusion/--no-moe-fusion",
        help="MoE router and permutation fused (Megatron-Core's --moe-router-fusion, "
        "--moe-permute-fusion; the default) or each op its own kernel.",
    ),
]
HostKernelUsOption = Annotated[
    float | None,
    typer.Option(
        "--host-kernel-us",
        help="Host microseconds to launch one kernel eagerly (default 10: PyTorch's 5-20 µs "
        "CPU launch); a layer whose kernels take longer to launch than to run is host-bound.",
    ),
]
FrameworkOption = Annotated[
    str | None,
    typer.Option(
        "--framework",
        help="Apply a framework's recipe defaults where nothing is pinned (default megatron: "
        "18 bytes of state a parameter, ETP 1 for MoE, gradient reduce overlapped); nemo (16 "
        "bytes, TP overlap on from 30B parameters, fused loss), torchtitan (FSDP, eager "
        "kernels and loss, FlashAttention-2), maxtext (FSDP, fused kernels and loss, cuDNN "
        "attention), deepspeed (16 bytes, gradient reduce after the backward). The assumed "
        "line says which.",
    ),
]
NoDpOverlapOption = Annotated[
    bool,
    typer.Option("--no-dp-overlap", help="Gradient reduction waits for the whole backward to end."),
]
HeadroomOption = Annotated[
    float, typer.Option("--headroom", help="Share of device memory kept free.")
]
MatmulEfficiencyOption = Annotated[
    float | None,
    typer.Option("--matmul-efficiency", help="Achieved/peak for training GEMMs, in (0, 1]."),
]
IntraBwOption = Annotated[
    str | None, typer.Option("--intra-bw", help="Intra-node bandwidth per device, one way.")
]
InterBwOption = Annotated[
    str | None, typer.Option("--inter-bw", help="Inter-node bandwidth per device, one way.")
]
DtypeOption = Annotated[str, typer.Option("--dtype", help="Training compute dtype.")]
TokensOption = Annotated[
    str | None, typer.Option("--tokens", help="Token budget: report time to train it.")
]
ScalingOption = Annotated[
    int, typer.Option("--scaling", help="Also plan at 2N, 4N, ... (this many doublings).")
]
CalibrateOption = Annotated[
    Path | None,
    typer.Option(
        "--calibrate",
        help="A torch.profiler trace of your own run: the GEMM, attention, memory and "
        "collective efficiencies it achieved replace the defaults.",
    ),
]


@app.command(cls=PlanCommand, help=PLAN_HELP)
def plan(
    model: ModelArg,
    gpus: GpusOption,
    spec: SpecOption = None,
    profile: ProfileOption = None,
    gpus_per_node: GpusPerNodeOption = None,
    global_batch: GlobalBatchOption = None,
    seq: SeqOption = None,
    top: TopOption = 5,
    fixed: FixedOption = None,
    attention: AttentionOption = None,
    dropout: DropoutOption = None,
    loss: LossOption = None,
    no_dp_overlap: NoDpOverlapOption = False,
    headroom: HeadroomOption = 0.10,
    matmul_efficiency: MatmulEfficiencyOption = None,
    intra_bw: IntraBwOption = None,
    inter_bw: InterBwOption = None,
    dtype: DtypeOption = "bf16",
    tokens: TokensOption = None,
    scaling: ScalingOption = 0,
    calibrate: CalibrateOption = None,
    framework: FrameworkOption = None,
    attention_kernel: AttentionKernelOption = None,
    moe_dispatcher: MoeDispatcherOption = None,
    moe_imbalance: MoeImbalanceOption = None,
    moe_node_limit: MoeNodeLimitOption = None,
    cuda_graphs: CudaGraphsOption = None,
    moe_fusion: MoeFusionOption = None,
    host_kernel_us: HostKernelUsOption = None,
    step_jitter: StepJitterOption = None,
    plot: PlotOption = None,
    json_out: JsonOption = False,
) -> None:
    from ceiling.api.plan import plan as plan_training

    # the counts and the doublings are checked (and refused by flag) in the API
    r = plan_training(
        model, gpus, spec=spec, machine_profile=profile, gpus_per_node=gpus_per_node,
        global_batch=global_batch, seq=seq, top=top, fixed=fixed, attention=attention,
        dropout=dropout, dp_overlap=not no_dp_overlap, headroom=headroom,
        matmul_efficiency=matmul_efficiency, intra_bw=intra_bw, inter_bw=inter_bw, dtype=dtype,
        tokens=tokens, scaling=scaling, loss=loss, calibrate=calibrate, framework=framework,
        attention_kernel=attention_kernel, moe_dispatcher=moe_dispatcher,
        moe_imbalance=moe_imbalance, moe_node_limit=moe_node_limit, cuda_graphs=cuda_graphs,
        moe_fusion=moe_fusion, host_kernel_us=host_kernel_us, step_jitter=step_jitter,
    )  # fmt: skip
    if plot is not None:  # where each ranked plan's step goes
        from ceiling.render import plots

        plots.save(r.figure(), plot)
    if json_out:
        emit_json(r.to_dict())
        return
    _render(r.model, r.job, r.cluster, r.search, r.scaling, r.assumptions)
    console().print(f"accuracy of the best plan's step: {r.accuracy().text()}")
    if plot is not None:
        console().print(f"figure: {plot}")


def _render(cfg, job, cluster, result, rows, assumptions) -> None:
    c = console()
    for line in _context_lines(cfg, job, cluster, result, assumptions):
        c.print(line)
    if cal := assumptions.get("calibrated_from"):
        for line in _calibration_lines(cal):
            c.print(line)
    c.print(_plans_table(result))
    for i, why in enumerate(result.why[1:], 2):
        c.print(f"#{i} vs #1: {why}")
    for line in _best_lines(job, result.plans[0]):
        c.print(line)
    if rows:
        _render_scaling(c, rows)


def _calibration_lines(cal: dict) -> list[str]:
    """What the trace measured, what the plan took of it and how far it reaches beyond it."""
    measured = cal.get("measured") or {}
    on = f" on {measured['device']}" if measured.get("device") else ""
    figures = cal["measured_figures"].items()
    found = ", ".join(f"{k} {v:.3g}" for k, v in figures) or "no figure (below: why)"
    lines = [f"calibrated from {cal['trace']}: measured{on}: {found}"]
    if measured.get("gemm_flops_per_call"):
        dtypes = ", ".join(measured.get("gemm_dtypes") or []) or "unknown dtypes"
        lines.append(f"  the trace measured GEMMs in {dtypes} of "
                     f"{measured['gemm_flops_per_call']:.3g} FLOPs a call")  # fmt: skip
    if measured.get("memory_bytes_per_call") and "memory_efficiency" in cal["taken"]:
        lines.append(f"  and memory-bound ops of {measured['memory_bytes_per_call']:.3g} bytes "
                     "a call")  # fmt: skip
    sequences = (cal.get("plan_gemm") or {}).get("sequences_a_call")
    if sequences and any(a["scope"] for a in (cal.get("applied") or {}).values()):
        lines.append(f"  the plan's calls counted over {sequences} sequences (the micro-batch "
                     "--fixed b= pins, else the batch each device gets)")  # fmt: skip
    for name, a in (cal.get("applied") or {}).items():
        took = "the default kept" if a["applied"] is None else f"{a['applied']:.3g}"
        lines.append(f"  applied to this plan: {name} {took}" + (f" ({a['scope']})" if a["scope"]
                     else ""))  # fmt: skip
    for name in cal.get("kept_defaults") or []:
        if name in (cal.get("applied") or {}):  # measured, its default kept: said above
            continue
        why = (cal.get("why_not") or {}).get(name)
        lines.append(f"  {name}: the default kept" + (f" ({why})" if why else ""))
    return lines


def _context_lines(cfg, job, cluster, result, assumptions) -> list[str]:
    """The model and job, the cluster, and what was assumed about them."""
    dev = cluster.device
    return [
        f"{cfg.name}: {cfg.params_total / 1e9:.1f}B parameters; global batch {job.global_batch} "
        f"× {job.seq_len} tokens = {job.global_batch * job.seq_len / 1e6:.2f}M tokens per step",
        f"cluster: {cluster.devices} × {dev.name} ({cluster.device_source}) = "
        f"{cluster.nodes} node(s) of "
        f"{cluster.devices_per_node}; {cluster.dtype} peak {cluster.peak_flops_per_s / 1e12:.0f} "
        f"TFLOP/s dense; links {cluster.intra_node_bandwidth_bytes_per_s / 1e9:.0f} GB/s inside "
        f"a node, {cluster.inter_node_bandwidth_bytes_per_s / 1e9:.1f} GB/s per device between "
        "nodes (one way)",
        f"assumed: matmul efficiency {cluster.matmul_efficiency:.2f} "
        f"({cluster.efficiency_source}), {job.attention} attention"
        + (" (the default kernel)" if assumptions["attention_from"] != "given" else "")
        + f", {'with' if job.dropout else 'no'} dropout"
        + (" (the model's config)" if assumptions["dropout_from"] != "given" else "")
        + f", {job.headroom:.0%} memory headroom"
        + (
            f"; FP8 GEMMs at {cluster.fp8_efficiency:.2f} of the FP8 peak "
            f"({cluster.fp8_efficiency_source})"
            if any(r.plan.fp8 != "off" for r in result.plans)
            else ""
        )
        + (f"; {assumptions['framework']}" if assumptions.get("framework") else "")
        + (f"; MoE: {assumptions['moe']}" if assumptions.get("moe") else "")
        + (f"; host: {assumptions['host']}" if assumptions.get("host") else ""),
        f"straggler: {assumptions['straggler']}",
    ] + (
        [f"from the model's config: {'; '.join(assumptions['model_facts'])}"]
        if assumptions.get("model_facts")
        else []
    )


def _plans_table(result):
    short = {"none": "none", "selective": "sel", "full": "full"}  # others as they are
    cols = ["#", "d×t×p", "v", "b/m", "memory saving", "GiB", "step", "MFU", "TF/s"]
    body = []
    for i, r in enumerate(result.plans, 1):
        pl = r.plan
        saving = f"z{pl.zero} {short.get(pl.recompute, pl.recompute)}" + (
            " sp" if pl.sequence_parallel else ""
        )
        body.append(
            [
                i,
                f"{pl.d}×{pl.t}×{pl.p}"
                + (f" cp{pl.cp}" if pl.cp > 1 else "")
                + (f" ep{pl.ep}" if pl.ep > 1 else "")
                + (" fp8" if pl.fp8 != "off" else "")
                + (f" {_stages(r)}" if pl.first_stage_layers else ""),
                pl.v,
                f"{pl.micro_batch}/{r.micro_batches}",
                saving,
                f"{r.memory_bytes_per_device / 2**30:.1f}",
                f"{r.step_time_s:.3g}s",
                f"{r.mfu:.1%}",
                f"{r.hw_tflops_per_device:.0f}",
            ]
        )
    return table(
        f"{result.fitting} of {result.evaluated} valid plans fit; fastest per d×t×p×cp",
        cols,
        body,
        caption="b/m: micro-batch / micro-batches per step; memory saving: ZeRO stage, "
        "recomputation, sequence parallelism; GiB per device; TF/s: hardware TFLOP/s per "
        "device, recomputation counted",
    )


# A host-bound share of the step worth a line of its own.
HOST_BOUND_SHARE = 0.02


def host_bound_line(job, share: float) -> str:
    """What the step's host-bound share means and what would shorten it."""
    cures = [] if job.cuda_graphs else ["CUDA graphs (--cuda-graphs)"]
    if job.model.experts > 1 and not (job.moe_router_fusion and job.moe_permute_fusion):
        cures.append("the MoE router and permutation fused (--moe-fusion)")
    cure = " or ".join(cures) or "fewer, larger kernels (a larger micro-batch)"
    return (
        f"host-bound: {share:.0%} of the step the GPU waits for the host to launch the "
        f"layers' kernels ({job.host_kernel_s * 1e6:g} µs each); {cure} would shorten it"
    )


def _best_lines(job, best) -> list[str]:
    """Where the best plan's step time and memory go, and what it delivers."""
    parts = ", ".join(
        f"{k.removesuffix('_s').replace('_', ' ')} {v / best.step_time_s:.0%}"
        for k, v in best.time.items()
        if v / best.step_time_s >= 0.005
    )
    lines = [
        f"best plan: {best.plan.describe()}",
        f"best step {format_time(best.step_time_s)}: {parts}",
    ]
    if (host := best.time.get("host_s", 0.0)) / best.step_time_s >= HOST_BOUND_SHARE:
        lines.append(host_bound_line(job, host / best.step_time_s))
    hidden = ", ".join(f"{k.upper()} {format_time(v)}" for k, v in best.hidden.items() if v >= 1e-4)
    if hidden:
        lines.append(f"communication hidden behind compute (not in the step): {hidden}")
    lines.append(_memory_line(best, job.model.layers))
    if best.recompute_s > 0:
        lines.append(
            f"recompute={best.plan.recompute}: rebuilding activations takes "
            f"{format_time(best.recompute_s)} of the step (inside the parts above); kept: "
            f"{best.recompute_detail['kept']}; rebuilt: {best.recompute_detail['rebuilt']}"
        )
    lines.append(
        f"best: {format_number(best.tokens_per_s)} tokens/s; MFU {format_percent(best.mfu)}, "
        f"HFU {format_percent(best.hfu)}, {best.hw_tflops_per_device:.0f} TFLOP/s per device"
        + (
            f"; {job.token_budget:.3g} tokens in {format_time(best.time_to_train_s)}"
            f" ({format_number(best.time_to_train_s / 86400, 1)} days)"
            if best.time_to_train_s
            else ""
        )
    )
    return lines + [f"note: {note}" for note in best.notes]


def _memory_line(best, layers: int | None = None) -> str:
    """Where the best plan's memory goes, in the order a user trims it."""
    mem, pl = best.memory, best.plan

    def gib(x: float) -> str:
        return format_bytes(x, binary=True)

    grad = "16-bit" if pl.state_bytes_per_param == 16 else "fp32"
    sharded = {0: "", 1: ", optimizer sharded over d", 2: ", optimizer and gradients sharded"}
    parts = [
        f"weights {gib(mem['weight_bytes'])}",
        f"{grad} gradients {gib(mem['gradient_bytes'])}",
        f"Adam state {gib(mem['optimizer_bytes'])}",
        f"activations {gib(mem['activation_bytes'])}",
    ]
    within = (("logits_bytes", "the loss's logits"), ("recompute_working_bytes", "a rebuilt layer"))
    of_them = ", ".join(f"{label} {gib(mem[key])}" for key, label in within if mem.get(key))
    if of_them:
        parts[-1] += f" (of them {of_them})"
    fp8_copies = "FP8 weight transposes" if pl.fp8_params else "FP8 weight copies"
    optional = (
        ("gathered_weight_bytes", "gathered weights"),
        ("fp8_weight_bytes", fp8_copies),
    )
    parts += [f"{label} {gib(mem[key])}" for key, label in optional if mem.get(key)]
    zero = sharded.get(pl.zero, ", everything sharded over d (ZeRO-3)")
    where = best.stages.get("heaviest_memory", "last") if pl.p > 1 else ""
    return (
        f"best memory per device {gib(best.memory_bytes_per_device)} of "
        f"{gib(best.usable_bytes_per_device)} usable"
        + (f" (its {where} pipeline stage, {_stages(best, layers)} layers)" if where else "")
        + f": {', '.join(parts)} "
        f"({best.memory['params_per_device'] / 1e9:.2f}B parameters per device{zero})"
    )


def _stages(result, layers: int | None = None) -> str:
    """'7,8…8,7': layers on the first, the middle and the last pipeline stage. Where the
    even share leaves a remainder, every stage is priced at the fullest one's layers; the
    split itself is shown as it holds the model's layers ('16,15×3' for 61 on 4 stages)."""
    first, mid, last = result.stages.get("layers", (0, 0, 0))
    p = result.plan.p
    if layers and p > 1 and first + mid * (p - 2) + last != layers:
        split = [layers // p + (i < layers % p) for i in range(p)]
        runs = [(n, len(list(group))) for n, group in itertools.groupby(split)]
        return ",".join(f"{n}×{k}" if k > 1 else f"{n}" for n, k in runs)
    middle = "" if p < 3 else (f"{mid}," if p == 3 else f"{mid}…{mid},")
    return f"{first},{middle}{last}"


def _layout(pl) -> str:
    return (
        f"{pl.d}×{pl.t}×{pl.p}"
        + (f" cp{pl.cp}" if pl.cp > 1 else "")
        + (f" v{pl.v}" if pl.v > 1 else "")
        + (f" ep{pl.ep}" if pl.ep > 1 else "")
    )


def _render_scaling(c, rows) -> None:
    srows = []
    for row in rows:
        if row.best is None:
            srows.append([row.devices, "no plan fits", "", "", "", "", ""])
            continue
        b = row.best
        serial = "" if row.serial_fraction is None else f"{row.serial_fraction:.3f}"
        srows.append(
            [
                row.devices,
                _layout(b.plan),
                format_time(b.step_time_s),
                f"{row.speedup:.2f}×",
                format_percent(row.efficiency),
                serial,
                format_percent(b.mfu),
            ]
        )
    c.print(
        table(
            "Scaling: the same job on more devices",
            ["devices", "d×t×p", "step", "speedup", "efficiency", "serial", "MFU"],
            srows,
            caption="serial: Karp–Flatt serial fraction against the first row; growing "
            "with N means overhead that grows with N",
        )
    )
    stop = next(
        (
            (a, b)
            for a, b in itertools.pairwise(rows)
            if a.best and b.best and b.speedup / a.speedup < 1.5
        ),
        None,
    )
    if stop:
        a, b = stop[0].best, stop[1].best
        share = {k: b.time[k] / b.step_time_s - a.time[k] / a.step_time_s for k in b.time}
        key = max(share, key=share.get)
        name = key.removesuffix("_s").replace("_", " ")
        c.print(
            f"payoff flattens: {stop[0].devices} → {stop[1].devices} devices buys only "
            f"{stop[1].speedup / stop[0].speedup:.2f}×; {name} grows from "
            f"{a.time[key] / a.step_time_s:.0%} to {b.time[key] / b.step_time_s:.0%} of the "
            "step (the global batch is fixed, so each device gets less work per step)"
        )
