"""Figures out of a guidellm 0.8 JSON report (`guidellm run --output kind=json,path=…`).

Two readings of one report, in seconds and tokens/s:

- `headline`: guidellm's own figures (its measurement window, its definitions): output
  tokens/s of its "Server Throughput" table, TTFT mean/p50, its `inter_token_latency`
  (= (last token − first token) / (output tokens − 1), the vLLM/ceiling TPOT) and its
  `time_per_output_token` (request latency / output tokens, the first token included).
- `rescored`: guidellm's per-request records scored by ceiling's definitions
  (`ceiling.model.serve.metrics.client_figures`): the first `warmup` requests by start time
  left out, throughput = output tokens / (last end − first start) of the rest, TPOT per
  request = (E2E − TTFT) / (tokens − 1). Against ceiling's own measurement this leaves
  only what the two clients saw differently.
"""

from __future__ import annotations

import statistics

MS = 1e-3


def _benchmark(report: dict) -> dict:
    benchmarks = report.get("benchmarks") or []
    if len(benchmarks) != 1:
        raise ValueError(f"expected one benchmark in the guidellm report, found {len(benchmarks)}")
    return benchmarks[0]


def _summary(metrics: dict, name: str) -> dict:
    return metrics[name]["successful"]


def headline(report: dict) -> dict:
    """guidellm's own figures of its one benchmark."""
    metrics = _benchmark(report)["metrics"]
    ttft, itl = (
        _summary(metrics, "time_to_first_token_ms"),
        _summary(metrics, "inter_token_latency_ms"),
    )
    tpot = _summary(metrics, "time_per_output_token_ms")
    return {
        "requests": int(_summary(metrics, "request_latency")["count"]),
        "output_tokens_per_s": _summary(metrics, "output_tokens_per_second")["mean"],
        "ttft_mean_s": ttft["mean"] * MS,
        "ttft_p50_s": ttft["percentiles"]["p50"] * MS,
        "tpot_mean_s": itl["mean"] * MS,  # inter-token latency: ceiling's TPOT
        "tpot_p50_s": itl["percentiles"]["p50"] * MS,
        "guidellm_tpot_with_first_mean_s": tpot["mean"] * MS,
        "prompt_tokens_mean": _summary(metrics, "prompt_token_count")["mean"],
        "output_tokens_mean": _summary(metrics, "output_token_count")["mean"],
    }


def _records(report: dict) -> list[tuple[float, float, float, int]]:
    """(start, first token, end, output tokens) of each completed request, by start."""
    rows = []
    for r in _benchmark(report)["requests"]["successful"]:
        t = r["info"]["timings"]
        rows.append((t["request_start"], t["first_token_iteration"], t["request_end"],
                     int(r["output_tokens"])))  # fmt: skip
    return sorted(rows)


def request_window(report: dict) -> tuple[float, float]:
    """Wall-clock (epoch) times of the first request's start and the last one's end."""
    rows = _records(report)
    return rows[0][0], max(end for _, _, end, _ in rows)


def rescored(report: dict, warmup: int) -> dict:
    """guidellm's requests scored as ceiling scores its own (see the module docstring)."""
    rows = _records(report)
    if len(rows) > warmup:
        rows = rows[warmup:]
    ttft = [first - start for start, first, _, _ in rows]
    tpot = [(end - first) / (n - 1) for _, first, end, n in rows if n > 1]
    duration = max(end for _, _, end, _ in rows) - min(start for start, *_ in rows)
    return {
        "requests": len(rows),
        "output_tokens_per_s": sum(n for *_, n in rows) / duration,
        "ttft_mean_s": statistics.fmean(ttft),
        "ttft_p50_s": statistics.median(ttft),
        "tpot_mean_s": statistics.fmean(tpot),
        "tpot_p50_s": statistics.median(tpot),
    }


def ceiling_measured(result: dict) -> dict:
    """The same figures from `ceiling serve … --measure URL --json`."""
    m = result["measured"]
    return {
        "requests": m["requests"] - m["failed"] - m["unfinished"] - m["warmup"],
        "duration_s": m["duration_s"],
        "output_tokens_per_s": m["output_tokens_per_s"],
        "ttft_mean_s": m["ttft_s"]["mean"],
        "ttft_p50_s": m["ttft_s"]["p50"],
        "tpot_mean_s": m["tpot_s"]["mean"],
        "tpot_p50_s": m["tpot_s"]["p50"],
    }


def ceiling_predicted(result: dict) -> dict:
    """The simulated figures of `ceiling serve … --json` (no --measure)."""
    return {
        "output_tokens_per_s": result["output_tokens_per_s"],
        "ttft_mean_s": result["ttft_s"]["mean"],
        "ttft_p50_s": result["ttft_s"]["p50"],
        "tpot_mean_s": result["tpot_s"]["mean"],
        "tpot_p50_s": result["tpot_s"]["p50"],
    }
