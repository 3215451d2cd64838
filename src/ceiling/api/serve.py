"""Serving as a result: `ceiling.serve("llama-3-8b", spec="h100-sxm", rate=4)`.

What a deployment serves at a request load — TTFT, TPOT, E2E, throughput, KV-cache use —
from a simulation of a continuous-batching scheduler (`ceiling.model.serve`), each
iteration timed by the expected decode step's terms; with an SLO, the highest rate that
meets it and, given a target rate, the fewest GPUs over layouts and replicas; with
`measure`, the same workload sent to a running OpenAI-compatible server beside it. The
arguments are checked in `ceiling.api.serve_inputs`, a calibrated run is fitted in
`ceiling.api.serve_calibrate`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ceiling.api.arguments import checked
from ceiling.api.result import Result
from ceiling.api.serve_calibrate import recorded_call
from ceiling.api.serve_inputs import (
    ServeInputs,
    checked_inputs,
    engine_sequence_s,
    load_arrivals,
    profile_alias,
    sequence_ops,
)

CURVE_SHARES = (0.1, 0.25, 0.4, 0.55, 0.7, 0.85, 1.0)


@dataclass(frozen=True)
class ServeResult(Result):
    """A simulated deployment under load: `metrics` (`model.serve.metrics.ServeMetrics`),
    what was simulated (`inputs`), and, when asked, the latency–throughput `curve`, the SLO's
    `max_rate_per_s`, the `fewest_gpus` layouts and a `measured` server's figures."""

    model: Any
    device: Any
    device_source: str
    inputs: dict
    metrics: Any
    kv_blocks: int
    iteration_at_batch: dict  # one decode iteration's terms at the mean batch and context
    curve: list | None = None
    slo: Any = None
    max_rate_per_s: float | None = None
    at_max_rate: Any = None
    fewest_gpus: list | None = None
    # the simulated schedules behind `metrics`, and the time a request adds to them (for
    # `ceiling validate`'s sensitivities; not in the JSON)
    schedules: Any = field(default=None, repr=False, compare=False)
    request_s: float = 0.0
    measured: Any = None
    calibration: Any = None  # `model.serve.calibrate.Calibration`, when calibrated
    title = "Serving"

    def accuracy(self) -> dict:
        """The error bands of the simulated throughput and latencies (`throughput`,
        `latency`): the regime they fall in and its |error| on published runs, scored
        leave-one-source-out."""
        from ceiling.validation.features import serving_bands

        return serving_bands(self)

    def record(self) -> dict[str, Any]:
        out = {
            "model": self.model.name,
            "device": self.device.name,
            "device_source": self.device_source,
            **self.inputs,
            "kv_cache_blocks": self.kv_blocks,
            "kv_cache_tokens": self.kv_blocks * self.inputs["block_size"],
            **self.metrics.to_json(),
            "iteration": self.iteration_at_batch,
            "accuracy": {k: b.to_json() for k, b in self.accuracy().items()},
        }
        if self.curve is not None:
            out["curve"] = [{"rate_per_s": rate, **_short(m)} for rate, m in self.curve]
        if self.slo is not None:
            out["slo"] = self.slo.to_json()
            out["max_rate_per_s"] = self.max_rate_per_s
            out["at_max_rate"] = _short(self.at_max_rate) if self.at_max_rate else None
        if self.fewest_gpus is not None:
            out["fewest_gpus"] = self.fewest_gpus
        if self.measured is not None:
            out["measured"] = self.measured.to_json()
        if self.calibration is not None:
            out["calibration"] = self.calibration.to_json()
        return out

    def heading(self) -> str:
        return f"{self.model.name} served on {self.device.name} ({self.device_source})"

    def figure(self):
        from ceiling.render.serve_plot import serve_figure

        lay = self.inputs["layout"]
        title = (
            f"{self.model.name} on {lay['gpus']} × {self.device.name} (TP {lay['tp']}, "
            f"PP {lay['pp']}, {lay['replicas']} replicas): simulated"
        )
        return serve_figure(self.curve, title, self.metrics, f"this load ({self.inputs['load']})",
                            self.measured)  # fmt: skip


