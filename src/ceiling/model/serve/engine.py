"""A deployment: model, device, layout (tensor × pipeline parallel, replicas), engine policy.

Its KV cache holds what the memory leaves: vLLM's `gpu_memory_utilization` share of each
device (0.9 by default) less the weights and the activations of a full token budget, in
blocks of `block_size` tokens; TensorRT-LLM's `kv_cache_free_gpu_mem_fraction` (also 0.9)
is a share of the memory the weights and activations leave (its executor API docs, "KV
cache": the fraction of free GPU memory after the engine is loaded). Pipeline parallelism
over p stages keeps p batches in flight (vLLM's virtual engines): it is run as p engines,
each iteration passing through all stages (the whole model's time on its tensor-parallel
group, plus p − 1 activation sends), each with its share of the KV cache. Replicas split
the requests round robin.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ceiling.errors import DoesNotFit, InvalidInput
from ceiling.model.collectives import p2p_s
from ceiling.model.decode import DecodeSetup
from ceiling.model.decode_expected import EngineCosts
from ceiling.model.serve.iteration import Iteration
from ceiling.model.serve.metrics import ServeMetrics, Slo, max_rate, summarize
from ceiling.model.serve.scheduler import Policy, Schedule, simulate

GPU_MEMORY_UTILIZATION = 0.9  # vLLM's default share of device memory it may use

# The host's share of an iteration in an engine whose Python scheduler waits for the GPU
# (schedules, samples, detokenises and builds the next batch between iterations): the GPU
# idles for it. SGLang v0.4 overlapped this work with the GPU ("zero-overhead batch
# scheduler", lmsys.org blog, 2024-12-04) and measured 1.1× the throughput of v0.3, so the
# host added 0.1 of the GPU's time per iteration (the prior; in use, its refit over every
# published run: 0.10-0.14 for SGLang as the other constants move, 0.12). vLLM V1 without
# async scheduling (its default until async scheduling was added) runs the same loop.
# TensorRT-LLM adds none beyond the fixed time an iteration: its C++ executor waits for the
# iteration, then takes new requests, schedules and launches the next in C++ (its execution
# loop's forwardSync, then forwardAsync); the PyTorch executor of 1.0 prepares the next batch
# while the GPU runs (its overlap scheduler).
# `transformers serve` runs its model's eager forward and waits for it: no share beyond it.
HOST_SHARE = {"sglang": 0.12, "vllm": 0.10, "trtllm": 0.0, "generic": 0.0, "transformers": 0.0}


# What every iteration and every request cost beyond the GPU's work, whatever the engine: the
# host's fixed work between two iterations that no overlap hides (sampling, detokenising and
# streaming the new tokens, the scheduler's bookkeeping), and a request's way in and out of
# the server (HTTP, tokenising the prompt, admission to the next iteration, the first
# streamed chunk). One front-end cost for every engine: each server measured tokenises and
# detokenises in Python, TensorRT-LLM's too (Triton's TensorRT-LLM ensemble runs its
# preprocessing and postprocessing models in Triton's Python backend; NIM and trtllm-serve
# are Python servers). Declared fitted constants (`model.fitted`), set to what the refit rule
# (`model.accuracy.refit`) gives over every published run, and refit without each source when
# it is scored (`ceiling validate` prints both; a test holds them together). The refit of the
# iteration's time has no fixed point: a median of a few sources' votes, it gives ≈1.75 ms
# with 1.1 ms in use and ≈1.1 ms with 1.3 ms in use; 1.3 ms is used. A request: 12.2 ms.
ITERATION_S = 0.0013
REQUEST_S = 0.0122
# The host's time an iteration for each sequence that samples a token in it: the scheduler's
# and the sampler's per-request bookkeeping (stop checks, KV block accounting, detokenising
# and queueing its new token), which grows with the batch. A declared fitted constant, set
# as the ones above (its refit: 2.2 µs).
SEQUENCE_S = 2.2e-6


# An engine whose own Python handles each sequence every iteration, counted in the host's time
# an op of an eager forward (the machine profile's `host_costs.forward_s`), since both are the
# host's interpreter and dispatch speed. `transformers serve --continuous-batching`: its
# continuous-batching manager schedules, builds the inputs of and updates each request in
# Python, hands each new token to the server's event loop, which detokenises it and streams
# its chunk, under one interpreter lock with the thread running the forward. 110 ops: fitted
# with `serve --calibrate` (`benchmarks/serve_calibrate_local.py`, transformers 5.25, a
# 4-layer Llama on a 2-core EPYC guest, 4 requests/s): 1.94-2.32 ms a sequence in four runs,
# against 19.2 µs an op; scored at 2 and 6 requests/s and on closed loops of 2 and 4
# (`benchmarks/serve_measure_vs_guidellm.py`). The server ran its forward on every core; pinned
# to one core (one thread, nothing else contending with its Python) it added about a third of
# that a sequence, and its TPOT grows less than linearly with the batch. Other engines:
# `SEQUENCE_S`.
SEQUENCE_OPS = {"transformers": 110}


def sequence_s() -> float:
    from ceiling.model import fitted

    return fitted.value("serve.sequence_s", SEQUENCE_S)


def iteration_s() -> float:
    from ceiling.model import fitted

    return fitted.value("serve.iteration_s", ITERATION_S)


def request_s() -> float:
    """A request's way in and out of the server, the same for every engine (`REQUEST_S`)."""
    from ceiling.model import fitted

    return fitted.value("serve.request_s", REQUEST_S)


