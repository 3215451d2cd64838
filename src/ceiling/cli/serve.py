"""`ceiling serve`: what a deployment serves at a request load (simulated, or measured)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ceiling.cli.app import app
from ceiling.cli.decode import ActivationsOption, KvDtypeOption, ModelArg
from ceiling.cli.device_options import ProfileOption, SpecOption
from ceiling.cli.inputs import TpOption, option
from ceiling.cli.output import (
    LIST_HELP,
    JsonOption,
    PlotOption,
    comma_list,
    console,
    figure_and_json,
    table,
)
from ceiling.inputs import GPUS, WEIGHTS
from ceiling.units import format_time

SERVE_HELP = """What a deployment serves at a request load: TTFT, TPOT, ITL, end-to-end
latency (mean, p50, p90, p99), output tokens/s and requests/s, KV-cache use and preemptions.

A simulation of a continuous-batching scheduler (vLLM-style: --max-num-seqs,
--max-batched-tokens, chunked prefill, a paged KV cache that preempts when full), each
iteration timed by the terms of `ceiling decode`'s expected step (weights and KV bytes at
the reachable bandwidth, GEMMs and attention at their shares of the peak, CUDA graphs,
tensor-parallel all-reduces). Workload: --input-tokens/--output-tokens (fixed),
--dataset sharegpt, or --requests FILE (JSONL: prompt_tokens, output_tokens[, arrival_s]).
Load: --rate R (Poisson, requests/s), --concurrency C (closed loop; its C streams start
at once, or over --ramp-up) with --num-requests N, or --offline N (N at once; the default,
with 1000).

