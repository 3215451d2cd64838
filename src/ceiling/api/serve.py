"""Serving as a result: `ceiling.serve("llama-3-8b", spec="h100-sxm", rate=4)`.

What a deployment serves at a request load — TTFT, TPOT, E2E, throughput, KV-cache use —
from a simulation of a continuous-batching scheduler (`ceiling.model.serve`), each
iteration timed by the expected decode step's terms; with an SLO, the highest rate that
meets it and, given a target rate, the fewest GPUs over layouts and replicas; with
`measure`, the same workload sent to a running OpenAI-compatible server beside it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ceiling.api.arguments import BadArgument, checked
from ceiling.api.result import Result
from ceiling.api.serve_calibrate import recorded_call
from ceiling.errors import InvalidInput, argument

DEFAULT_REQUESTS = 1000
MAX_REQUESTS = 1_000_000
# The latest simulated time: about 32 years, where a float still resolves a microsecond.
MAX_CLOCK_S = 1e9
CURVE_SHARES = (0.1, 0.25, 0.4, 0.55, 0.7, 0.85, 1.0)
SLO_KEYS = {
    "ttft_p99": "ttft_p99_s",
    "tpot_p99": "tpot_p99_s",
    "ttft_p50": "ttft_p50_s",
    "tpot_p50": "tpot_p50_s",
    "e2e_p99": "e2e_p99_s",
}


def parse_slo(slo) -> Any:
    """`ttft_p99=2s,tpot_p99=200ms` (or a dict of those keys) as a `Slo`."""
    from ceiling.model.serve.metrics import Slo
    from ceiling.units import parse_time

    if slo is None:
        return None
    if isinstance(slo, str):
        items = {}
        for part in [p.strip() for p in slo.split(",") if p.strip()]:
            key, sep, value = part.partition("=")
            if not sep:
                raise BadArgument("slo", f"needs KEY=TIME pairs, got {part!r}")
            items[key.strip()] = value.strip()
    elif isinstance(slo, dict):
        items = dict(slo)
    else:
        raise BadArgument("slo", "must be 'ttft_p99=2s,tpot_p99=200ms' or a dict of those")
    if not items:
        raise BadArgument("slo", f"needs at least one target among {', '.join(SLO_KEYS)}")
    out = {}
    for key, value in items.items():
        if key not in SLO_KEYS:
            raise BadArgument("slo", f"has unknown target {key!r}; known: {', '.join(SLO_KEYS)}")
        seconds = parse_time(value)
        if not seconds > 0:
            raise BadArgument("slo", f"target {key} must be a time > 0, got {value!r}")
        out[SLO_KEYS[key]] = seconds
    return Slo(**out)


def read_requests(path) -> tuple[list[int], list[int], list[float] | None]:
    """A JSONL of requests: one object a line with `prompt_tokens` and `output_tokens`
    (whole numbers from 1 to MAX_TOKENS) and, optionally, `arrival_s` (a time from 0 to
    MAX_CLOCK_S, on every line or none)."""
    from ceiling.files import parse_json, read_text

    text = read_text(path, "requests file")
    prompts, outputs, arrivals = [], [], []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"requests file line {n}"
        row = parse_json(line, where)
        if not isinstance(row, dict):
            raise InvalidInput(f"{where}: expected an object, got {line[:40]!r}")
        prompts.append(_tokens(row.get("prompt_tokens"), f"{where}: prompt_tokens"))
        outputs.append(_tokens(row.get("output_tokens"), f"{where}: output_tokens"))
        if "arrival_s" in row:
            arrivals.append(_arrival(row["arrival_s"], f"{where}: arrival_s"))
    if not prompts:
        raise InvalidInput("requests file holds no requests")
    if arrivals and len(arrivals) != len(prompts):
        raise InvalidInput("requests file: give arrival_s on every line or on none")
    if len(prompts) > MAX_REQUESTS:
        raise InvalidInput(
            f"requests file holds {len(prompts):,} requests; at most {MAX_REQUESTS:,}"
        )
    return prompts, outputs, arrivals or None


def _tokens(value, what: str) -> int:
    """A request's token count: a whole number from 1 to the longest context any model has
    (a count past int64 cannot even be held in the simulation's arrays)."""
    from numbers import Integral

    from ceiling.model.serve.workload import MAX_TOKENS
    from ceiling.text import shortened

    if not isinstance(value, Integral) or isinstance(value, bool) or not 1 <= value <= MAX_TOKENS:
        raise InvalidInput(
            f"{what} must be a whole number from 1 to {MAX_TOKENS:,}, got {shortened(value)}"
        )
    return int(value)


def _arrival(value, what: str) -> float:
    """An arrival time in seconds: finite, from 0 to MAX_CLOCK_S."""
    from ceiling.text import shortened

    number = isinstance(value, int | float) and not isinstance(value, bool)
    if not (number and math.isfinite(value) and 0 <= value <= MAX_CLOCK_S):
        raise InvalidInput(
            f"{what} must be a time from 0 to {MAX_CLOCK_S:g} s, got {shortened(value)}"
        )
    return float(value)


def _profile_alias(machine_profile, profile):
    """`machine_profile`, or `profile` (its old name here; every other call says
    machine_profile) with a DeprecationWarning."""
    if profile is None:
        return machine_profile
    if machine_profile is not None:
        raise BadArgument(
            "profile", f"is the old name of {argument('machine_profile')}: give one of them"
        )
    import warnings

    warnings.warn(
        "ceiling.serve(profile=...) is renamed machine_profile=, as in every other call",
        DeprecationWarning,
        stacklevel=4,  # here, serve, its argument check, the caller
    )
    return profile


def _check_rate(rate, n: int) -> None:
    """A Poisson rate whose arrivals fit the simulated clock: at 1e-300 requests/s the
    first arrival lies past any time a float can step through, and the run never ends."""
    if not (isinstance(rate, int | float) and not isinstance(rate, bool) and 0 < rate < math.inf):
        raise BadArgument("rate", f"must be a number of requests per second > 0, got {rate!r}")
    if n / rate > MAX_CLOCK_S:
        raise BadArgument(
            "rate",
            f"must be at least {n / MAX_CLOCK_S:.3g} requests/s for {n:,} requests, got "
            f"{rate:g}: their arrivals would span {n / rate:.3g} s, past the {MAX_CLOCK_S:g} s "
            "(about 32 years) the simulated clock keeps to the microsecond",
        )


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


def parse_deadlines(deadlines):
    """`connect=10s,first_byte=2m,idle=5m,run=1h` (or a dict of those keys, any subset) as
    `Deadlines`, the rest at their defaults."""
    from ceiling.measure.http_stream import Deadlines
    from ceiling.units import parse_time

    if deadlines is None or isinstance(deadlines, Deadlines):
        return deadlines or Deadlines()
    if isinstance(deadlines, str):
        pairs = [p.strip().partition("=") for p in deadlines.split(",") if p.strip()]
        if any(not sep for _, sep, _ in pairs):
            raise BadArgument("deadlines", f"needs KEY=TIME pairs, got {deadlines!r}")
        items = {k.strip(): v.strip() for k, _, v in pairs}
    elif isinstance(deadlines, dict):
        items = dict(deadlines)
    else:
        raise BadArgument("deadlines", "must be 'connect=10s,idle=5m' or a dict of those")
    known = ("connect", "first_byte", "idle", "run")
    out = {}
    for key, value in items.items():
        if key not in known:
            raise BadArgument("deadlines", f"has unknown key {key!r}; known: {', '.join(known)}")
        seconds = parse_time(value)
        if not 0 < seconds < float("inf"):
            raise BadArgument("deadlines", f"{key} must be a time > 0, got {value!r}")
        out[f"{key}_s"] = seconds
    return Deadlines(**out)


def _short(m) -> dict:
    from ceiling.model.serve.metrics import headline_json

    return headline_json(m)


def _count(value, name: str, default: int | None = None) -> int | None:
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise BadArgument(name, f"must be a whole number ≥ 1, got {value!r}")
    if value > MAX_REQUESTS and name in ("num_requests", "offline"):
        raise BadArgument(name, f"must be at most {MAX_REQUESTS:,}, got {value:,}")
    return value


def _lengths(input_tokens, output_tokens, dataset, requests, n, seed):
    from ceiling.model.serve import workload as wl

    given = [x is not None for x in (input_tokens, dataset, requests)]
    if sum(given) > 1:
        raise InvalidInput(
            f"give one workload: {argument('input_tokens')} and {argument('output_tokens')}, "
            f"{argument('dataset')}, or {argument('requests')}"
        )
    if (input_tokens is None) != (output_tokens is None):
        raise InvalidInput(
            f"fixed lengths need both {argument('input_tokens')} and {argument('output_tokens')}"
        )
    if requests is not None:
        if isinstance(requests, str | Path):
            prompts, outputs, arrivals = read_requests(requests)
        else:
            prompts, outputs = requests
            prompts = [_tokens(v, "requests: a prompt length") for v in prompts]
            outputs = [_tokens(v, "requests: an output length") for v in outputs]
            arrivals = None
        p, o = wl.given_lengths(prompts, outputs)
        return p, o, arrivals, f"{len(p)} requests from {requests}"
    if input_tokens is not None:
        p, o = wl.fixed_lengths(n, input_tokens, output_tokens)
        return p, o, None, f"{input_tokens} in / {output_tokens} out, fixed"
    name = dataset or "sharegpt"
    p, o = wl.dataset_lengths(name, n, seed)
    return p, o, None, f"{name} lengths ({wl.DATASETS[name].source})"


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
    offline: int | None = None,
    num_requests: int | None = None,
    max_num_seqs: int = 256,
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
    sequence_s: float = 0.0,
    profile: Path | str | None = None,
) -> ServeResult:
    """Simulate serving `model` on `gpus` devices (`spec`/`machine_profile`) laid out as `tp` ×
    `pp` × `replicas`, under a load: Poisson `rate` (requests/s), closed-loop
    `concurrency`, or `offline` N requests at once (default: offline). Workload: fixed
    `input_tokens`/`output_tokens`, a named `dataset` (default "sharegpt") or `requests`
    (a JSONL file of prompt_tokens/output_tokens[/arrival_s] lines, or two length lists).
    `weights`: a dtype or a 4-bit format (int4, awq, gptq, mxfp4); default bf16, fp32 on a
    CPU. Engine: `max_num_seqs`,
    `max_batched_tokens`, `chunked_prefill`, `prefix_hit_rate`, speculative decoding
    (`speculative`: "ngram" or a draft model; `spec_tokens`, `acceptance`), `reserve_kv`
    (TensorRT-LLM's no-eviction admission; default: on with engine "trtllm"). `slo`
    ("ttft_p99=2s,tpot_p99=200ms") adds the highest rate meeting it, and with `target_rate`
    the fewest GPUs; `curve` the latency–throughput curve; `measure` a server URL to run
    the same workload against.
    `engine` ("generic", "vllm", "sglang", "trtllm"): the host time the engine adds to each
    iteration (`ceiling.model.serve.engine.HOST_SHARE`; generic: none). `memory_utilization`:
    the share of each device's memory the engine may use for weights and KV cache (vLLM's
    `gpu_memory_utilization`, SGLang's `mem_fraction_static`; default 0.9). `deadlines`
    bound a measurement ("connect=10s,first_byte=2m,idle=5m,run=1h", the defaults).
    `calibrate`: a measured run (the JSON of `serve --measure URL --json`, or its dict), or
    several at other loads: the engine's per-iteration and per-request costs and the
    device's scale (with several loads also a time a sequence) are fitted so that the runs'
    simulations give what was measured, then used here (`calibration` says the fit).
    `device_scale`: the device's time of an iteration over its priced terms (1);
    `sequence_s`: the host's time an iteration for each sequence in it (0). `profile`: the
    old name of `machine_profile`, still taken (with a DeprecationWarning)."""
    machine_profile, profile = _profile_alias(machine_profile, profile), None
    args = dict(locals())
    if calibrate is not None:
        from ceiling.api.serve_calibrate import calibrated_serve

        return calibrated_serve(calibrate, serve, {k: v for k, v in args.items()
                                                   if k != "calibrate"})  # fmt: skip
    if isinstance(device_scale, bool) or not 0 < device_scale < float("inf"):
        raise BadArgument("device_scale", f"must be a number > 0, got {device_scale!r}")
    if isinstance(sequence_s, bool) or not 0 <= sequence_s < 1:
        raise BadArgument("sequence_s", f"must be a time in [0, 1) s, got {sequence_s!r}")

    from ceiling.hardware.resolve import resolve
    from ceiling.model.decode import DecodeSetup
    from ceiling.model.decode_expected import costs_for, quant_format
    from ceiling.model.serve import engine as eng
    from ceiling.model.serve.scheduler import Policy
    from ceiling.model.transformer import parse_model

    cfg = parse_model(model)
    loads = [x is not None for x in (rate, concurrency, offline)]
    if sum(loads) > 1:
        raise InvalidInput(
            f"give one load: {argument('rate')}, {argument('concurrency')} or {argument('offline')}"
        )
    if offline is not None and num_requests is not None and offline != num_requests:
        raise InvalidInput(
            f"{argument('offline')} N is the number of requests: drop {argument('num_requests')}"
        )
    n = _count(offline, "offline") or _count(num_requests, "num_requests", DEFAULT_REQUESTS)
    _count(concurrency, "concurrency")
    if rate is not None:
        _check_rate(rate, n)
    if target_rate is not None and slo is None:
        raise BadArgument("target_rate", f"needs {argument('slo')} to meet at that rate")
    if target_rate is not None and not (isinstance(target_rate, int | float) and target_rate > 0):
        raise BadArgument("target_rate", f"must be > 0 requests per second, got {target_rate!r}")
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise BadArgument("seed", f"must be a whole number ≥ 0, got {seed!r}")
    the_slo = parse_slo(slo)
    the_deadlines = parse_deadlines(deadlines)
    if measure is not None:
        from ceiling.measure.http_stream import base_url

        base_url(measure)  # a bad address is refused before any work
    if not isinstance(engine, str) or engine not in eng.HOST_SHARE:
        raise BadArgument("engine", f"must be one of {', '.join(eng.HOST_SHARE)}, got {engine!r}")
    engine_name, host_share = engine, eng.host_share(engine)
    layout = _layout(gpus, tp, pp, replicas)
    fmt = quant_format(weights)
    resolved = resolve(spec, machine_profile)
    dev = resolved.spec
    setup = DecodeSetup(
        weights_dtype=fmt.dtype if fmt else (weights or _default_weights(dev)),
        kv_dtype=kv_dtype,
        activation_dtype=activations,
        tp=layout.tp,
    )
    policy = Policy(
        max_num_seqs=max_num_seqs,
        max_batched_tokens=max_batched_tokens,
        chunked_prefill=chunked_prefill,
        prefix_hit_rate=prefix_hit_rate,
        spec_tokens=spec_tokens,
        acceptance=acceptance,
        reserve_kv=engine == "trtllm" if reserve_kv is None else reserve_kv,
    )
    if spec_tokens and speculative is None:
        raise BadArgument(
            "spec_tokens", f"needs {argument('speculative')}: 'ngram' or a draft model"
        )
    if speculative is not None and not spec_tokens:
        raise BadArgument("speculative", f"needs {argument('spec_tokens')} ≥ 1 draft tokens a step")
    draft = None if speculative in (None, "ngram") else parse_model(speculative)
    prompt, output, arrivals, described = _lengths(
        input_tokens, output_tokens, dataset, requests, n, seed
    )
    n = len(prompt)
    if int((prompt + output).max()) > cfg.max_seq:
        raise InvalidInput(
            f"a request of {int((prompt + output).max())} tokens is longer than "
            f"{cfg.name or 'the model'}'s {cfg.max_seq} positions"
        )

    utilization = eng.GPU_MEMORY_UTILIZATION if memory_utilization is None else memory_utilization
    if isinstance(utilization, bool) or not 0 < utilization <= 1:
        raise BadArgument("memory_utilization", f"must be in (0, 1], got {memory_utilization}")

    # on a CPU each op of the eager forward pays the host's time an op the profile measured
    host_op_s = None
    if dev.kind == "cpu":
        from ceiling.model.plan.host import measured_forward_op_s

        host_op_s = measured_forward_op_s(resolved.measured)

    def make(lay):
        s = DecodeSetup(weights_dtype=setup.weights_dtype, kv_dtype=kv_dtype,
                        activation_dtype=activations, tp=lay.tp)  # fmt: skip
        from ceiling.model.decode import resolve_dtypes

        compute = resolve_dtypes(dev, s).compute
        costs = costs_for(dev, per_kernel_s=host_op_s, weights=weights, compute=compute)
        return eng.Engine(cfg, dev, s, costs, lay,
                          policy, draft, memory_utilization=utilization,
                          host_share=host_share, engine=engine_name,
                          device_scale=device_scale, sequence_s=sequence_s)  # fmt: skip

    engine = make(layout)
    arrival, load = _arrivals(arrivals, loads, rate, concurrency, n, seed)
    metrics, schedules = engine.metrics_and_schedules(prompt, output, arrival, concurrency)
    inputs = {
        "layout": {
            "tp": layout.tp,
            "pp": layout.pp,
            "replicas": layout.replicas,
            "gpus": layout.gpus,
        },
        "weights": weights or _default_weights(dev),
        "kv_dtype": engine.iteration.step.dtypes.kv,
        "workload": described,
        "load": load,
        "rate_per_s": rate,
        "concurrency": concurrency,
        "num_requests": n,
        "max_num_seqs": max_num_seqs,
        "max_batched_tokens": max_batched_tokens,
        "chunked_prefill": chunked_prefill,
        "block_size": policy.block_size,
        "prefix_hit_rate": prefix_hit_rate,
        "speculative": speculative,
        "spec_tokens": spec_tokens,
        "acceptance": acceptance,
        "reserve_kv": policy.reserve_kv,
        "cuda_graphs": engine.costs.cuda_graphs,
        "engine": engine_name,
        "host_share": host_share,
        "device_scale": device_scale,
        "sequence_s": sequence_s,
        "iteration_s": engine.iteration_s,
        "request_s": engine.request_s,
        "device_kind": dev.kind,
        "call": recorded_call(args),
    }
    iteration = _iteration_record(engine, metrics.mean_batch, prompt, output)
    result = dict(curve=None, slo=the_slo, max_rate_per_s=None, at_max_rate=None,
                  fewest_gpus=None, measured=None)  # fmt: skip
    if curve:
        result["curve"] = eng.rate_curve(engine, prompt, output, CURVE_SHARES)
    if the_slo is not None:
        rate_max, at = eng.slo_rate(engine, prompt, output, the_slo)
        result["max_rate_per_s"], result["at_max_rate"] = rate_max, at
        if target_rate is not None:
            layouts = [eng.Layout(tp=t) for t in (1, 2, 4, 8) if cfg.heads % t == 0]
            result["fewest_gpus"] = eng.fewest_gpus(make, layouts, prompt, output, the_slo,
                                                    float(target_rate))  # fmt: skip
    if measure is not None:
        from ceiling.measure.serving import measure_server

        result["measured"] = measure_server(
            measure, prompt, output, arrival, concurrency=concurrency, deadlines=the_deadlines
        )
    return ServeResult(cfg, dev, resolved.source, inputs, metrics, engine.kv_blocks, iteration,
                       **result, schedules=schedules, request_s=engine.request_s)  # fmt: skip