def _short(m) -> dict:
    from ceiling.model.serve.metrics import headline_json

    return headline_json(m)


@checked
def serve(
    model: str,
    *,
    spec: str | None = None,
    machine_profile: Path | str | None = None,
    gpus: int | None = None,
    tp: int = 1,
    pp: int = 1,
    replicas: int | None = None,
    weights: str | None = None,
    kv_dtype: str | None = None,
    activations: str | None = None,
    input_tokens: int | None = None,
    output_tokens: int | None = None,
    dataset: str | None = None,
    requests: Any = None,
    rate: float | None = None,
    concurrency: int | None = None,
    ramp_up: float | str | None = None,
    offline: int | None = None,
    num_requests: int | None = None,
    max_num_seqs: int = 256,
    scheduler_steps: int = 1,
    max_batched_tokens: int = 8192,
    chunked_prefill: bool = True,
    prefix_hit_rate: float = 0.0,
    speculative: str | None = None,
    spec_tokens: int = 0,
    acceptance: float = 0.0,
    reserve_kv: bool | None = None,
    slo: Any = None,
    target_rate: float | None = None,
    curve: bool = False,
    seed: int = 0,
    measure: str | None = None,
    engine: str = "generic",
    memory_utilization: float | None = None,
    deadlines: Any = None,
    calibrate: Any = None,
    device_scale: float = 1.0,
    sequence_s: float | None = None,
    profile: Path | str | None = None,
) -> ServeResult:
    """Simulate serving `model` on `gpus` devices (`spec`/`machine_profile`) laid out as `tp` ×
    `pp` × `replicas`, under a load: Poisson `rate` (requests/s), closed-loop
    `concurrency` (its streams' first requests at once, or spread evenly over `ramp_up`:
    "2s", or seconds), or `offline` N requests at once (default: offline). Workload: fixed
    `input_tokens`/`output_tokens`, a named `dataset` (default "sharegpt") or `requests`
    (a JSONL file of prompt_tokens/output_tokens[/arrival_s] lines, or two length lists).
    `weights`: a dtype or a 4-bit format (int4, awq, gptq, mxfp4); default bf16, fp32 on a
    CPU. Engine: `max_num_seqs`,
    `max_batched_tokens`, `scheduler_steps` (vLLM 0.6's multi-step scheduling: decode steps
    a scheduler call runs, 1), `chunked_prefill`, `prefix_hit_rate`, speculative decoding
    (`speculative`: "ngram" or a draft model; `spec_tokens`, `acceptance`), `reserve_kv`
    (TensorRT-LLM's no-eviction admission; default: on with engine "trtllm"). `slo`
    ("ttft_p99=2s,tpot_p99=200ms") adds the highest rate meeting it, and with `target_rate`
    the fewest GPUs; `curve` the latency–throughput curve; `measure` a server URL to run
    the same workload against.
    `engine` ("generic", "vllm", "sglang", "trtllm", "transformers"): the host time the
    engine adds to each iteration (`ceiling.model.serve.engine.HOST_SHARE`; generic: none),
    and transformers serve's for each sequence in it (`engine.SEQUENCE_OPS`, in the host's
    time an eager op). `memory_utilization`:
    the share of each device's memory the engine may use for weights and KV cache (vLLM's
    `gpu_memory_utilization`, SGLang's `mem_fraction_static`; default 0.9). `deadlines`
    bound a measurement ("connect=10s,first_byte=2m,idle=5m,run=1h", the defaults).
    `calibrate`: a measured run (the JSON of `serve --measure URL --json`, or its dict), or
    several at other loads: the engine's per-iteration, per-sequence (from the requests'
    TPOT against the batch beside each, or from several loads) and per-request costs and
    the device's scale are fitted so that the runs' simulations give what was measured,
    then used here (`calibration` says the fit).
    `device_scale`: the device's time of an iteration over its priced terms (1);
    `sequence_s`: the host's time an iteration for each sequence in it (None: the shipped
    `engine.SEQUENCE_S`). `profile`: the
    old name of `machine_profile`, still taken (with a DeprecationWarning)."""
    machine_profile, profile = profile_alias(machine_profile, profile), None
    args = dict(locals())
    if calibrate is not None:
        from ceiling.api.serve_calibrate import calibrated_serve

        return calibrated_serve(calibrate, serve, {k: v for k, v in args.items()
                                                   if k != "calibrate"})  # fmt: skip
    return _simulated(checked_inputs(args))