--slo ttft_p99=2s,tpot_p99=200ms finds the highest rate that meets it; with --target-rate,
the fewest GPUs over tensor-parallel layouts and replicas. --measure URL sends the same
workload to a running OpenAI-compatible server (vLLM, SGLang, TensorRT-LLM, transformers
serve) and shows what it measured beside, every read bounded by --deadlines; its --json
given to --calibrate fits the engine's costs to that server, to predict other loads,
lengths and batch limits from it. vLLM's benchmark flags are accepted (--request-rate,
--num-prompts, --random-input-len, --random-output-len, --max-concurrency)."""


def _opt(flags: str | tuple[str, ...], help_: str, kind=int):
    """An option with no default; more than one flag where vLLM's benchmark names it too
    (`vllm bench serve --request-rate`: the same option)."""
    names = (flags,) if isinstance(flags, str) else flags
    return Annotated[kind | None, typer.Option(*names, help=help_, show_default=False)]


Weights = option(WEIGHTS, str | None, "On a CPU: fp32, the dtype a torch model is built in.")
Chunked = Annotated[
    bool,
    typer.Option(
        "--chunked-prefill/--no-chunked-prefill",
        help="Split prompts into chunks mixed with decodes.",
    ),
]
HitRate = Annotated[
    float,
    typer.Option("--prefix-hit-rate", help="Share of each prompt found in the prefix cache."),
]
Acceptance = Annotated[
    float, typer.Option("--acceptance", help="Probability a draft token is accepted.")
]
ReserveKv = Annotated[
    bool | None,
    typer.Option(
        "--reserve-kv/--no-reserve-kv",
        help="Reserve each request's whole KV cache at admission (TensorRT-LLM's "
        "GUARANTEED_NO_EVICT; default: on with --engine trtllm, else off).",
        show_default=False,
    ),
]
MaxSeqs = Annotated[int, typer.Option("--max-num-seqs", help="Sequences a batch holds.")]
MaxTokens = Annotated[int, typer.Option("--max-batched-tokens", help="Tokens an iteration holds.")]
SchedulerSteps = Annotated[
    int,
    typer.Option(
        "--scheduler-steps",
        "--num-scheduler-steps",
        help="Decode steps a scheduler call runs (vLLM 0.6's multi-step scheduling): a new "
        "request waits for the block to end; the engine's host share is paid once a block.",
    ),
]
SpecTokens = Annotated[int, typer.Option("--spec-tokens", help="Draft tokens a step.")]
Seed = Annotated[int, typer.Option("--seed", help="Random seed of lengths and arrivals.")]
Tp = TpOption
Pp = Annotated[int, typer.Option("--pp", help="Pipeline stages.")]
Gpus = option(GPUS, int | None, "Default: tp × pp × replicas.", show_default=False)
Replicas = _opt("--replicas", "Replicas (default: --gpus / (tp × pp), else 1).")
InputTokens = _opt(("--input-tokens", "--random-input-len"), "Prompt tokens of every request "
                   "(fixed).")  # fmt: skip
OutputTokens = _opt(("--output-tokens", "--random-output-len"), "Output tokens of every "
                    "request (fixed).")  # fmt: skip
Dataset = _opt(
    "--dataset",
    "A named length distribution: sharegpt, in the served model's tokens (a 32k vocabulary"
    " makes 1.24× the tokens of the Llama 3 tokenizer it was counted with).",
    str,
)
Requests = _opt("--requests", "JSONL of requests: prompt_tokens, output_tokens.", Path)
Rate = _opt(("--rate", "--request-rate"), "Poisson arrivals, requests/s.", float)
Concurrency = _opt(("--concurrency", "--max-concurrency"), "Closed loop: requests in flight.")
RampUp = _opt(
    "--ramp-up",
    "With --concurrency: spread the streams' first requests evenly over this time (2s, "
    "500ms; guidellm's rampup_duration), so they do not all start, and stay, in step.",
    str,
)
Offline = _opt("--offline", "N requests at once.")
NumRequests = _opt(("--num-requests", "--num-prompts"), "Requests to simulate (default 1000).")
Speculative = _opt("--speculative", "Speculative decoding: ngram, or a draft model.", str)
SloOption = _opt("--slo", "Targets: ttft_p99=2s,tpot_p99=200ms (ttft_p50, tpot_p50, e2e_p99).", str)
TargetRate = _opt("--target-rate", "With --slo: the fewest GPUs for this many requests/s.", float)
Measure = _opt("--measure", "URL of an OpenAI-compatible server to measure.", str)
Calibrate = Annotated[
    list[str] | None,
    typer.Option(
        "--calibrate",
        help="A measured run (the JSON of `serve --measure URL --json`): fit the engine's "
        "cost an iteration, a sequence in it (from its requests' TPOT against the batch "
        "beside each) and a request, and the device's speed, to what it measured, then "
        "predict this run with them. Runs at other loads beside it (" + LIST_HELP + ") "
        "fit them across the loads too.",
        show_default=False,
    ),
]
Deadlines = _opt(
    "--deadlines",
    "Bounds of --measure: connect=10s,first_byte=2m,idle=5m,run=1h (the defaults; give any "
    "of them). idle: the longest wait between two reads of a stream, a queued request's "
    "wait for its first token included; run: the whole measurement.",
    str,
)
MemoryUtilization = _opt(
    "--memory-utilization",
    "Share of each device's memory for weights and KV cache (vLLM's gpu_memory_utilization, "
    "SGLang's mem_fraction_static; default 0.9); with --engine trtllm the share of the "
    "memory the weights leave that the KV cache takes (kv_cache_free_gpu_mem_fraction).",
    float,
)
EngineOption = Annotated[
    str,
    typer.Option(
        "--engine",
        help="Host time per iteration of the engine: generic (none), vllm or sglang (10 %: a "
        "Python scheduler the GPU waits for), trtllm (none: its executor runs ahead), "
        "transformers (transformers serve: its Python's time for each sequence an iteration, "
        "110 of the host's eager ops).",
    ),
]


@app.command(help=SERVE_HELP)
def serve(
    model: ModelArg,
    spec: SpecOption = None,
    profile: ProfileOption = None,
    gpus: Gpus = None,
    tp: Tp = 1,
    pp: Pp = 1,
    replicas: Replicas = None,
    weights: Weights = None,
    kv_dtype: KvDtypeOption = None,
    activations: ActivationsOption = None,
    input_tokens: InputTokens = None,
    output_tokens: OutputTokens = None,
    dataset: Dataset = None,
    requests: Requests = None,
    rate: Rate = None,
    concurrency: Concurrency = None,
    ramp_up: RampUp = None,
    offline: Offline = None,
    num_requests: NumRequests = None,
    max_num_seqs: MaxSeqs = 256,
    max_batched_tokens: MaxTokens = 8192,
    scheduler_steps: SchedulerSteps = 1,
    chunked_prefill: Chunked = True,
    prefix_hit_rate: HitRate = 0.0,
    speculative: Speculative = None,
    spec_tokens: SpecTokens = 0,
    acceptance: Acceptance = 0.0,
    reserve_kv: ReserveKv = None,
    slo: SloOption = None,
    target_rate: TargetRate = None,
    seed: Seed = 0,
    measure: Measure = None,
    engine: EngineOption = "generic",
    memory_utilization: MemoryUtilization = None,
    deadlines: Deadlines = None,
    calibrate: Calibrate = None,
    json_out: JsonOption = False,
    plot: PlotOption = None,
) -> None:
    from ceiling.api.serve import serve as simulate_serving

    r = simulate_serving(
        model, spec=spec, machine_profile=profile, gpus=gpus, tp=tp, pp=pp, replicas=replicas,
        weights=weights, kv_dtype=kv_dtype, activations=activations,
        input_tokens=input_tokens, output_tokens=output_tokens, dataset=dataset,
        requests=requests, rate=rate, concurrency=concurrency, ramp_up=ramp_up, offline=offline,
        num_requests=num_requests, max_num_seqs=max_num_seqs,
        max_batched_tokens=max_batched_tokens, scheduler_steps=scheduler_steps,
        chunked_prefill=chunked_prefill,
        prefix_hit_rate=prefix_hit_rate, speculative=speculative, spec_tokens=spec_tokens,
        acceptance=acceptance, reserve_kv=reserve_kv, slo=slo, target_rate=target_rate,
        curve=plot is not None, seed=seed, measure=measure, engine=engine,
        memory_utilization=memory_utilization, deadlines=deadlines, calibrate=comma_list(calibrate),
    )  # fmt: skip
    if figure_and_json(r, plot, json_out):
        return
    _show(r)
    if plot:
        console().print(f"figure: {plot}")


def _sequence_ops(ops: dict) -> str:
    """Where the engine's time a sequence comes from, in words."""
    op = format_time(ops["op_s"])
    if ops["op_measured"]:
        return f" ({ops['ops']} × the host's {op} an eager op, from the machine profile)"
    return (f" ({ops['ops']} × {op} an eager op, a default: give --profile a machine profile "
            "of this host for its own)")  # fmt: skip