ITERATION_TERMS = ("weights_s", "gemm_s", "kv_s", "attention_s", "dequant_s", "launch_s", "comm_s")


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


def _arrivals(arrivals, loads, rate, concurrency, n: int, seed: int):
    """(arrival times, the load in words) of the requests."""
    import numpy as np

    from ceiling.model.serve.workload import poisson_arrivals

    if arrivals is not None and not any(loads):
        return np.asarray(arrivals, dtype=float), "arrival times from the requests file"
    if rate is not None:
        return poisson_arrivals(n, float(rate), seed), f"Poisson, {rate:g} requests/s"
    load = f"closed loop, {concurrency} concurrent" if concurrency else f"offline, {n} at once"
    return np.zeros(n), load


def _default_weights(dev) -> str:
    """bf16 on an accelerator; on a CPU fp32, the dtype a torch model is built in."""
    return "fp32" if dev.kind == "cpu" else "bf16"


def _layout(gpus, tp, pp, replicas):
    from ceiling.model.serve.engine import Layout

    for name, v in (("tp", tp), ("pp", pp)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise BadArgument(name, f"must be a whole number ≥ 1, got {v!r}")
    group = tp * pp
    if gpus is not None:
        if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 1:
            raise BadArgument("gpus", f"must be a whole number ≥ 1, got {gpus!r}")
        if gpus % group:
            raise BadArgument(
                "gpus", f"({gpus}) must be a multiple of tp × pp = {group}: {gpus} % {group} "
                f"= {gpus % group}"
            )  # fmt: skip
        if replicas is not None and replicas * group != gpus:
            raise BadArgument(
                "replicas",
                f"× {argument('tp')} × {argument('pp')} must equal {argument('gpus')} ({gpus})",
            )
        replicas = gpus // group
    if replicas is not None and (not isinstance(replicas, int) or replicas < 1):
        raise BadArgument("replicas", f"must be a whole number ≥ 1, got {replicas!r}")
    return Layout(tp=tp, pp=pp, replicas=replicas or 1)
