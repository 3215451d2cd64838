"""Measure a running OpenAI-compatible server (vLLM, SGLang, TGI, llama.cpp) with a workload.

Each request goes to `POST /v1/completions` with `"stream": true`, a prompt of about its
prompt length (one short word per token), `max_tokens` its output length and `ignore_eos`
(vLLM's and SGLang's way to make a server produce every token asked for). The client reads
the server-sent events as they come: the first event that carries text is the first token;
the rest are the following tokens. Times come from the monotonic clock, in the benchmark
clients' definitions (`ceiling.model.serve.metrics`).

Requests are sent at their arrival times (seconds after the start), or by `concurrency`
workers each sending its next request when the last one ends (closed loop). The client is
the standard library's `http.client`.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import urlsplit

from ceiling.errors import InvalidInput, WorkerFailed

MAX_CONNECTIONS = 256
TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Measured:
    url: str
    model: str
    requests: int
    failed: int
    output_tokens: int
    duration_s: float
    ttft_s: object  # Distribution
    tpot_s: object
    e2e_s: object

    @property
    def output_tokens_per_s(self) -> float:
        return self.output_tokens / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def requests_per_s(self) -> float:
        return (self.requests - self.failed) / self.duration_s if self.duration_s > 0 else 0.0

    def to_json(self) -> dict:
        from ceiling.model.serve.metrics import headline_json

        return {
            "url": self.url,
            "model": self.model,
            "requests": self.requests,
            "failed": self.failed,
            "output_tokens": self.output_tokens,
            "duration_s": self.duration_s,
            **headline_json(self),
        }


def _endpoint(url: str):
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidInput(f"measure needs an http:// or https:// server address, got {url!r}")
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    base = parts.path.rstrip("/")
    base = base.removesuffix("/v1/completions").removesuffix("/v1")
    return kind, parts.hostname, parts.port, base


def _served_model(kind, host, port, base) -> str | None:
    """The first model `GET /v1/models` lists, or None when the server does not say."""
    try:
        conn = kind(host, port, timeout=10)
        conn.request("GET", f"{base}/v1/models")
        resp = conn.getresponse()
        body = resp.read()
        conn.close()
        if resp.status != 200:
            return None
        data = json.loads(body)
        return str(data["data"][0]["id"])
    except (OSError, ValueError, KeyError, IndexError, TypeError, http.client.HTTPException):
        return None


def _one(kind, host, port, base, model, prompt_tokens, output_tokens):
    """(start, first token, end, tokens) of one streamed completion; None on failure."""
    body = json.dumps({
        "model": model,
        "prompt": " ".join(["hi"] * int(prompt_tokens)),
        "max_tokens": int(output_tokens),
        "min_tokens": int(output_tokens),
        "ignore_eos": True,
        "stream": True,
        "temperature": 0.0,
    })  # fmt: skip
    start = time.perf_counter()
    first = None
    tokens = 0
    try:
        conn = kind(host, port, timeout=TIMEOUT_S)
        conn.request("POST", f"{base}/v1/completions", body=body,
                     headers={"Content-Type": "application/json"})  # fmt: skip
        resp = conn.getresponse()
        if resp.status != 200:
            resp.read()
            conn.close()
            return None
        while True:
            line = resp.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                break
            try:
                event = json.loads(payload)
                text = event["choices"][0].get("text") or ""
            except (ValueError, KeyError, IndexError, TypeError, AttributeError):
                continue
            if text:
                now = time.perf_counter()
                if first is None:
                    first = now
                tokens += 1
        conn.close()
    except (OSError, http.client.HTTPException):
        return None
    if first is None:
        return None
    return start, first, time.perf_counter(), tokens


def measure_server(url, prompt, output, arrival_s, concurrency=None, model=None) -> Measured:
    """Send the workload to the server at `url`; see the module's docstring."""
    import numpy as np

    from ceiling.model.serve.metrics import Distribution

    kind, host, port, base = _endpoint(url)
    name = model or _served_model(kind, host, port, base)
    if name is None:
        raise WorkerFailed(f"no OpenAI-compatible server answers at {url} (GET /v1/models)")
    n = len(prompt)
    results: list = [None] * n
    t0 = time.perf_counter()

    def run(i):
        results[i] = _one(kind, host, port, base, name, prompt[i], output[i])

    if concurrency:
        lock = threading.Lock()
        queue = iter(range(n))

        def worker():
            while True:
                with lock:
                    i = next(queue, None)
                if i is None:
                    return
                run(i)

        threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    else:
        with ThreadPoolExecutor(max_workers=min(n, MAX_CONNECTIONS)) as pool:
            for i in np.argsort(arrival_s, kind="stable"):
                wait = t0 + float(arrival_s[i]) - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
                pool.submit(run, int(i))
    done = [r for r in results if r is not None]
    if not done:
        raise WorkerFailed(f"the server at {url} completed none of the {n} requests")
    start = np.array([r[0] for r in done])
    first = np.array([r[1] for r in done])
    end = np.array([r[2] for r in done])
    tokens = np.array([r[3] for r in done])
    many = tokens > 1
    return Measured(
        url=url,
        model=name,
        requests=n,
        failed=n - len(done),
        output_tokens=int(tokens.sum()),
        duration_s=float(end.max() - t0),
        ttft_s=Distribution.of(first - start),
        tpot_s=Distribution.of((end[many] - first[many]) / (tokens[many] - 1)),
        e2e_s=Distribution.of(end - start),
    )
