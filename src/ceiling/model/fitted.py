"""The constants ceiling chose from published runs, each declared with the runs it came from.

A constant chosen to make some published figures come out right proves nothing on those
figures. Each one is declared here with the validation sources it was chosen from
(`sources`: corpus source ids, `ceiling validate` lists them), the range it may take and the
value it would have without any data (`prior`). `ceiling validate` scores a source with every
constant that came from it refit on the other sources' runs (leave-one-source-out), so a
figure is never scored by a constant chosen from it.

Model code reads such a constant through `value(name, default)`; `overridden({...})` sets
some for the duration of a `with` block (the refit's trial values), in this thread only.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass

from ceiling.errors import InvalidInput


@dataclass(frozen=True)
class Fitted:
    """A constant chosen from published runs."""

    name: str
    kind: str  # the predictions it enters: training | decode | serving (several: "decode,serving")
    sources: tuple[str, ...]  # validation corpus source families it was chosen from
    low: float
    high: float
    prior: float  # its value with no published run to go by
    why: str
    device: str | None = None  # enters only predictions on this catalog device
    engines: tuple[str, ...] = ()  # enters only serving predictions of these engines

    def enters(self, kind: str, device: str | None, engine: str | None = None) -> bool:
        """Whether the constant enters a prediction of `kind` on `device` (serving: by
        `engine`). Its first kind is the one it is refit on."""
        return (
            kind in self.kind.split(",")
            and (self.device is None or self.device == device)
            and (not self.engines or engine in self.engines)
        )


# the serving sources with online (served over HTTP) latency figures
SERVING_ONLINE = (
    "trtllm-perf-overview",
    "sglang-benchmark-vllm-060",
    "nim-benchmarking-llm-1.0.0",
    "lmdeploy-a100-fp16",
    "vllm-ci-perf-benchmark",
    "vllm-blog-serving-amd-mi300x-2024-10",
)

# name -> declaration. The value itself lives where the model uses it (one home each).
DECLARED = {
    f.name: f
    for f in (
        Fitted(
            "decode.bandwidth_share",
            "decode,serving",
            ("gpt-fast",),
            0.5,
            1.0,
            1.0,
            "the share of the datasheet HBM bandwidth a weight-streaming decode reaches "
            "(`model.decode_expected.BANDWIDTH_SHARE`): its refit over every published run, "
            "near gpt-fast's A100 at ≈1.7 of 2.039 TB/s",
        ),
        Fitted(
            "serve.iteration_s",
            "serving",
            SERVING_ONLINE,
            0.0,
            0.02,
            0.0,
            "the host's fixed time per serving iteration that no overlap hides "
            "(`model.serve.engine.ITERATION_S`)",
        ),
        Fitted(
            "serve.sequence_s",
            "serving",
            SERVING_ONLINE,
            0.0,
            1e-4,
            0.0,
            "the host's time an iteration for each sequence in the batch (scheduler and "
            "sampler bookkeeping, detokenising; `model.serve.engine.SEQUENCE_S`)",
        ),
        Fitted(
            "serve.request_s",
            "serving",
            SERVING_ONLINE,
            0.0,
            0.2,
            0.0,
            "a request's way in and out of a server, added to its TTFT "
            "(`model.serve.engine.REQUEST_S`)",
        ),
        Fitted(
            "serve.host_share.sglang",
            "serving",
            ("sglang-benchmark-vllm-060",),
            0.0,
            0.5,
            0.1,
            "the host's time per iteration over the GPU's in SGLang's Python scheduler "
            "(`model.serve.engine.HOST_SHARE`; the prior, 0.1, from SGLang v0.4's 1.1× the "
            "throughput of v0.3 once the scheduler overlapped the GPU, lmsys.org 2024-12-04)",
            engines=("sglang",),
        ),
        Fitted(
            "serve.host_share.vllm",
            "serving",
            ("sglang-benchmark-vllm-060",),
            0.0,
            0.5,
            0.1,
            "the host's time per iteration over the GPU's in vLLM's Python scheduler "
            "(`model.serve.engine.HOST_SHARE`), taken as SGLang's (the same prior)",
            engines=("vllm",),
        ),
        Fitted(
            "plan.matmul_efficiency.a100-80gb",
            "training",
            ("megatron-lm-papers",),
            0.4,
            0.95,
            0.86,
            "the share of the dense peak training GEMMs reach on an A100 (clusters.toml; "
            "the prior is the maximum achievable matmul FLOP/s, 270 of 312)",
            device="a100-80gb",
        ),
        Fitted(
            "plan.matmul_efficiency.h100-sxm",
            "training",
            ("dgxc-benchmarking",),
            0.4,
            0.95,
            0.80,
            "the share of the dense peak training GEMMs reach on an H100 SXM (clusters.toml; "
            "the prior is the maximum achievable matmul FLOP/s, 794 of 989)",
            device="h100-sxm",
        ),
    )
}

_OVERRIDES: contextvars.ContextVar[dict[str, float] | None] = contextvars.ContextVar(
    "ceiling_fitted_overrides", default=None
)


def value(name: str, default: float) -> float:
    """The constant `name`: its override inside `overridden`, else `default` (its home's)."""
    if name not in DECLARED:
        raise InvalidInput(f"{name!r} is not a declared fitted constant")
    return (_OVERRIDES.get() or {}).get(name, default)


@contextlib.contextmanager
def overridden(values: dict[str, float]) -> Iterator[None]:
    """Within the block, the declared constants in `values` take those values."""
    unknown = sorted(set(values) - set(DECLARED))
    if unknown:
        raise InvalidInput(f"not declared fitted constants: {', '.join(unknown)}")
    token = _OVERRIDES.set({**(_OVERRIDES.get() or {}), **values})
    try:
        yield
    finally:
        _OVERRIDES.reset(token)