def _dist_row(name, d, measured=None) -> list[str]:
    row = [name, format_time(d.mean), format_time(d.p50), format_time(d.p90), format_time(d.p99)]
    return row + ([format_time(measured.p50)] if measured is not None else [])


def _show(r) -> None:
    con = console()
    m, lay, inp = r.metrics, r.inputs["layout"], r.inputs
    con.print(r.heading())
    units = "CPU" if inp["device_kind"] == "cpu" else "GPUs" if lay["gpus"] > 1 else "GPU"
    con.print(
        f"layout: {lay['gpus']} {units} = TP {lay['tp']} × PP {lay['pp']} × {lay['replicas']} "
        f"replicas; weights {inp['weights']}, KV cache {inp['kv_dtype']} "
        f"({r.kv_blocks * inp['block_size']:,} tokens per engine)"
    )
    con.print(f"workload: {m.requests:,} requests, {inp['workload']}; load: {inp['load']}")
    con.print(
        f"assumed: engine {inp['engine']}, its host adding {inp['host_share'] * 100:.0f} % to "
        f"each iteration's device time (--engine generic|vllm|sglang|trtllm|transformers), "
        f"{format_time(inp['iteration_s'])} of host work between two iterations and "
        f"{format_time(inp['request_s'])} a request through the server"
        + (f"; the device at {inp['device_scale']:.3g}× its priced time"
           if inp["device_scale"] != 1 else "")
        + (f"; {format_time(inp['sequence_s'])} more an iteration for each sequence in it"
           if inp["sequence_s"] else "")
        + (_sequence_ops(inp["sequence_ops"]) if inp.get("sequence_ops") else "")
        + (f"; {inp['scheduler_steps']} decode steps a scheduler call (multi-step), the "
           "host's share paid once a block" if inp["scheduler_steps"] > 1 else "")
    )  # fmt: skip
    if ops := inp.get("eager_ops"):
        con.print(
            f"on this CPU each iteration runs the model's eager forward: {ops['per_layer']} ops "
            f"a layer ({ops['per_layer_views']} of them views) and {ops['outside_layers']} "
            "outside the layers, counted from its own decode step, each paying "
            f"{format_time(ops['host_op_s'])} of host time (a view its measured share)"
        )
    if r.calibration is not None:
        _show_calibration(r.calibration)
    meas = r.measured
    con.print(
        f"simulated: {m.output_tokens_per_s:,.0f} output tokens/s, {m.requests_per_s:.3g} "
        f"requests/s"
        + (
            f"; measured: {meas.output_tokens_per_s:,.0f} output tokens/s, "
            f"{meas.requests_per_s:.3g} requests/s ({meas.failed} failed, {meas.unfinished} "
            "unfinished)"
            if meas
            else ""
        )
    )
    if meas:
        _show_measured(meas)
    bands = r.accuracy()
    con.print(f"accuracy of the throughput: {bands['throughput'].text()}")
    con.print(f"accuracy of the latencies: {bands['latency'].text()}")
    cols = ["latency", "mean", "p50", "p90", "p99"] + (["measured p50"] if meas else [])
    con.print(
        table(
            "Latency per request (simulated)",
            cols,
            [
                _dist_row("TTFT", m.ttft_s, meas.ttft_s if meas else None),
                _dist_row("TPOT", m.tpot_s, meas.tpot_s if meas else None),
                _dist_row("ITL", m.itl_s, meas.itl_s if meas else None),
                _dist_row("E2E", m.e2e_s, meas.e2e_s if meas else None),
            ],
            caption="TTFT: time to first token; TPOT: time per output token after the first; "
            "ITL: each gap between two streamed chunks; E2E: arrival to last token "
            "(vLLM's benchmark_serving definitions)",
            compact=True,
        )
    )
    _show_iteration_and_slo(r)


