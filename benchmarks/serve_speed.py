"""How long the serving simulation takes for 10,000 requests (the target: under 2 s).

    PYTHONPATH=src python benchmarks/serve_speed.py

Three loads of Llama-3-8B on one H100 with ShareGPT lengths: offline (every request at
once), a Poisson rate near capacity, and a light one (small batches: the most iterations
per request). Wall-clock figures of this machine; no test asserts them.
"""

from __future__ import annotations

import time

import numpy as np

from ceiling.hardware.resolve import resolve_device
from ceiling.model.decode import DecodeSetup
from ceiling.model.decode_expected import costs_for
from ceiling.model.serve.engine import Engine
from ceiling.model.serve.workload import dataset_lengths, poisson_arrivals
from ceiling.model.transformer import get_model

N = 10_000


def main() -> None:
    spec = resolve_device("h100-sxm", None)
    engine = Engine(get_model("llama-3-8b"), spec, DecodeSetup(), costs_for(spec))
    prompt, output = dataset_lengths("sharegpt", N)
    for label, arrival in (
        ("offline", np.zeros(N)),
        ("Poisson 40 requests/s", poisson_arrivals(N, 40.0)),
        ("Poisson 4 requests/s", poisson_arrivals(N, 4.0)),
    ):
        start = time.perf_counter()
        m = engine.metrics(prompt, output, arrival)
        took = time.perf_counter() - start
        print(f"{label:24} {N:,} requests in {took:5.2f} s  ({m.output_tokens_per_s:,.0f} "
              f"output tokens/s simulated, mean batch {m.mean_batch:.0f})")  # fmt: skip


if __name__ == "__main__":
    main()