def host_share(engine: str) -> float:
    """The engine's host share (HOST_SHARE); those chosen from published runs are declared
    fitted constants (`model.fitted`)."""
    from ceiling.model import fitted

    name = f"serve.host_share.{engine}"
    return fitted.value(name, HOST_SHARE[engine]) if name in fitted.DECLARED else HOST_SHARE[engine]


@dataclass(frozen=True)
class Layout:
    tp: int = 1
    pp: int = 1
    replicas: int = 1

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "replicas"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise InvalidInput(f"{name} must be a whole number ≥ 1, got {v!r}")

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.replicas


@dataclass
class Engine:
    cfg: object
    spec: object
    setup: DecodeSetup  # weights and KV dtypes, tp
    costs: EngineCosts
    layout: Layout = field(default_factory=Layout)
    policy: Policy = field(default_factory=Policy)
    draft: object | None = None  # a draft model's config, or None (n-gram or no speculation)
    memory_utilization: float = GPU_MEMORY_UTILIZATION
    host_share: float = 0.0  # the host's time per iteration, a share of the GPU's (HOST_SHARE)
    engine: str = "generic"  # its name (a key of HOST_SHARE)
    # the device's time of an iteration over its terms' (1: as priced; fitted by
    # `serve --calibrate` from a measured run on this device)
    device_scale: float = 1.0
    # the host's time an iteration for each sequence that samples a token in it (sampling,
    # detokenising, streaming its chunk): None for the shipped `SEQUENCE_S`; fitted by
    # `serve --calibrate`
    sequence_s: float | None = None

    def __post_init__(self) -> None:
        self.iteration_s, self.request_s = iteration_s(), request_s()
        if self.sequence_s is None:
            self.sequence_s = sequence_s()
        if not (isinstance(self.host_share, int | float) and 0 <= self.host_share < 10):
            raise InvalidInput(f"engine host share must be in [0, 10), got {self.host_share!r}")
        self.iteration = Iteration(self.cfg, self.spec, self.setup, self.costs)
        self.draft_iteration = (
            Iteration(
                self.draft,
                self.spec,
                DecodeSetup(
                    weights_dtype=self.setup.weights_dtype,
                    kv_dtype=self.setup.kv_dtype,
                    tp=self.setup.tp,
                ),
                self.costs,
            )
            if self.draft is not None and self.policy.spec_tokens
            else None
        )
        step = self.iteration.step
        pp = self.layout.pp
        if self.cfg.layers % pp:
            raise InvalidInput(
                f"pipeline stages {pp} must divide the {self.cfg.layers} layers: "
                f"{self.cfg.layers} % {pp} = {self.cfg.layers % pp}"
            )
        self.act_bytes = step.act_bytes
        if pp > 1:
            from ceiling.model.cluster import group_link

            self.pp_link = group_link(self.spec, 2, step.dtypes.compute)
        self.kv_blocks = self._kv_blocks()

    def _kv_blocks(self) -> int:
        """KV blocks each of the p in-flight engines of a replica holds."""
        step, cfg, pp = self.iteration.step, self.cfg, self.layout.pp
        if step.mem is None:
            raise InvalidInput(f"{self.spec.name} lists no memory size: the KV cache is unknown")
        tp = self.setup.tp
        resident = step.resident_weight_bytes
        if step.dtypes.weights == "int4":
            resident += (resident / 0.5) * self.costs.scale_bytes / self.costs.group_size
        # Assumption: the peak activations of a full token budget — the residual stream in
        # and out, the query/key/value projections and the FFN's gate and up outputs.
        per_token = 4 * cfg.hidden + (cfg.q_dim + 2 * cfg.kv_dim + 2 * cfg.ffn_hidden) / tp
        activations = self.policy.max_batched_tokens * per_token * self.act_bytes
        if self.engine == "trtllm":
            # TensorRT-LLM: kv_cache_free_gpu_mem_fraction of the memory left once the
            # engine (weights and activation buffers) is loaded
            room = (step.mem - resident / pp - activations) * self.memory_utilization
        else:  # vLLM's gpu_memory_utilization, SGLang's mem_fraction_static: of the whole
            room = step.mem * self.memory_utilization - resident / pp - activations
        if room <= 0:
            raise DoesNotFit(
                f"{cfg.name or 'the model'} leaves no room for a KV cache on {self.spec.name} "
                f"(tp={tp}, pp={pp}): {resident / pp / 1e9:.1f} GB of weights and "
                f"{activations / 1e9:.1f} GB of activations for a full iteration of "
                f"{self.policy.max_batched_tokens:,} tokens (max_batched_tokens) per device of "
                f"{step.mem * self.memory_utilization / 1e9:.1f} GB usable"
            )
        # each device holds its 1/p of the layers' KV for all p engines' sequences
        tokens = room / (step.kv_tok_dev / pp) / pp
        return int(tokens // self.policy.block_size)

    def time_fn(self, n_dec, dec_ctx, pf_tok, pf_pairs, pf_cached, sampled, q):
        t, bound = self.iteration.time_and_bound(n_dec, dec_ctx, int(pf_tok), pf_pairs, pf_cached,
                                                 sampled, q)  # fmt: skip
        if self.layout.pp > 1:
            tokens = n_dec * q + pf_tok
            t += (self.layout.pp - 1) * p2p_s(tokens * self.cfg.hidden * self.act_bytes,
                                              *self.pp_link)  # fmt: skip
        if self.draft_iteration is not None and n_dec:
            # k draft steps of the small model over the decoding sequences
            t += self.policy.spec_tokens * self.draft_iteration.time(n_dec, dec_ctx)
        # multi-step scheduling: a decode step of a block pays the scheduler's share (the
        # Python scheduling the GPU waits for) once a block. The fixed host time an
        # iteration stays every step: vLLM 0.6's published multi-step TPOTs are not shorter
        # by it (the SGLang benchmark's vLLM rows come out 4-18 % short even so).
        block = self.policy.scheduler_steps if not pf_tok else 1
        host = self.iteration_s + self.sequence_s * sampled
        return t * self.device_scale * (1.0 + self.host_share / block) + host, bound

    @property
    def engines(self) -> int:
        """Independent schedulers: replicas × pipeline stages (batches in flight)."""
        return self.layout.replicas * self.layout.pp

    def run(self, prompt, output, arrival_s, concurrency: int | None = None) -> list[Schedule]:
        """Simulate the requests split round robin over the engines (a closed loop of fewer
        streams than engines: over as many engines as streams, each with one)."""
        e = self.engines if concurrency is None else min(self.engines, concurrency)
        out = []
        for i in range(min(e, len(prompt))):
            part = slice(i, None, e)
            conc = None
            if concurrency is not None:
                conc = concurrency // e + (1 if i < concurrency % e else 0)
            out.append(simulate(prompt[part], output[part], arrival_s[part], self.time_fn,
                                self.kv_blocks, self.policy, conc))  # fmt: skip
        return out

    def metrics(self, prompt, output, arrival_s, concurrency=None) -> ServeMetrics:
        return self.metrics_and_schedules(prompt, output, arrival_s, concurrency)[0]

    def metrics_and_schedules(self, prompt, output, arrival_s, concurrency=None):
        """(metrics, the schedules they came from)."""
        schedules = self.run(prompt, output, arrival_s, concurrency)
        return summarize(schedules, self.request_s), schedules


def with_iteration_time_added(schedules, extra_s: float, per_sequence_s: float = 0.0) -> list:
    """The schedules with `extra_s` more in every iteration, and `per_sequence_s` more for
    each sequence decoding in it, their decisions kept (first order in the added time: a
    longer iteration would also change what later iterations hold). A request is delayed by
    what the iterations from its arrival to each of its times added; in a closed loop its
    arrival itself moves with the iterations before it (it is sent when an earlier request
    finishes)."""
    import dataclasses

    out = []
    for s in schedules:
        starts = s.iter_start_s
        added = extra_s + per_sequence_s * s.iter_decodes
        before_it = np.concatenate(([0.0], np.cumsum(added)))  # added before iteration i

        def delay(times, starts=starts, before_it=before_it):
            return before_it[np.searchsorted(starts, times, side="left")]

        before = delay(s.arrival_s)
        # a closed loop moves as a whole: a request sent when another finishes moves with
        # it, and a ramp-up's start with the iterations before it (first order)
        arrival = s.arrival_s + before if s.warmup else s.arrival_s
        shift = arrival - s.arrival_s - before  # so each time moves by its own iterations
        out.append(
            dataclasses.replace(
                s,
                arrival_s=arrival,
                first_token_s=s.first_token_s + delay(s.first_token_s) + shift,
                finish_s=s.finish_s + delay(s.finish_s) + shift,
                iter_start_s=starts + before_it[:-1],
                iter_time_s=s.iter_time_s + added,
            )
        )
    return out


def poisson(n: int, rate: float, seed: int = 0) -> np.ndarray:
    from ceiling.model.serve.workload import poisson_arrivals

    return poisson_arrivals(n, rate, seed)


def capacity_per_s(engine: Engine, prompt, output) -> float:
    """Requests/s the deployment completes with every request queued at once."""
    return engine.metrics(prompt, output, np.zeros(len(prompt))).requests_per_s


def rate_curve(engine: Engine, prompt, output, fractions=(0.1, 0.25, 0.4, 0.55, 0.7, 0.85, 1.0)):
    """(rate, metrics) at shares of the offline capacity: the latency–throughput curve."""
    cap = capacity_per_s(engine, prompt, output)
    return [(f * cap, engine.metrics(prompt, output, poisson(len(prompt), f * cap)))
            for f in fractions]  # fmt: skip


def slo_rate(engine: Engine, prompt, output, slo: Slo):
    """Highest Poisson rate meeting `slo` on this deployment, and the metrics there."""
    cap = capacity_per_s(engine, prompt, output)
    return max_rate(lambda r: engine.metrics(prompt, output, poisson(len(prompt), r)), slo, cap)


def fewest_gpus(make_engine, layouts, prompt, output, slo: Slo, target_rate: float):
    """Over tensor-parallel layouts of one replica, the one that meets `target_rate`
    requests/s within `slo` with the fewest GPUs: replicas = ⌈target / its max rate⌉.
    `make_engine(layout)` builds an Engine or raises DoesNotFit/InvalidInput (skipped).
    Returns a list of dicts, best first."""
    rows = []
    for layout in layouts:
        try:
            eng = make_engine(layout)
        except (DoesNotFit, InvalidInput):
            continue
        rate, _ = slo_rate(eng, prompt, output, slo)
        if rate <= 0:
            rows.append({"tp": layout.tp, "pp": layout.pp, "max_rate_per_s": 0.0,
                         "replicas": None, "gpus": None})  # fmt: skip
            continue
        replicas = math.ceil(target_rate / rate - 1e-9)
        rows.append({"tp": layout.tp, "pp": layout.pp, "max_rate_per_s": rate,
                     "replicas": replicas, "gpus": replicas * layout.tp * layout.pp})  # fmt: skip
    return sorted(rows, key=lambda r: (r["gpus"] is None, r["gpus"] or 0, -r["max_rate_per_s"]))
