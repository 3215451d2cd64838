"""`ceiling.serve`'s arguments checked and turned into what a simulation takes: the load, the
request lengths and arrivals, the device and its dtypes, the scheduling policy, the layout.

Every check runs before any work and in a fixed order, so that a call with several mistakes
is refused for the same one every time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ceiling.api.arguments import BadArgument
from ceiling.errors import InvalidInput, argument

DEFAULT_REQUESTS = 1000
MAX_REQUESTS = 1_000_000
# The latest simulated time: about 32 years, where a float still resolves a microsecond.
MAX_CLOCK_S = 1e9
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


def profile_alias(machine_profile, profile):
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


def _count(value, name: str, default: int | None = None) -> int | None:
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise BadArgument(name, f"must be a whole number ≥ 1, got {value!r}")
    if value > MAX_REQUESTS and name in ("num_requests", "offline"):
        raise BadArgument(name, f"must be at most {MAX_REQUESTS:,}, got {value:,}")
    return value


def _lengths(input_tokens, output_tokens, dataset, requests, n, seed, vocab=None):
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
    name = str(dataset or "sharegpt").lower()
    p, o = wl.dataset_lengths(name, n, seed, vocab)
    d = wl.DATASETS[name]
    scale = wl.tokens_scale(d, vocab)
    retokenised = (
        f"; ×{scale:.2f} the tokens in this model's {vocab:,}-token vocabulary "
        f"({wl.chars_per_token(vocab):.2f} characters a token on English text, "
        f"{wl.chars_per_token(d.counted_with_vocab):.2f} as counted)"
        if abs(scale - 1.0) > 1e-9
        else ""
    )
    return p, o, None, f"{name} lengths ({d.source}{retokenised})"


def load_arrivals(arrivals, loads, rate, concurrency, n: int, seed: int, ramp_up_s: float = 0.0):
    """(arrival times, the load in words) of the requests. A closed loop's C streams start at
    once, or with a ramp-up S stream k at k·S/C (guidellm's `rampup_duration`); its later
    requests' times are set by the loop."""
    import numpy as np

    from ceiling.model.serve.workload import poisson_arrivals, ramp_starts

    if arrivals is not None and not any(loads):
        return np.asarray(arrivals, dtype=float), "arrival times from the requests file"
    if rate is not None:
        return poisson_arrivals(n, float(rate), seed), f"Poisson, {rate:g} requests/s"
    if not concurrency:
        return np.zeros(n), f"offline, {n} at once"
    arrival = np.zeros(n)
    starts = ramp_starts(min(concurrency, n), ramp_up_s)
    arrival[: len(starts)] = starts
    ramp = f", started over {ramp_up_s:g} s" if ramp_up_s else ""
    return arrival, f"closed loop, {concurrency} concurrent{ramp}"


def default_weights(dev) -> str:
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


@dataclass(frozen=True)
class ServeInputs:
    """A `serve` call's arguments (`args`, as given) checked, with what they resolve to."""

    args: dict[str, Any]
    cfg: Any  # the model's `TransformerConfig`
    loads: list[bool]  # which of rate, concurrency, offline was given
    slo: Any  # `model.serve.metrics.Slo` or None
    deadlines: Any  # `measure.http_stream.Deadlines`
    host_share: float
    layout: Any  # `model.serve.engine.Layout`
    resolved: Any  # the device, from `hardware.resolve`
    weights_dtype: str
    policy: Any  # `model.serve.scheduler.Policy`
    draft: Any  # the draft model's config, or None
    prompt: Any
    output: Any
    arrivals: list[float] | None  # from a requests file
    described: str  # the workload in words
    utilization: float
    host_op_s: float | None  # on a CPU, the host's time an op of the eager forward
    # on a CPU, the eager decode step's ops counted from the model's own forward
    # (`profile.forward_ops.ForwardOps`) and their op-equivalents per layer and outside (a
    # view at its measured share of an op); None: the fused engine's kernel count
    forward_ops: Any = None
    kernels: tuple[float, float] | None = None

    @property
    def n(self) -> int:
        return len(self.prompt)

    @property
    def device(self):
        return self.resolved.spec


def checked_inputs(a: dict[str, Any]) -> ServeInputs:
    """`serve`'s arguments `a` (every parameter by name) checked, in a fixed order, and
    resolved."""
    from ceiling.model.transformer import parse_model

    _check_costs(a["device_scale"], a["sequence_s"])
    cfg = parse_model(a["model"])
    if a["weights"] is None:  # as published: the model's own quantization_config
        a = {**a, "weights": cfg.stored_weights}
    n, loads = _checked_load(a)
    a = {**a, "ramp_up": _ramp_up_s(a["ramp_up"], a["concurrency"])}
    the_slo, the_deadlines = _checked_targets(a)
    host_share = _checked_engine(a["engine"])
    layout = _layout(a["gpus"], a["tp"], a["pp"], a["replicas"])
    resolved, weights_dtype = _device(a, layout)
    policy = _policy(a)
    draft = _draft(a["speculative"], a["spec_tokens"])
    prompt, output, arrivals, described = _lengths(
        a["input_tokens"], a["output_tokens"], a["dataset"], a["requests"], n, a["seed"], cfg.vocab
    )
    _check_context(cfg, prompt, output)
    return ServeInputs(
        args=a,
        cfg=cfg,
        loads=loads,
        slo=the_slo,
        deadlines=the_deadlines,
        host_share=host_share,
        layout=layout,
        resolved=resolved,
        weights_dtype=weights_dtype,
        policy=policy,
        draft=draft,
        prompt=prompt,
        output=output,
        arrivals=arrivals,
        described=described,
        utilization=_utilization(a["memory_utilization"]),
        host_op_s=_host_op_s(resolved),
        **_eager_ops(a["model"], resolved),
    )


def _check_costs(device_scale, sequence_s) -> None:
    if isinstance(device_scale, bool) or not 0 < device_scale < float("inf"):
        raise BadArgument("device_scale", f"must be a number > 0, got {device_scale!r}")
    if sequence_s is not None and (isinstance(sequence_s, bool) or not 0 <= sequence_s < 1):
        raise BadArgument("sequence_s", f"must be a time in [0, 1) s, got {sequence_s!r}")


def _checked_load(a: dict[str, Any]) -> tuple[int, list[bool]]:
    """(the number of requests, which load was given): one load at most, counts ≥ 1, a rate
    whose arrivals fit the clock."""
    rate, concurrency, offline, num_requests = (
        a["rate"], a["concurrency"], a["offline"], a["num_requests"]
    )  # fmt: skip
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
    return n, loads


def _ramp_up_s(ramp_up, concurrency) -> float:
    """A closed loop's ramp-up in seconds ("2s", "500ms" or a number of seconds; 0: none)."""
    from ceiling.units import parse_time

    if ramp_up is None:
        return 0.0
    bad = f"must be a time ≥ 0 such as 2s or 500ms, got {ramp_up!r}"
    if isinstance(ramp_up, bool) or not isinstance(ramp_up, str | int | float):
        raise BadArgument("ramp_up", bad)
    try:
        seconds = parse_time(ramp_up)
    except InvalidInput:
        raise BadArgument("ramp_up", bad) from None
    if not 0 <= seconds <= MAX_CLOCK_S:
        raise BadArgument("ramp_up", bad if seconds < 0 or seconds != seconds else
                          f"must be at most {MAX_CLOCK_S:g} s, got {ramp_up!r}")  # fmt: skip
    if seconds and concurrency is None:
        raise BadArgument("ramp_up", "spreads a closed loop's first requests: give "
                          f"{argument('concurrency')} too")  # fmt: skip
    return seconds


def _checked_targets(a: dict[str, Any]):
    """(the SLO, the measurement's deadlines): the target rate, the seed and the address of
    a server to measure checked too."""
    slo, target_rate, seed = a["slo"], a["target_rate"], a["seed"]
    if target_rate is not None and slo is None:
        raise BadArgument("target_rate", f"needs {argument('slo')} to meet at that rate")
    if target_rate is not None and not (isinstance(target_rate, int | float) and target_rate > 0):
        raise BadArgument("target_rate", f"must be > 0 requests per second, got {target_rate!r}")
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise BadArgument("seed", f"must be a whole number ≥ 0, got {seed!r}")
    the_slo = parse_slo(slo)
    the_deadlines = parse_deadlines(a["deadlines"])
    if a["measure"] is not None:
        from ceiling.measure.http_stream import base_url

        base_url(a["measure"])  # a bad address is refused before any work
    return the_slo, the_deadlines


def _checked_engine(engine) -> float:
    """The host's share of an iteration for the engine named."""
    from ceiling.model.serve import engine as eng

    if not isinstance(engine, str) or engine not in eng.HOST_SHARE:
        raise BadArgument("engine", f"must be one of {', '.join(eng.HOST_SHARE)}, got {engine!r}")
    return eng.host_share(engine)


def _device(a: dict[str, Any], layout):
    """(the resolved device, the weights' dtype), the dtypes checked against it."""
    from ceiling.hardware.resolve import resolve
    from ceiling.model.decode import DecodeSetup
    from ceiling.model.decode_expected import quant_format

    weights = a["weights"]
    fmt = quant_format(weights)
    resolved = resolve(a["spec"], a["machine_profile"])
    setup = DecodeSetup(
        weights_dtype=fmt.dtype if fmt else (weights or default_weights(resolved.spec)),
        kv_dtype=a["kv_dtype"],
        activation_dtype=a["activations"],
        tp=layout.tp,
    )
    return resolved, setup.weights_dtype


def _policy(a: dict[str, Any]):
    """The scheduling `Policy`; TensorRT-LLM reserves each request's KV cache by default."""
    from ceiling.model.serve.scheduler import Policy

    reserve_kv = a["reserve_kv"]
    steps = a["scheduler_steps"]
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise BadArgument("scheduler_steps", f"must be a whole number ≥ 1, got {steps!r}")
    if steps > 1:
        if a["engine"] in ("sglang", "trtllm"):
            raise BadArgument("scheduler_steps", f"is vLLM's multi-step scheduling (0.5-0.6); "
                              f"engine {a['engine']!r} has none")  # fmt: skip
        if a["spec_tokens"]:
            raise BadArgument("scheduler_steps", "cannot be combined with speculative decoding "
                              "(vLLM refuses multi-step scheduling with it)")  # fmt: skip
    return Policy(
        max_num_seqs=a["max_num_seqs"],
        max_batched_tokens=a["max_batched_tokens"],
        scheduler_steps=a["scheduler_steps"],
        chunked_prefill=a["chunked_prefill"],
        prefix_hit_rate=a["prefix_hit_rate"],
        spec_tokens=a["spec_tokens"],
        acceptance=a["acceptance"],
        reserve_kv=a["engine"] == "trtllm" if reserve_kv is None else reserve_kv,
    )


def _draft(speculative, spec_tokens):
    """The draft model's config (None for n-gram speculation or none)."""
    from ceiling.model.transformer import parse_model

    if spec_tokens and speculative is None:
        raise BadArgument(
            "spec_tokens", f"needs {argument('speculative')}: 'ngram' or a draft model"
        )
    if speculative is not None and not spec_tokens:
        raise BadArgument("speculative", f"needs {argument('spec_tokens')} ≥ 1 draft tokens a step")
    return None if speculative in (None, "ngram") else parse_model(speculative)


def _check_context(cfg, prompt, output) -> None:
    if int((prompt + output).max()) > cfg.max_seq:
        raise InvalidInput(
            f"a request of {int((prompt + output).max())} tokens is longer than "
            f"{cfg.name or 'the model'}'s {cfg.max_seq} positions"
        )


def _utilization(memory_utilization) -> float:
    from ceiling.model.serve import engine as eng

    utilization = eng.GPU_MEMORY_UTILIZATION if memory_utilization is None else memory_utilization
    if isinstance(utilization, bool) or not 0 < utilization <= 1:
        raise BadArgument("memory_utilization", f"must be in (0, 1], got {memory_utilization}")
    return utilization


def _eager_ops(model, resolved) -> dict[str, Any]:
    """On a CPU, a Hugging Face model's eager decode step counted from its own forward
    (`profile.forward_ops`): the ops that pay the host's time an op, views at their measured
    share; elsewhere, or when it cannot be counted, nothing (the fused engine's count)."""
    if resolved.spec.kind != "cpu" or not str(model).startswith("hf:"):
        return {}
    from ceiling.files import read_json
    from ceiling.hf_files import locate_config
    from ceiling.model.plan.host import VIEW_SHARE, measured_view_share
    from ceiling.profile.forward_ops import count_decode_ops

    ops = count_decode_ops(read_json(locate_config(str(model)[3:]), "Hugging Face config.json"))
    if ops is None:
        return {}
    share = measured_view_share(resolved.measured)
    share = VIEW_SHARE if share is None else share
    return {"forward_ops": ops, "kernels": ops.op_equivalents(share)}


def sequence_ops(inp: ServeInputs) -> dict[str, float] | None:
    """{ops, op_s, op_measured}: the engine's host time a sequence an iteration as `ops` of the
    host's time an eager op (`op_s`: the profile's, else `plan.host.HOST_S_PER_KERNEL`), for
    an engine priced so (`engine.SEQUENCE_OPS`) and no time a sequence given; else None."""
    from ceiling.model.plan.host import HOST_S_PER_KERNEL, measured_forward_op_s
    from ceiling.model.serve.engine import SEQUENCE_OPS

    a = inp.args
    if a["sequence_s"] is not None or a["engine"] not in SEQUENCE_OPS:
        return None
    op_s = measured_forward_op_s(inp.resolved.measured)
    return {"ops": SEQUENCE_OPS[a["engine"]], "op_s": op_s or HOST_S_PER_KERNEL,
            "op_measured": op_s is not None}  # fmt: skip


def engine_sequence_s(inp: ServeInputs) -> float | None:
    """The host's time an iteration for each sequence in it: as given, else the engine's
    (`sequence_ops`), else None (the shipped `engine.SEQUENCE_S`)."""
    ops = sequence_ops(inp)
    return inp.args["sequence_s"] if ops is None else ops["ops"] * ops["op_s"]


def _host_op_s(resolved) -> float | None:
    """On a CPU, each op of the eager forward pays the host's time an op the profile
    measured; elsewhere None."""
    if resolved.spec.kind != "cpu":
        return None
    from ceiling.model.plan.host import measured_forward_op_s

    return measured_forward_op_s(resolved.measured)
