"""Serving workloads: request lengths and arrival times.

A workload is a list of requests, each with a prompt length, an output length and an
arrival time (s); closed-loop load gives arrivals as completions happen (the scheduler's
`concurrency`) after its streams' first requests (at once or over a ramp-up), offline load
gives every request at time 0.

Length sources:
- fixed lengths (`fixed`): every request alike, as TensorRT-LLM's `trtllm-bench` synthetic
  sets with zero spread;
- a named distribution (`DATASETS`): log-normal lengths with a published mean, clipped as
  the benchmark clients clip them;
- given lengths (`given`): from a JSONL file parsed above this layer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ceiling.errors import InvalidInput


@dataclass(frozen=True)
class Dataset:
    """A named length distribution: log-normal prompt and output lengths with these means,
    clipped to [min_tokens, max_prompt] and prompt + output ≤ max_total."""

    name: str
    mean_prompt: float
    mean_output: float
    sigma: float
    min_tokens: int
    max_prompt: int
    max_total: int
    source: str
    # the vocabulary of the tokenizer its lengths were counted with
    counted_with_vocab: int = 128_256


# Characters of English text a token holds, by tokenizer vocabulary: Llama 2's 32k
# SentencePiece tokenizer and Llama 3's 128k one (100k from tiktoken and 28k more), "3.17 to
# 3.94 characters per token" on a sample of English data (Dubey et al. 2024, The Llama 3
# Herd of Models, §3.2). A benchmark that samples a dataset's text counts its lengths with
# the served model's tokenizer, so the same requests are more tokens for a smaller vocabulary.
CHARS_PER_TOKEN = {32_000: 3.17, 128_256: 3.94}


def chars_per_token(vocab: int) -> float:
    """Characters a token of a `vocab`-token tokenizer holds: the published tokenizer nearest
    in vocabulary size (on a log scale), an assumption for the others."""
    nearest = min(CHARS_PER_TOKEN, key=lambda v: abs(np.log(vocab / v)))
    return CHARS_PER_TOKEN[nearest]


def tokens_scale(d: Dataset, vocab: int | None) -> float:
    """The model's tokens for one of dataset `d`'s tokens (1 when the vocabulary is unknown)."""
    if not vocab:
        return 1.0
    return chars_per_token(d.counted_with_vocab) / chars_per_token(vocab)


DATASETS = {
    "sharegpt": Dataset(
        name="sharegpt",
        # Output: SGLang benchmark/benchmark_vllm_060/README.md, offline ShareGPT run of
        # 5,000 prompts: 4,281.51 output tokens/s at 22.03 requests/s = 194.4 tokens a
        # request. Its online row (4 requests/s) has a median E2E of 1,564 ms at a median
        # TPOT of 13.17 ms after a 32 ms TTFT: a median output near 118 tokens, so
        # median/mean ≈ 0.6 = exp(−σ²/2) of a log-normal, σ ≈ 1.
        # Prompt: assumption, ≈ 220 tokens (the first human turn of a conversation, under
        # the 1,024-token cap); the README does not give it.
        mean_prompt=220.0,
        mean_output=194.4,
        sigma=1.0,
        # vLLM benchmark_serving / sglang.bench_serving filter: ≥ 4 tokens each, prompt
        # ≤ 1024, prompt + output ≤ 2048
        min_tokens=4,
        max_prompt=1024,
        max_total=2048,
        source="ShareGPT_V3_unfiltered_cleaned_split as sampled by sglang.bench_serving: "
        "output mean 194 tokens and spread σ ≈ 1 from the SGLang v0.3.0 benchmark README; "
        "prompt mean 220 tokens assumed",
        # the README's runs served Llama 3.1 8B and 70B Instruct: Llama 3's tokenizer
        counted_with_vocab=128_256,
    ),
}


@dataclass(frozen=True)
class Workload:
    """Requests as arrays: prompt and output tokens, arrival times (s; NaN for closed loop)."""

    prompt: np.ndarray
    output: np.ndarray
    arrival_s: np.ndarray
    description: str

    def __len__(self) -> int:
        return len(self.prompt)


MAX_TOKENS = 1 << 30  # longer than any model's context: refused before arrays are made


def _check_count(n: int, what: str = "number of requests") -> int:
    if not isinstance(n, int | np.integer) or isinstance(n, bool) or n < 1:
        raise InvalidInput(f"{what} must be a whole number ≥ 1, got {n!r}")
    return int(n)


def fixed_lengths(n: int, prompt: int, output: int) -> tuple[np.ndarray, np.ndarray]:
    n = _check_count(n)
    for value, what in ((prompt, "input tokens"), (output, "output tokens")):
        if not isinstance(value, int | np.integer) or isinstance(value, bool) or value < 1:
            raise InvalidInput(f"{what} must be a whole number ≥ 1, got {value!r}")
        if value > MAX_TOKENS:
            raise InvalidInput(f"{what} must be at most {MAX_TOKENS:,}, got {value:,}")
    return np.full(n, int(prompt), dtype=np.int64), np.full(n, int(output), dtype=np.int64)


def _clipped_lognormal(rng, mean: float, sigma: float, n: int, lo: int, hi: int) -> np.ndarray:
    """Log-normal draws clipped to [lo, hi] whose clipped mean is `mean`: the log-scale
    location is found by bisection on the same standard normal draws."""
    z = rng.standard_normal(n)

    def clipped(mu: float) -> np.ndarray:
        return np.clip(np.rint(np.exp(mu + sigma * z)), lo, hi)

    a, b = np.log(lo) - 5 * sigma, np.log(hi) + 5 * sigma
    for _ in range(60):
        mid = 0.5 * (a + b)
        if clipped(mid).mean() < mean:
            a = mid
        else:
            b = mid
    return clipped(0.5 * (a + b)).astype(np.int64)


def dataset_lengths(name: str, n: int, seed: int = 0,
                    vocab: int | None = None) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """`n` prompt and output lengths from a named distribution (`DATASETS`), in the tokens of
    a model with a `vocab`-token tokenizer (`tokens_scale`; as counted when None); the
    clients' caps apply to the model's tokens."""
    n = _check_count(n)
    d = DATASETS.get(str(name).lower())
    if d is None:
        raise InvalidInput(f"unknown dataset {name!r}; known: {', '.join(DATASETS)}")
    scale = tokens_scale(d, vocab)
    rng = np.random.default_rng(seed)
    prompt = _clipped_lognormal(rng, d.mean_prompt * scale, d.sigma, n, d.min_tokens,
                                d.max_prompt)  # fmt: skip
    room = d.max_total - prompt
    output = _clipped_lognormal(rng, d.mean_output * scale, d.sigma, n, d.min_tokens,
                                d.max_total)  # fmt: skip
    return prompt, np.minimum(output, np.maximum(room, d.min_tokens))


def given_lengths(prompts, outputs) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(prompts, dtype=np.int64)
    o = np.asarray(outputs, dtype=np.int64)
    if p.ndim != 1 or p.shape != o.shape or len(p) == 0:
        raise InvalidInput("requests need one prompt and one output length each, at least one")
    if (p < 1).any() or (o < 1).any():
        raise InvalidInput("every request needs ≥ 1 prompt token and ≥ 1 output token")
    return p, o


def poisson_arrivals(n: int, rate_per_s: float, seed: int = 0) -> np.ndarray:
    """Arrival times of a Poisson process: exponential gaps of mean 1/rate."""
    if not (isinstance(rate_per_s, int | float) and np.isfinite(rate_per_s) and rate_per_s > 0):
        raise InvalidInput(f"request rate must be a number > 0 per second, got {rate_per_s!r}")
    rng = np.random.default_rng(seed + 1)
    return np.cumsum(rng.exponential(1.0 / rate_per_s, n))


def ramp_starts(streams: int, ramp_up_s: float = 0.0) -> np.ndarray:
    """When each of a closed loop's `streams` sends its first request: all at 0, or spread
    evenly over `ramp_up_s`, stream k at k·S/C (guidellm's concurrent `rampup_duration`)."""
    if not (isinstance(ramp_up_s, int | float) and np.isfinite(ramp_up_s) and ramp_up_s >= 0):
        raise InvalidInput(f"ramp-up must be a time ≥ 0 s, got {ramp_up_s!r}")
    return float(ramp_up_s) * np.arange(streams) / max(streams, 1)


def workload(prompt, output, *, rate_per_s=None, description="") -> Workload:
    """Requests of these lengths arriving as a Poisson process at `rate_per_s`, or all at
    time 0 (offline) when no rate is given."""
    n = len(prompt)
    arrival = np.zeros(n) if rate_per_s is None else poisson_arrivals(n, rate_per_s)
    return Workload(prompt, output, arrival, description)