def _simulated(inp: ServeInputs) -> ServeResult:
    """The simulation of the checked call `inp`, with what else it asks for: the curve, the
    SLO's rate and fewest GPUs, a server measured."""
    a = inp.args
    make = functools.partial(_engine, inp)
    engine = make(inp.layout)
    arrival, load = load_arrivals(inp.arrivals, inp.loads, a["rate"], a["concurrency"], inp.n,
                                  a["seed"], a["ramp_up"])  # fmt: skip
    metrics, schedules = engine.metrics_and_schedules(inp.prompt, inp.output, arrival,
                                                      a["concurrency"])  # fmt: skip
    from ceiling.model.serve.scheduler import late_streams

    late = late_streams(schedules) if a["ramp_up"] else 0
    if late:
        load += (f"; the ramp-up outlasts the run: {late} of the streams started after every "
                 "other request had been sent, so fewer ran at once")  # fmt: skip
    iteration = _iteration_record(engine, metrics.mean_batch, inp.prompt, inp.output)
    return ServeResult(
        inp.cfg, inp.device, inp.resolved.source, _inputs_record(inp, engine, load), metrics,
        engine.kv_blocks, iteration, **_predictions(inp, engine, make),
        measured=_measured(inp, arrival), schedules=schedules, request_s=engine.request_s,
    )  # fmt: skip


def _engine(inp: ServeInputs, layout):
    """The engine of the call `inp` on `layout` (its KV cache sized, its iteration priced)."""
    from ceiling.model.decode import DecodeSetup, resolve_dtypes
    from ceiling.model.decode_expected import costs_for
    from ceiling.model.gemm_rows import profile_rows_rates
    from ceiling.model.serve import engine as eng

    a, dev = inp.args, inp.device
    setup = DecodeSetup(weights_dtype=inp.weights_dtype, kv_dtype=a["kv_dtype"],
                        activation_dtype=a["activations"], tp=layout.tp)  # fmt: skip
    compute = resolve_dtypes(dev, setup).compute
    # a CPU's GEMMs at their rows' measured rate (fp32 samples: in fp32 only)
    rows = profile_rows_rates(inp.resolved.measured) if compute == "fp32" else None
    costs = costs_for(dev, per_kernel_s=inp.host_op_s, weights=a["weights"], compute=compute,
                      gemm_rows_rates=rows, kernels=inp.kernels)  # fmt: skip
    return eng.Engine(inp.cfg, dev, setup, costs, layout, inp.policy, inp.draft,
                      memory_utilization=inp.utilization, host_share=inp.host_share,
                      engine=a["engine"], device_scale=a["device_scale"],
                      sequence_s=engine_sequence_s(inp))  # fmt: skip