def _show_iteration_and_slo(r) -> None:
    con, m = console(), r.metrics
    con.print(
        f"KV cache use: mean {m.kv_use_mean * 100:.1f} %, peak {m.kv_use_peak * 100:.1f} %; "
        f"preemptions {m.preemptions}; mean batch {m.mean_batch:.1f} sequences"
    )
    it = r.iteration_at_batch
    con.print(
        f"bound: prefill {m.prefill_bound} ({m.prefill_share * 100:.0f} % of the time), decode "
        f"{m.decode_bound}; a decode iteration at batch {it['batch']}: "
        f"{format_time(it['time_s'])} (weights {format_time(it['weights_s'])}, KV "
        f"{format_time(it['kv_s'])}, activations {format_time(it['activation_s'])}, "
        + (f"dequantisation {format_time(it['dequant_s'])}, " if it["dequant_s"] else "")
        + f"all-reduce {format_time(it['comm_s'])}, launches {format_time(it['launch_s'])})"
    )
    if r.slo is not None:
        con.print(
            f"SLO {_targets(r.slo)}: highest rate {r.max_rate_per_s:.3g} requests/s"
            + (
                f" ({r.at_max_rate.output_tokens_per_s:,.0f} output tokens/s)"
                if r.at_max_rate
                else ""
            )
        )
    if r.fewest_gpus:
        con.print(
            table(
                "Fewest GPUs for the target rate",
                ["tp", "max rate/replica", "replicas", "GPUs"],
                [[x["tp"], f"{x['max_rate_per_s']:.3g}", x["replicas"] or "—", x["gpus"] or "—"]
                 for x in r.fewest_gpus],
                compact=True,
            )
        )  # fmt: skip


