"""Published serving measurements (reference/validation-public.md "Serving (public set)" and
the sources it names), each simulated as published: model, GPUs and layout, engine policy,
workload and load. Used by tests/test_serve_validation.py and benchmarks/serve_validation.py.

Engine policies, from each engine's documented defaults:
- TensorRT-LLM (trtllm-bench; NIM's TensorRT-LLM backend): KV blocks for the whole request
  reserved at admission (capacity scheduler GUARANTEED_NO_EVICT, the default); context
  chunks mixed with generation; the batch limits trtllm-bench tunes per run are not
  published, assumed 2048 sequences and 8192 tokens an iteration.
- SGLang 0.3.0: prefills run in iterations of their own (mixed chunks are off by default),
  `mem_fraction_static` 0.88 at TP 1 and 0.85 at TP 4 (benchmark README: 0.88 set by hand at
  TP 4 offline), radix cache off.
- vLLM (CI benchmarks, V1): chunked prefill mixed with decodes, max_num_seqs 256, 0.9 of
  the memory.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

import numpy as np

TRT = "NVIDIA/TensorRT-LLM docs/source/performance/perf-overview.md, v0.17 table (trtllm-bench)"
SGL = "sgl-project/sglang benchmark/benchmark_vllm_060/README.md (SGLang v0.3.0)"
NIM = "NVIDIA NIM LLM benchmarking docs 1.0.0, NIM 1.8.0 (AIPerf)"
VLLM = "vLLM CI performance benchmark on H200 (latency test, dummy weights)"


@dataclass(frozen=True)
class Case:
    name: str
    source: str
    model: str
    device: str
    tp: int
    weights: str
    kv: str | None
    engine: str  # "trtllm" | "sglang" | "vllm"
    workload: tuple  # ("fixed", in, out) | ("sharegpt",)
    load: tuple  # ("offline",) | ("rate", r) | ("concurrency", c)
    requests: int
    published: dict = field(default_factory=dict)  # metric -> value (s, tokens/s)
    replicas: int = 1
    memory_utilization: float = 0.9


def _trt(name, model, device, tp, i, o, tok_s, n=3000):
    return Case(name, TRT, model, device, tp, "fp8", "fp8", "trtllm", ("fixed", i, o),
                ("offline",), n, {"output_tokens_per_s": tok_s})  # fmt: skip


CASES = [
    _trt("TRT-LLM Llama-3.1-8B H100 128/2048", "llama-3-8b", "h100-sxm", 1, 128, 2048, 21109),
    _trt("TRT-LLM Llama-3.1-8B H200 128/2048", "llama-3-8b", "h200-sxm", 1, 128, 2048, 25399),
    _trt("TRT-LLM Llama-3.1-70B 8xH200 TP8", "llama-3-70b", "h200-sxm", 8, 1000, 1000, 13181),
    _trt("TRT-LLM Llama-3.1-70B 8xH100 TP8", "llama-3-70b", "h100-sxm", 8, 1000, 1000, 11451),
    _trt("TRT-LLM Mixtral-8x7B 2xH100 TP2", "mixtral-8x7b", "h100-sxm", 2, 1000, 1000, 15771),
    _trt("TRT-LLM Mixtral-8x7B 2xH200 TP2", "mixtral-8x7b", "h200-sxm", 2, 1000, 1000, 19151),
    Case("SGLang Llama-3.1-8B A100 ShareGPT 4 req/s", SGL, "llama-3-8b", "a100-80gb", 1, "bf16",
         None, "sglang", ("sharegpt",), ("rate", 4.0), 1200,
         {"ttft_p50_s": 0.03198, "tpot_p50_s": 0.01317, "e2e_p50_s": 1.56417},
         memory_utilization=0.88),
    Case("SGLang Llama-3.1-8B A100 ShareGPT 8 req/s", SGL, "llama-3-8b", "a100-80gb", 1, "bf16",
         None, "sglang", ("sharegpt",), ("rate", 8.0), 2400,
         {"ttft_p50_s": 0.03568, "tpot_p50_s": 0.01785, "e2e_p50_s": 2.17502},
         memory_utilization=0.88),
    Case("SGLang Llama-3.1-70B 4xH100 ShareGPT 4 req/s", SGL, "llama-3-70b", "h100-sxm", 4,
         "bf16", None, "sglang", ("sharegpt",), ("rate", 4.0), 1200,
         {"ttft_p50_s": 0.05394, "tpot_p50_s": 0.02503, "e2e_p50_s": 3.00524},
         memory_utilization=0.85),
    Case("SGLang Llama-3.1-70B 4xH100 ShareGPT 8 req/s", SGL, "llama-3-70b", "h100-sxm", 4,
         "bf16", None, "sglang", ("sharegpt",), ("rate", 8.0), 2400,
         {"ttft_p50_s": 0.05811, "tpot_p50_s": 0.03307, "e2e_p50_s": 4.06498},
         memory_utilization=0.85),
    Case("SGLang Llama-3.1-8B A100 ShareGPT offline", SGL, "llama-3-8b", "a100-80gb", 1, "bf16",
         None, "sglang", ("sharegpt",), ("offline",), 5000,
         {"output_tokens_per_s": 4281.51}, memory_utilization=0.88),
    Case("SGLang Llama-3.1-70B 4xH100 ShareGPT offline", SGL, "llama-3-70b", "h100-sxm", 4,
         "bf16", None, "sglang", ("sharegpt",), ("offline",), 5000,
         {"output_tokens_per_s": 3856.01}, memory_utilization=0.88),
    Case("NIM Llama-3.3-70B FP8 2xH100 5000/500 c50", NIM, "llama-3-70b", "h100-sxm", 2, "fp8",
         "fp8", "trtllm", ("fixed", 5000, 500), ("concurrency", 50), 200,
         {"ttft_mean_s": 0.8345, "tpot_mean_s": 0.05973, "output_tokens_per_s": 814.4}),
    Case("NIM Llama-3.3-70B FP8 2xH100 5000/500 c1", NIM, "llama-3-70b", "h100-sxm", 2, "fp8",
         "fp8", "trtllm", ("fixed", 5000, 500), ("concurrency", 1), 4,
         {"ttft_mean_s": 0.4068, "tpot_mean_s": 0.01858}),
    Case("vLLM Llama-3-70B 4xH200 TP4 32/128 batch 8", VLLM, "llama-3-70b", "h200-sxm", 4,
         "bf16", None, "vllm", ("fixed", 32, 128), ("offline",), 8,
         {"e2e_mean_s": 2.0775}),
]  # fmt: skip

THROUGHPUT = ("output_tokens_per_s",)


def policy_for(case: Case):
    from ceiling.model.serve.scheduler import Policy

    if case.engine == "trtllm":
        return Policy(max_num_seqs=2048, max_batched_tokens=8192, reserve_kv=True)
    if case.engine == "sglang":
        # chunked prefill size 8192, prefills not mixed with decodes
        return Policy(max_num_seqs=4096, max_batched_tokens=8192, chunked_prefill=False)
    return Policy()


def simulate_case(case: Case):
    """(ServeMetrics) of a case simulated as published."""
    from ceiling.hardware.resolve import resolve_device
    from ceiling.model.decode import DecodeSetup, resolve_dtypes
    from ceiling.model.decode_expected import costs_for
    from ceiling.model.serve.engine import HOST_SHARE, Engine, Layout
    from ceiling.model.serve.workload import dataset_lengths, fixed_lengths, poisson_arrivals
    from ceiling.model.transformer import get_model

    spec = resolve_device(case.device, None)
    cfg = get_model(case.model)
    if case.workload[0] == "fixed":
        _, i, o = case.workload
        # models whose catalog entry holds fewer positions than the run's (Llama 3.1: 128k)
        cfg = cfg.replace(max_seq=max(cfg.max_seq, i + o))
        prompt, output = fixed_lengths(case.requests, i, o)
    else:
        prompt, output = dataset_lengths("sharegpt", case.requests)
    setup = DecodeSetup(weights_dtype=case.weights, kv_dtype=case.kv, tp=case.tp)
    compute = resolve_dtypes(spec, setup).compute
    engine = Engine(cfg, spec, setup, costs_for(spec, weights=case.weights, compute=compute),
                    Layout(tp=case.tp, replicas=case.replicas), policy_for(case),
                    memory_utilization=case.memory_utilization,
                    host_share=HOST_SHARE[case.engine])  # fmt: skip
    concurrency = None
    if case.load[0] == "rate":
        arrival = poisson_arrivals(case.requests, case.load[1])
    else:
        arrival = np.zeros(case.requests)
        if case.load[0] == "concurrency":
            concurrency = case.load[1]
    return engine.metrics(prompt, output, arrival, concurrency)


def predicted(metrics, key: str) -> float:
    name, _, stat = key.removesuffix("_s").rpartition("_")
    if key == "output_tokens_per_s":
        return metrics.output_tokens_per_s
    return getattr(getattr(metrics, f"{name}_s"), stat)


def rows():
    """(case, metric, predicted, published, error) for every published figure."""
    out = []
    for case in CASES:
        m = simulate_case(case)
        for key, value in case.published.items():
            p = predicted(m, key)
            out.append((case, key, p, value, p / value - 1))
    return out


def medians(table) -> dict[str, float]:
    thr = [abs(e) for _, k, _, _, e in table if k in THROUGHPUT]
    lat = [abs(e) for _, k, _, _, e in table if k not in THROUGHPUT]
    return {"throughput": statistics.median(thr), "latency": statistics.median(lat)}