def _predictions(inp: ServeInputs, engine, make) -> dict[str, Any]:
    """The latency–throughput curve, the SLO's highest rate and the fewest GPUs for the
    target rate, each when asked (None otherwise)."""
    from ceiling.model.serve import engine as eng

    a, the_slo = inp.args, inp.slo
    out = dict(curve=None, slo=the_slo, max_rate_per_s=None, at_max_rate=None,
               fewest_gpus=None)  # fmt: skip
    if a["curve"]:
        out["curve"] = eng.rate_curve(engine, inp.prompt, inp.output, CURVE_SHARES)
    if the_slo is not None:
        rate_max, at = eng.slo_rate(engine, inp.prompt, inp.output, the_slo)
        out["max_rate_per_s"], out["at_max_rate"] = rate_max, at
        if a["target_rate"] is not None:
            layouts = [eng.Layout(tp=t) for t in (1, 2, 4, 8) if inp.cfg.heads % t == 0]
            out["fewest_gpus"] = eng.fewest_gpus(make, layouts, inp.prompt, inp.output,
                                                 the_slo, float(a["target_rate"]))  # fmt: skip
    return out


def _measured(inp: ServeInputs, arrival):
    """The same workload sent to the server `measure` names, or None when none is."""
    a = inp.args
    if a["measure"] is None:
        return None
    from ceiling.measure.serving import measure_server

    return measure_server(a["measure"], inp.prompt, inp.output, arrival,
                          concurrency=a["concurrency"], deadlines=inp.deadlines)  # fmt: skip


def _inputs_record(inp: ServeInputs, engine, load: str) -> dict[str, Any]:
    """What was simulated, as the result's record shows it."""
    from ceiling.api.serve_inputs import default_weights

    a, layout, dev = inp.args, inp.layout, inp.device
    return {
        "layout": {
            "tp": layout.tp,
            "pp": layout.pp,
            "replicas": layout.replicas,
            "gpus": layout.gpus,
        },
        "weights": a["weights"] or default_weights(dev),
        "kv_dtype": engine.iteration.step.dtypes.kv,
        "workload": inp.described,
        "load": load,
        "rate_per_s": a["rate"],
        "concurrency": a["concurrency"],
        "ramp_up_s": a["ramp_up"],
        "num_requests": inp.n,
        "max_num_seqs": a["max_num_seqs"],
        "scheduler_steps": a["scheduler_steps"],
        "max_batched_tokens": a["max_batched_tokens"],
        "chunked_prefill": a["chunked_prefill"],
        "block_size": inp.policy.block_size,
        "prefix_hit_rate": a["prefix_hit_rate"],
        "speculative": a["speculative"],
        "spec_tokens": a["spec_tokens"],
        "acceptance": a["acceptance"],
        "reserve_kv": inp.policy.reserve_kv,
        "cuda_graphs": engine.costs.cuda_graphs,
        "engine": a["engine"],
        "host_share": inp.host_share,
        "device_scale": a["device_scale"],
        "sequence_s": engine.sequence_s,
        "sequence_ops": sequence_ops(inp),
        "iteration_s": engine.iteration_s,
        "request_s": engine.request_s,
        "device_kind": dev.kind,
        "eager_ops": None
        if inp.forward_ops is None
        else {
            "per_layer": inp.forward_ops.per_layer,
            "per_layer_views": inp.forward_ops.per_layer_views,
            "outside_layers": inp.forward_ops.outside,
            "outside_views": inp.forward_ops.outside_views,
            "host_op_s": inp.host_op_s,
        },
        "call": recorded_call(a),
    }


ITERATION_TERMS = ("weights_s", "gemm_s", "kv_s", "attention_s", "activation_s", "dequant_s",
                   "launch_s", "comm_s")  # fmt: skip


def _iteration_record(engine, mean_batch: float, prompt, output) -> dict:
    """One decode iteration's terms at the simulated mean batch and context."""
    import numpy as np

    mean_ctx = float(np.mean(prompt) + np.mean(output) / 2)
    batch = max(1, round(mean_batch))
    terms = engine.iteration.terms(batch, batch * mean_ctx)
    return {
        "batch": batch,
        "mean_context": mean_ctx,
        **{k: getattr(terms, k) for k in ITERATION_TERMS},
        "time_s": terms.time_s,
        "bound": terms.bound,
    }