def _targets(slo) -> str:
    """`ttft_p99 ≤ 2 s, tpot_p99 ≤ 200 ms`: the targets as --slo spells them, with units."""
    return ", ".join(f"{k.removesuffix('_s')} ≤ {format_time(v)}" for k, v in slo.to_json().items())


IN_STEP = 0.5  # a closed loop is said to be in step when this share started together


def _show_measured(meas) -> None:
    con = console()
    con.print(
        f"measured at {meas.url} ({meas.model}, {meas.protocol.path}): tokens counted by "
        f"{meas.counted}" + (f"; {meas.warmup} warm-up requests left out, as simulated"
                             if meas.warmup else "")
    )  # fmt: skip
    for note in meas.protocol.notes:
        con.print(f"note: {note}")
    for error, count in meas.errors:
        con.print(f"failed: {count} × {error}")
    if meas.interrupted:
        con.print(f"the measurement stopped early ({meas.interrupted}): the figures are the "
                  "requests that finished")  # fmt: skip
    if meas.started_together is not None and meas.started_together >= IN_STEP:
        con.print(
            f"in step: {meas.started_together:.0%} of the requests were sent within one "
            f"iteration (ITL p50, {format_time(meas.itl_s.p50)}) of another, so their prompts "
            "were prefilled together and each TTFT holds several prefills; a client whose "
            "streams drift apart measures less (--ramp-up spreads them)"
        )


def _show_calibration(cal) -> None:
    con = console()
    names = {"ttft_p50_s": "TTFT p50", "tpot_p50_s": "TPOT p50", "tpot_p90_s": "TPOT p90",
             "output_tokens_per_s": "output tokens/s"}  # fmt: skip
    con.print(
        f"calibrated from {cal.source} (measured on {cal.device}): "
        f"{format_time(cal.iteration_s)} an iteration and {format_time(cal.sequence_s)} a "
        f"sequence in it, {format_time(cal.request_s)} a request, the device at "
        f"{cal.device_scale:.3g}× its priced time"
    )
    names |= {"tpot_at_low_s": "TPOT line at its low end", "tpot_at_high_s": "at its high end"}
    batches = cal.batches or (None,) * len(cal.sources)
    for source, before, after, b in zip(cal.sources, cal.errors(cal.before),
                                        cal.errors(cal.after), batches, strict=True):  # fmt: skip
        con.print(f"  {source}: {_batches_said(b, len(cal.sources))}")
        changes = [f"{names[k]} {before[k] * 100:+.0f} % → {after[k] * 100:+.0f} %"
                   for k in before]  # fmt: skip
        con.print(f"  {source} simulated again: " + "; ".join(changes))


def _batches_said(b, runs: int) -> str:
    """What a measured run's requests told of TPOT against the batch (`DecodeBatches`)."""
    if b is None:
        return "keeps no requests' times: TPOT's growth with the batch is " + (
            "fitted from the loads" if runs > 1 else "not fitted (one fixed cost)"
        )
    lo, hi = b.concurrency
    (ea, eb), seen = b.errors_s, f"{lo:.2g}–{hi:.2g} sequences decoding ({b.requests} requests)"
    line = (f"{format_time(b.per_iteration_s)} ± {format_time(ea)} an iteration + "
            f"{format_time(b.per_sequence_s)} ± {format_time(eb)} a sequence")  # fmt: skip
    if b.separable:
        return f"TPOT over {seen}: {line}"
    return (
        f"TPOT over {seen}, too narrow a range to tell a time per sequence from the fixed "
        f"time ({line}): " + ("fitted from the loads" if runs > 1 else "one fixed cost")
    )
