"""Serving metrics from simulated schedules, in the benchmark clients' definitions.

vLLM's `benchmark_serving` (`vllm bench serve`) and `sglang.bench_serving`:
  TTFT = first token − arrival; E2E = last token − arrival;
  TPOT = (E2E − TTFT) / (output tokens − 1), over requests with more than one output token;
  ITL = each gap between two successive streamed chunks of a request, pooled over requests
  (a simulated iteration emits one chunk a decoding sequence, so its ITL is the iteration
  times weighted by the sequences decoding in them);
  output tokens/s and requests/s = totals / (last completion − first arrival).
guidellm calls the same per-request (E2E − TTFT) / (tokens − 1) its "inter-token latency".
A closed loop is measured in its steady state: the C requests sent together at the start
(a burst no later request sees) are a warm-up, left out when more requests follow them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PERCENTILES = (50, 90, 99)


@dataclass(frozen=True)
class Distribution:
    mean: float
    p50: float
    p90: float
    p99: float

    @classmethod
    def of(cls, values, weights=None) -> Distribution:
        """Mean and percentiles of `values`, each counted `weights` times when given."""
        v = np.asarray(values, dtype=float)
        w = np.ones_like(v) if weights is None else np.asarray(weights, dtype=float)
        keep = w > 0
        v, w = v[keep], w[keep]
        if len(v) == 0:
            return cls(float("nan"), float("nan"), float("nan"), float("nan"))
        if weights is None:
            p50, p90, p99 = np.percentile(v, PERCENTILES)
        else:
            p50, p90, p99 = np.percentile(v, PERCENTILES, weights=w, method="inverted_cdf")
        return cls(float(np.average(v, weights=w)), float(p50), float(p90), float(p99))

    def to_json(self) -> dict:
        return {"mean": self.mean, "p50": self.p50, "p90": self.p90, "p99": self.p99}


@dataclass(frozen=True)
class ServeMetrics:
    requests: int
    output_tokens: int
    duration_s: float
    output_tokens_per_s: float
    requests_per_s: float
    ttft_s: Distribution
    tpot_s: Distribution
    e2e_s: Distribution
    itl_s: Distribution
    kv_use_mean: float  # share of KV blocks held, time-weighted
    kv_use_peak: float
    preemptions: int
    mean_batch: float  # sequences per iteration, time-weighted
    prefill_share: float  # share of time in iterations that prefill
    prefill_bound: str  # the bound of prefill-carrying iterations, by time
    decode_bound: str  # the bound of decode-only iterations, by time

    def to_json(self) -> dict:
        return {
            "requests": self.requests,
            "output_tokens": self.output_tokens,
            "duration_s": self.duration_s,
            **headline_json(self),
            "kv_use_mean": self.kv_use_mean,
            "kv_use_peak": self.kv_use_peak,
            "preemptions": self.preemptions,
            "mean_batch": self.mean_batch,
            "prefill_time_share": self.prefill_share,
            "bound": {"prefill": self.prefill_bound, "decode": self.decode_bound},
        }


def headline_json(m) -> dict:
    """Throughput and the three latency distributions of simulated or measured serving."""
    return {
        "output_tokens_per_s": m.output_tokens_per_s,
        "requests_per_s": m.requests_per_s,
        "ttft_s": m.ttft_s.to_json(),
        "tpot_s": m.tpot_s.to_json(),
        "itl_s": m.itl_s.to_json(),
        "e2e_s": m.e2e_s.to_json(),
    }


def _bound(compute: np.ndarray, dt: np.ndarray) -> str:
    if dt.sum() <= 0:
        return "none"
    return "compute" if dt[compute].sum() > dt[~compute].sum() else "memory"


def client_figures(arrival, first, finish, output, warmup: int = 0, request_s: float = 0.0):
    """What a benchmark client reports of requests (arrays in one order, seconds): their
    count, output tokens, duration, and TTFT/TPOT/E2E distributions, the first `warmup`
    left out when more follow; `request_s` (a request's way in and out of the server) is
    added to each TTFT and E2E. One function for simulated and measured serving."""
    if len(arrival) > warmup:
        arrival, first, finish, output = (x[warmup:] for x in (arrival, first, finish, output))
    ttft = first - arrival + request_s
    e2e = finish - arrival + request_s
    many = output > 1
    duration = float(finish.max() - arrival.min())
    return {
        "requests": len(output),
        "output_tokens": int(output.sum()),
        "duration_s": duration,
        "ttft_s": Distribution.of(ttft),
        "tpot_s": Distribution.of((e2e[many] - ttft[many]) / (output[many] - 1)),
        "e2e_s": Distribution.of(e2e),
    }


def started_together(starts, window_s: float) -> float | None:
    """The share of requests sent within `window_s` of another (one iteration: their
    prompts reach the same prefill), or None for fewer than two requests. A closed loop
    whose streams started at once and whose requests are alike stays in step: near 1."""
    s = np.sort(np.asarray(starts, dtype=float))
    if len(s) < 2 or not window_s > 0:
        return None
    gaps = np.diff(s)
    nearest = np.minimum(np.r_[np.inf, gaps], np.r_[gaps, np.inf])
    return float(np.mean(nearest <= window_s))


def summarize(schedules, request_s: float = 0.0) -> ServeMetrics:
    """Metrics over one or more schedules (replicas run side by side from time 0); each
    request's way in and out of the server (`request_s`) added to its TTFT and end-to-end
    latency."""

    def steady(s, values):
        return values[s.warmup :] if len(values) > s.warmup else values

    keys = ("arrival_s", "first_token_s", "finish_s", "output")
    fig = client_figures(
        *(np.concatenate([steady(s, getattr(s, k)) for s in schedules]) for k in keys),
        request_s=request_s,
    )
    duration, output_tokens = fig["duration_s"], fig["output_tokens"]
    dt = np.concatenate([s.iter_time_s for s in schedules])
    blocks = np.concatenate([s.iter_blocks / s.kv_blocks for s in schedules])
    batch = np.concatenate([s.iter_decodes for s in schedules])
    prefill = np.concatenate([s.iter_prefill for s in schedules]) > 0
    compute = np.concatenate([s.iter_bound for s in schedules])
    busy = float(dt.sum())
    weighted = (lambda x: float((x * dt).sum() / busy)) if busy > 0 else (lambda x: 0.0)
    return ServeMetrics(
        requests=fig["requests"],
        output_tokens=output_tokens,
        duration_s=duration,
        output_tokens_per_s=output_tokens / duration,
        requests_per_s=fig["requests"] / duration,
        ttft_s=fig["ttft_s"],
        tpot_s=fig["tpot_s"],
        e2e_s=fig["e2e_s"],
        itl_s=Distribution.of(dt, batch),
        kv_use_mean=weighted(blocks),
        kv_use_peak=float(blocks.max()) if len(blocks) else 0.0,
        preemptions=sum(s.preemptions for s in schedules),
        mean_batch=weighted(batch),
        prefill_share=float(dt[prefill].sum() / busy) if busy > 0 else 0.0,
        prefill_bound=_bound(compute[prefill], dt[prefill]),
        decode_bound=_bound(compute[~prefill], dt[~prefill]),
    )


@dataclass(frozen=True)
class Slo:
    """Latency targets (seconds); None: no target on that figure."""

    ttft_p99_s: float | None = None
    tpot_p99_s: float | None = None
    ttft_p50_s: float | None = None
    tpot_p50_s: float | None = None
    e2e_p99_s: float | None = None

    def met(self, m: ServeMetrics) -> bool:
        pairs = (
            (self.ttft_p99_s, m.ttft_s.p99),
            (self.tpot_p99_s, m.tpot_s.p99),
            (self.ttft_p50_s, m.ttft_s.p50),
            (self.tpot_p50_s, m.tpot_s.p50),
            (self.e2e_p99_s, m.e2e_s.p99),
        )
        return all(limit is None or value <= limit for limit, value in pairs)

    def to_json(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if v is not None}


def max_rate(run, slo: Slo, capacity_per_s: float, steps: int = 10):
    """Highest request rate whose metrics meet `slo`, by bisection between 0 and the
    offline capacity (above it queues grow without bound). `run(rate)` gives ServeMetrics.
    Returns (rate, metrics at it), or (0.0, metrics at the lowest rate tried) when even a
    trickle misses the target."""
    lo, hi = 0.0, capacity_per_s
    best = None
    at_hi = run(hi)
    if slo.met(at_hi):
        return hi, at_hi
    low = capacity_per_s / 2**steps
    at_low = run(low)
    if not slo.met(at_low):
        return 0.0, at_low
    lo, best = low, at_low
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        m = run(mid)
        if slo.met(m):
            lo, best = mid, m
        else:
            hi = mid
    return lo, best
