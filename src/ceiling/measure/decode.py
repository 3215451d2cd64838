"""Measured decode: real KV-cache decode steps of a small GPT beside the predicted ceiling.

`run_decode` builds the model with random weights on the local device, fills each
sequence's cache with `context` tokens, and times single decode steps at a fixed context
(the cache length is reset before each step, so every sample does the same work) with the
shared timing harness. It returns raw durations.

`compare_decode` puts those beside the ceiling of `ceiling.model.decode` for this machine:
the measured machine profile when there is one, else the detected CPU's theoretical peak
(or the GPU's catalog entry) with a quick read-bandwidth measurement, and says which.
When the weights and the KV cache fit in the last-level cache, DRAM bandwidth is not a
ceiling (the data never leaves the cache between steps): the ceiling is then the compute
roof alone, and the result says so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ceiling.errors import CeilingError, DoesNotFit, InvalidInput, UnsupportedOnDevice
from ceiling.measure import machine
from ceiling.measure.stats import summarize
from ceiling.measure.timer import benchmark, is_cuda
from ceiling.model.decode import DecodeSetup, decode_ceiling
from ceiling.model.decode_expected import decode_bars
from ceiling.model.decode_results import DecodeCeiling
from ceiling.model.transformer_config import TransformerConfig
from ceiling.vocabulary import normalize_dtype, torch_dtype

# Bumped whenever the way of measuring decode changes.
METHOD_VERSION = 1

MEASURED_DTYPES = ("fp32", "bf16", "fp16")
READ_BUFFER_BYTES = 256 * 2**20  # ≥ 4× a typical last-level cache


@dataclass(frozen=True)
class DecodeSamples:
    batch: int
    step_times_s: list[float]


@dataclass(frozen=True)
class DecodeRun:
    """Raw record of timed decode steps: one list of durations per batch size."""

    method_version: int
    environment: dict
    model: str
    config: TransformerConfig
    device: str
    dtype: str
    context: int
    weight_bytes: int  # as allocated (a tied table counted once)
    kv_bytes_per_token: int
    samples: list[DecodeSamples]


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def check_device(device: str) -> str:
    """'cpu' or 'cuda[:N]' that torch can use; anything else is a one-line error."""
    import re

    import torch

    text = device.strip().lower()
    if text == "cpu":
        return text
    m = re.fullmatch(r"cuda(?::(\d+))?", text)
    if not m:
        raise InvalidInput(f"device must be cpu or cuda[:N], got {device!r}")
    if not torch.cuda.is_available():
        raise UnsupportedOnDevice(f"{device}: torch sees no CUDA device here; use --device cpu")
    index = int(m.group(1) or 0)
    if index >= torch.cuda.device_count():
        raise UnsupportedOnDevice(
            f"{device}: torch sees {torch.cuda.device_count()} CUDA device(s) (0-based)"
        )
    return text


def default_dtype(device: str) -> str:
    # CPUs multiply fp32 natively everywhere; GPUs serve in bf16.
    return "bf16" if is_cuda(device) else "fp32"


def run_decode(
    cfg: TransformerConfig,
    batches: list[int],
    context: int = 0,
    device: str | None = None,
    dtype: str | None = None,
    warmup_ms: float = 100.0,
    budget_ms: float = 300.0,
    on_batch: Callable[[int], None] | None = None,
) -> DecodeRun:
    """Time one decode step at each batch size after warm-up; durations in seconds."""
    import torch

    from ceiling.workloads.gpt import build_gpt

    device = check_device(device or default_device())
    dtype = normalize_dtype(
        dtype or default_dtype(device), MEASURED_DTYPES, usage=" to measure decode"
    )
    if context + 1 > cfg.max_seq:
        raise InvalidInput(f"context {context} leaves no room in {cfg.max_seq} positions")
    tdtype = torch_dtype(dtype)
    _check_room(cfg, batches, context, device, torch.finfo(tdtype).bits // 8)
    model = build_gpt(cfg, device=device, dtype=tdtype).eval()
    gen = torch.Generator(device="cpu").manual_seed(0)
    out = []
    for batch in batches:
        cache = model.new_kv_cache(batch, context + 1)
        if context:
            prompt = torch.randint(0, cfg.vocab, (batch, context), generator=gen).to(device)
            model.prefill(prompt, cache)
        tokens = torch.randint(0, cfg.vocab, (batch,), generator=gen).to(device)

        def step(cache=cache, tokens=tokens) -> None:
            cache.length = context  # same position every time: every sample does equal work
            model.decode_step(tokens, cache)

        times = benchmark(step, device=device, warmup_ms=warmup_ms, budget_ms=budget_ms)
        out.append(DecodeSamples(batch, times))
        del cache
        if on_batch is not None:
            on_batch(batch)
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    kv_tok = cfg.kv_bytes_per_token(torch.finfo(tdtype).bits // 8)
    return DecodeRun(
        method_version=METHOD_VERSION,
        environment=machine.environment(device),
        model=cfg.name,
        config=cfg,
        device=device,
        dtype=dtype,
        context=context,
        weight_bytes=weight_bytes,
        kv_bytes_per_token=kv_tok,
        samples=out,
    )


# FLOPs one decode step may cost: a benchmark runs dozens of steps per batch size, so a
# step must take well under a second (CPUs reach ~1e11-1e12 FLOP/s, GPUs ~1e14 and up).
MAX_STEP_FLOP = {"cpu": 1e11, "cuda": 1e13}


def _check_room(
    cfg: TransformerConfig,
    batches,
    context: int,
    device: str,
    nbytes: int,
    free_bytes: float | None = None,
) -> None:
    """Refuse, before any model is built, runs that would not fit comfortably here (half the
    free memory: weights, the KV cache and one step's activations and logits) or whose
    steps are too large to time in a few seconds."""
    import torch

    b = max(batches)
    kv = b * (context + 1) * cfg.kv_bytes_per_token(nbytes)
    # one step's activations (q, k, v, output and the FFN's inner width) and the logits
    step = b * (4 * cfg.hidden + cfg.ffn_hidden + cfg.vocab) * nbytes
    need = cfg.params_total * nbytes + kv + step
    if free_bytes is None and is_cuda(device):
        free_bytes = torch.cuda.mem_get_info(torch.device(device))[0]
    elif free_bytes is None:
        import psutil

        free_bytes = psutil.virtual_memory().available
    if need > free_bytes / 2:
        weights = cfg.params_total * nbytes
        raise DoesNotFit(
            f"{cfg.name or 'the model'} at batch {b:,}: weights {weights / 1e9:.2g} GB + KV "
            f"cache {kv / 1e9:.2g} GB + one step's activations {step / 1e9:.2g} GB = "
            f"{need / 1e9:.1f} GB to measure here, more than half of the "
            f"{free_bytes / 1e9:.1f} GB free: a smaller batch, gpt:small or a smaller custom: "
            "model (the ceiling alone needs no --measure)"
        )
    flop = 2.0 * cfg.params_total * b
    cap = MAX_STEP_FLOP["cuda" if is_cuda(device) else "cpu"]
    if flop > cap:
        raise DoesNotFit(
            f"one decode step at batch {b:,} is 2 × {cfg.params_total:,} parameters × {b:,} = "
            f"{flop:.3g} FLOP, more than the {cap:.0e} FLOP a step may take on this device (a "
            f"benchmark times dozens of steps per batch): measure batches up to "
            f"{int(cap // (2.0 * cfg.params_total)):,}"
        )


def quick_read_bandwidth(device: str, budget_ms: float = 200.0) -> float:
    """Best bytes/s of summing a buffer far larger than the caches (a read-only stream)."""
    import torch

    n = READ_BUFFER_BYTES // 4
    x = torch.ones(n, dtype=torch.float32, device=device)
    times = benchmark(lambda: x.sum(), device=device, warmup_ms=50.0, budget_ms=budget_ms)
    return n * 4 / min(times)


@dataclass(frozen=True)
class LocalCeiling:
    spec: object  # a DeviceSpec
    source: str
    cache_bytes: float | None  # last-level cache (CPU) or L2 (GPU), one instance
    machine: object = None  # the hardware.resolve.Machine it comes from


def local_ceiling(
    device: str, profile: str | Path | None = None, reads_only: bool = True
) -> LocalCeiling:
    """This machine's ceilings (`hardware.resolve.this_machine`: the profile if any, else
    datasheet/theoretical + a quick bandwidth measured here).

    `reads_only`: the work mostly reads memory (decode), so the profile's read-only rate may
    stand for its bandwidth; a training step writes as much as it reads, so it may not."""
    from ceiling.hardware.resolve import this_machine

    kind = "cuda" if is_cuda(device) else "cpu"
    m = this_machine(
        kind,
        profile,
        gpu_name=machine.device_name(device) if kind == "cuda" else None,
        read_bandwidth=lambda: quick_read_bandwidth(device),
    )
    spec, source = m.spec, m.source
    if reads_only and m.from_profile:
        spec, source = _read_bandwidth_from_profile(spec, source, profile, kind)
    return LocalCeiling(spec, source, _cache_bytes(device), m)


def _read_bandwidth_from_profile(spec, source: str, profile, kind: str):
    """Decode mostly reads: take the profile's read-only (dot) rate when it beats the
    read+write kernels' rate the profile calls its bandwidth, so the ceiling stays an upper
    bound."""
    import dataclasses

    from ceiling.hardware.profile import load_profile

    try:
        rows = load_profile(profile).device(kind).extra.get("memory") or []
        dot = max(
            (float(r["best_gbps"]) * 1e9 for r in rows if r.get("kernel") == "dot"), default=0.0
        )
    except (CeilingError, KeyError, TypeError, ValueError, AttributeError):
        return spec, source
    if dot <= spec.memory_bandwidth_bytes_per_s:
        return spec, source
    spec = dataclasses.replace(spec, memory_bandwidth_bytes_per_s=dot)
    return spec, source + "; bandwidth: its read-only (dot) rate, as decode mostly reads"


def _cache_bytes(device: str) -> float | None:
    if is_cuda(device):
        import torch

        props = torch.cuda.get_device_properties(torch.device(device))
        return float(getattr(props, "L2_cache_size", 0)) or None
    try:
        from ceiling.hardware.cpu import detect_cpu

        llc = detect_cpu().llc_bytes
    except CeilingError:
        return None
    return float(llc) if llc else None


def _private_cache_bytes(device: str) -> float | None:
    """The cache level below the last on a CPU (one core's own L2 where the L3 is shared):
    what a matmul's operands fall out of while the ops between two uses of them run; None
    on a GPU (its L2 is the last level) or when the CPU's caches are unknown."""
    if is_cuda(device):
        return None
    try:
        from ceiling.hardware.cpu import detect_cpu

        caches = detect_cpu().caches
    except CeilingError:
        return None
    levels = sorted((k for k in caches if k[1:].isdigit()), key=lambda k: int(k[1:]))
    return float(caches[levels[-2]]) if len(levels) >= 2 else None


@dataclass(frozen=True)
class MeasuredDecodeRow:
    batch: int
    step_time_s: float  # median
    measured_tokens_per_s: float  # from the median step
    best_tokens_per_s: float  # from the fastest step
    ceiling_tokens_per_s: float
    memory_roof_tokens_per_s: float | None  # None when the data sit in cache
    compute_roof_tokens_per_s: float
    bound: str
    share_of_ceiling: float
    mbu: float  # achieved bytes/s over the bandwidth used for the ceiling
    mfu: float  # achieved FLOP/s over the peak used for the ceiling
    noisy: bool
    samples: int
    # the three roofs with this machine's per-op floor and, in cache, the cache's bandwidth
    expected_tokens_per_s: float | None = None
    expected_limited_by: str | None = None  # memory, compute, launches (per-op overhead)
    expected_memory_s: float | None = None
    expected_compute_s: float | None = None
    expected_launch_s: float | None = None
    waterfall: list | None = None  # ceiling → measured step, bars that sum to the step


@dataclass(frozen=True)
class DecodeComparison:
    run: DecodeRun
    ceiling: DecodeCeiling
    ceiling_source: str
    cache_bytes: float | None
    in_cache: bool
    rows: list[MeasuredDecodeRow]
    notes: list[str] = field(default_factory=list)


def _expected(ceiling, cfg, roofs, in_cache: bool, rates: dict | None) -> list:
    """Expected rows with this machine's roofs (None without them); `rates`: measured
    FLOP/s of the decoder's matmul shapes."""
    if roofs is None:
        return [None] * len(ceiling.rows)
    from ceiling.model.decode_expected import EngineCosts, compute_with_rates, expected_rows

    cache_bw = roofs.cache_bandwidth_bytes_per_s if in_cache else None
    costs = EngineCosts(bandwidth_share=1.0, per_kernel_s=roofs.per_op_s,
                        memory_bandwidth_bytes_per_s=cache_bw)  # fmt: skip
    compute = compute_with_rates(cfg, ceiling, rates) if rates else None
    return expected_rows(ceiling, cfg.layers, costs, compute)


def decode_matmul_rates(run: DecodeRun, cache_bytes: float | None) -> dict:
    """FLOP/s of each matmul shape the run's decode steps ran, timed alone (its median
    call); when the weights do not fit the cache, with weights read from memory as a
    decode step reads them."""
    from ceiling.measure.roofs import matmul_rates
    from ceiling.model.decode_expected import decoder_matmuls

    batches = {s.batch for s in run.samples}
    shapes = {shape for b in batches for shape, _ in decoder_matmuls(run.config, b)}
    cold = cache_bytes if cache_bytes and run.weight_bytes > cache_bytes else None
    return matmul_rates(shapes, run.device, torch_dtype(run.dtype), cold_bytes=cold)


def compare_decode(
    run: DecodeRun, local: LocalCeiling, roofs=None, rates: dict | None = None
) -> DecodeComparison:
    """Measured tokens/s beside the ceiling of the same model, dtype and context; with
    `roofs` (measure.roofs.LocalRoofs), the expected speed under three roofs beside it."""
    cfg = run.config
    # Count only the bytes a step really reads, so the ceiling is a true upper bound.
    setup = DecodeSetup(weights_dtype=run.dtype, context=run.context, weights_counted="read")
    batches = [s.batch for s in run.samples]
    ceiling = decode_ceiling(cfg, local.spec, batches, setup, drop_unfit=False)
    notes = list(ceiling.notes)
    largest = max(batches)
    working_set = run.weight_bytes + largest * (run.context + 1) * run.kv_bytes_per_token
    in_cache = bool(local.cache_bytes) and working_set <= local.cache_bytes
    if in_cache:
        notes.append(
            f"weights + KV cache ({working_set / 1e6:.1f} MB) fit in the "
            f"{local.cache_bytes / 2**20:.0f} MiB last-level cache: DRAM bandwidth is not a "
            "ceiling here, so the ceiling shown is the compute roof alone"
        )
    rows = []
    expected = _expected(ceiling, cfg, roofs, in_cache, rates)
    for samples, crow, exp in zip(run.samples, ceiling.rows, expected, strict=True):
        st = summarize(samples.step_times_s)
        b = samples.batch
        compute_roof = b / (crow.compute_time_s + crow.comm_time_s)
        memory_roof = b / (crow.memory_time_s + crow.comm_time_s)
        ceiling_tps = compute_roof if in_cache else crow.tokens_per_s
        measured = b / st.median
        bars = decode_bars(b, ceiling_tps, exp, st.median) if exp else None
        rows.append(
            MeasuredDecodeRow(
                batch=b,
                step_time_s=st.median,
                measured_tokens_per_s=measured,
                best_tokens_per_s=b / st.min,
                ceiling_tokens_per_s=ceiling_tps,
                memory_roof_tokens_per_s=None if in_cache else memory_roof,
                compute_roof_tokens_per_s=compute_roof,
                bound="compute" if in_cache else crow.bound,
                share_of_ceiling=measured / ceiling_tps,
                mbu=crow.bytes_per_step / st.median / ceiling.bandwidth_bytes_per_s,
                mfu=crow.flops_per_step / st.median / ceiling.peak_flops_per_s,
                noisy=st.noisy,
                samples=st.n,
                expected_tokens_per_s=exp.tokens_per_s if exp else None,
                expected_limited_by=exp.limited_by if exp else None,
                expected_memory_s=exp.memory_s if exp else None,
                expected_compute_s=exp.compute_s if exp else None,
                expected_launch_s=exp.launch_s if exp else None,
                waterfall=bars,
            )
        )
    over = [r.batch for r in rows if r.measured_tokens_per_s > r.ceiling_tokens_per_s]
    if over:
        notes.append(
            f"measured above the ceiling at batch {', '.join(map(str, over))}: the ceiling "
            f"({local.source}) understates this machine — measure it with `ceiling bench`"
        )
    return DecodeComparison(
        run=run,
        ceiling=ceiling,
        ceiling_source=local.source,
        cache_bytes=local.cache_bytes,
        in_cache=in_cache,
        rows=rows,
        notes=notes,
    )


def measure_decode(
    cfg: TransformerConfig,
    batches: list[int],
    context: int = 0,
    device: str | None = None,
    dtype: str | None = None,
    profile: str | Path | None = None,
    warmup_ms: float = 100.0,
    budget_ms: float = 300.0,
    on_batch: Callable[[int], None] | None = None,
) -> DecodeComparison:
    """Run real decode steps here and compare them with this machine's ceiling."""
    from ceiling.measure.roofs import local_roofs

    device = check_device(device or default_device())
    local = local_ceiling(device, profile)
    run = run_decode(cfg, batches, context, device, dtype, warmup_ms, budget_ms, on_batch)
    roofs = local_roofs(device, local.cache_bytes, profile)
    rates = decode_matmul_rates(run, local.cache_bytes)
    return compare_decode(run, local, roofs, rates)
