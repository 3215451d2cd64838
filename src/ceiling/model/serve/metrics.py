"""Serving metrics from simulated schedules, in the benchmark clients' definitions.

vLLM's `benchmark_serving` and `sglang.bench_serving`:
  TTFT = first token − arrival; E2E = last token − arrival;
  TPOT = (E2E − TTFT) / (output tokens − 1), over requests with more than one output token;
  output tokens/s and requests/s = totals / (last completion − first arrival).
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
    def of(cls, values) -> Distribution:
        v = np.asarray(values, dtype=float)
        if len(v) == 0:
            return cls(float("nan"), float("nan"), float("nan"), float("nan"))
        p50, p90, p99 = np.percentile(v, PERCENTILES)
        return cls(float(v.mean()), float(p50), float(p90), float(p99))

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
        "e2e_s": m.e2e_s.to_json(),
    }


def _bound(compute: np.ndarray, dt: np.ndarray) -> str:
    if dt.sum() <= 0:
        return "none"
    return "compute" if dt[compute].sum() > dt[~compute].sum() else "memory"


def summarize(schedules, request_s: float = 0.0) -> ServeMetrics:
    """Metrics over one or more schedules (replicas run side by side from time 0); each
    request's way in and out of the server (`request_s`) added to its TTFT and end-to-end
    latency."""

    def steady(s, values):
        return values[s.warmup :] if len(values) > s.warmup else values

    arrival = np.concatenate([steady(s, s.arrival_s) for s in schedules])
    first = np.concatenate([steady(s, s.first_token_s) for s in schedules])
    finish = np.concatenate([steady(s, s.finish_s) for s in schedules])
    output = np.concatenate([steady(s, s.output) for s in schedules])
    ttft = first - arrival + request_s
    e2e = finish - arrival + request_s
    many = output > 1
    tpot = (e2e[many] - ttft[many]) / (output[many] - 1)
    duration = float(finish.max() - arrival.min())
    dt = np.concatenate([s.iter_time_s for s in schedules])
    blocks = np.concatenate([s.iter_blocks / s.kv_blocks for s in schedules])
    batch = np.concatenate([s.iter_decodes for s in schedules])
    prefill = np.concatenate([s.iter_prefill for s in schedules]) > 0
    compute = np.concatenate([s.iter_bound for s in schedules])
    busy = float(dt.sum())
    weighted = (lambda x: float((x * dt).sum() / busy)) if busy > 0 else (lambda x: 0.0)
    return ServeMetrics(
        requests=len(output),
        output_tokens=int(output.sum()),
        duration_s=duration,
        output_tokens_per_s=float(output.sum()) / duration,
        requests_per_s=len(output) / duration,
        ttft_s=Distribution.of(ttft),
        tpot_s=Distribution.of(tpot),
        e2e_s=Distribution.of(e2e),
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
