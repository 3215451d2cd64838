"""Reading a guidellm 0.8 JSON report (benchmarks/guidellm_report.py) from a trimmed real one."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "tests" / "data" / "guidellm_report_sample.json"


def _module():
    spec = importlib.util.spec_from_file_location(
        "guidellm_report", ROOT / "benchmarks" / "guidellm_report.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gr = _module()


@pytest.fixture
def report() -> dict:
    return json.loads(SAMPLE.read_text())


def test_headline_is_guidellm_own_figures_in_seconds(report):
    m = report["benchmarks"][0]["metrics"]
    h = gr.headline(report)
    assert h["requests"] == m["request_latency"]["successful"]["count"] == 13
    ttft = m["time_to_first_token_ms"]["successful"]
    assert h["ttft_mean_s"] == pytest.approx(ttft["mean"] / 1e3)
    assert h["ttft_p50_s"] == pytest.approx(ttft["percentiles"]["p50"] / 1e3)
    # ceiling's TPOT is guidellm's inter-token latency, not its time_per_output_token
    itl = m["inter_token_latency_ms"]["successful"]
    assert h["tpot_mean_s"] == pytest.approx(itl["mean"] / 1e3)
    assert h["tpot_p50_s"] == pytest.approx(itl["percentiles"]["p50"] / 1e3)
    with_first = m["time_per_output_token_ms"]["successful"]["mean"] / 1e3
    assert h["guidellm_tpot_with_first_mean_s"] == pytest.approx(with_first)
    assert with_first > h["tpot_mean_s"]
    assert h["output_tokens_per_s"] == m["output_tokens_per_second"]["successful"]["mean"]
    assert (h["prompt_tokens_mean"], h["output_tokens_mean"]) == (64.0, 32.0)


def test_rescored_leaves_out_the_first_requests_by_start(report):
    by_start = sorted(
        report["benchmarks"][0]["requests"]["successful"],
        key=lambda r: r["info"]["timings"]["request_start"],
    )
    kept = [
        (r["info"]["timings"]["request_start"], r["info"]["timings"]["first_token_iteration"],
         r["info"]["timings"]["request_end"], r["output_tokens"])
        for r in by_start[2:]
    ]  # fmt: skip
    ttft = sorted(first - start for start, first, _, _ in kept)
    tpot = [(end - first) / 31 for _, first, end, _ in kept]
    got = gr.rescored(report, warmup=2)
    assert got["requests"] == 3
    assert got["output_tokens_per_s"] == pytest.approx(3 * 32 / (kept[-1][2] - kept[0][0]))
    assert got["ttft_p50_s"] == pytest.approx(ttft[1])
    assert got["ttft_mean_s"] == pytest.approx(sum(ttft) / 3)
    assert got["tpot_mean_s"] == pytest.approx(sum(tpot) / 3)
    # each request's TPOT agrees with the inter-token latency guidellm recorded for it
    itl = [r["inter_token_latency_ms"] for r in by_start[2:]]
    assert [t * 1e3 for t in tpot] == pytest.approx(itl, rel=0.02)


def test_rescored_keeps_every_request_when_no_more_than_the_warmup(report):
    assert gr.rescored(report, warmup=5)["requests"] == 5
    assert gr.rescored(report, warmup=0)["requests"] == 5


def test_a_report_of_several_benchmarks_is_refused(report):
    report["benchmarks"].append(report["benchmarks"][0])
    with pytest.raises(ValueError, match=r"expected one benchmark.*found 2"):
        gr.headline(report)
