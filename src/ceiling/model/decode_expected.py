"""Expected decode speed: what a real engine pays beyond the ceiling's bytes / bandwidth.

The ceiling (`ceiling.model.decode`) is a strict bound: every byte at the datasheet
bandwidth, nothing else. A serving engine also pays, per decode step:

1. Bandwidth a streaming kernel actually reaches: a share of the datasheet figure on HBM
   (`BANDWIDTH_SHARE`: an A100-80GB streams ≈1.7 of its 2.039 TB/s); 1 when the bandwidth
   was measured on this machine.
2. A floor per kernel: launch and the gap to the next kernel, even under CUDA graphs, for
   `KERNELS_PER_LAYER` kernels per layer (norm, QKV, rotary, attention, output projection,
   residual, norm, gate/up, activation, down) plus a few outside the layers. The floor is
   measured on this machine (`ceiling bench overhead`) or an assumed `GPU_KERNEL_FLOOR_S`.
3. Quantised weights: int4 with group size G stores a scale and a zero point (2 bytes
   each) per G weights, read with them, and dequantises every weight on the vector units
   (`DEQUANT_OPS` operations per weight at the fp32 non-tensor peak) before the multiply.
4. Tensor parallelism: two all-reduces per layer, latency α and bandwidth as the planner
   prices them (`ceiling.model.collectives`, via the decode ceiling's rows).
5. KV reads: the cache at the context, as in the ceiling, at the reachable bandwidth.

    step = max(bytes / (bandwidth × share), FLOPs / peak) + dequantisation
           + kernels × floor + all-reduces
"""

from __future__ import annotations

from dataclasses import dataclass

from ceiling.errors import InvalidInput, UnsupportedOnDevice

BANDWIDTH_SHARE = 0.83  # HBM streaming share of the datasheet figure (A100: 1.7 / 2.039)
KERNELS_PER_LAYER = 10
KERNELS_OUTSIDE_LAYERS = 4  # embedding, final norm, output head, sampling
GPU_KERNEL_FLOOR_S = 5e-6  # launch-to-launch time of a small kernel on a data-center GPU
INT4_GROUP_SIZE = 32
SCALE_ZERO_BYTES = 4.0  # a 16-bit scale and a 16-bit zero point per group
DEQUANT_OPS = {"int4": 4.0, "int8": 2.0}  # unpack, convert, subtract zero, scale


@dataclass(frozen=True)
class EngineCosts:
    """What the expected figure assumes about the engine and device."""

    bandwidth_share: float = BANDWIDTH_SHARE
    per_kernel_s: float = GPU_KERNEL_FLOOR_S
    kernels_per_layer: int = KERNELS_PER_LAYER
    kernels_outside_layers: int = KERNELS_OUTSIDE_LAYERS
    group_size: int = INT4_GROUP_SIZE
    vector_peak_flops_per_s: float | None = None  # for dequantisation; None: not counted
    # the bandwidth bytes move at, when it is known better than the ceiling's × share (the
    # last-level cache's, measured, when the weights fit in it)
    memory_bandwidth_bytes_per_s: float | None = None

    def __post_init__(self) -> None:
        if not 0 < self.bandwidth_share <= 1:
            raise InvalidInput(f"bandwidth share must be in (0, 1], got {self.bandwidth_share}")
        if self.per_kernel_s < 0 or self.group_size < 1:
            raise InvalidInput("per-kernel time must be ≥ 0 and the group size ≥ 1")


@dataclass(frozen=True)
class ExpectedRow:
    batch: int
    quant_bytes: float  # scales and zero points read beside the weights
    memory_s: float
    compute_s: float
    dequant_s: float
    kernels: int
    launch_s: float
    comm_s: float
    step_s: float
    tokens_per_s: float
    ceiling_tokens_per_s: float
    limited_by: str  # the largest term: memory, compute, dequantisation, launches, all-reduce


def expected_rows(
    ceiling, layers: int, costs: EngineCosts, compute_s: dict | None = None
) -> list[ExpectedRow]:
    """Expected speed beside each row of a DecodeCeiling that fits in memory (`layers`: the
    model's); `compute_s`: a better compute time per batch (matmuls at their measured
    rates)."""
    weights = ceiling.dtypes.weights
    w_bytes = {"int4": 0.5, "int8": 1.0}.get(weights)
    kernels = layers * costs.kernels_per_layer + costs.kernels_outside_layers
    out = []
    for r in (row for row in ceiling.rows if row.fits):
        quantised = r.weight_bytes / w_bytes if w_bytes else 0.0
        quant = quantised * SCALE_ZERO_BYTES / costs.group_size if weights == "int4" else 0.0
        bandwidth = (
            costs.memory_bandwidth_bytes_per_s
            or ceiling.bandwidth_bytes_per_s * costs.bandwidth_share
        )
        memory = (r.bytes_per_step + quant) / bandwidth
        dequant = 0.0
        if quantised and costs.vector_peak_flops_per_s:
            dequant = quantised * DEQUANT_OPS[weights] / costs.vector_peak_flops_per_s
        launch = kernels * costs.per_kernel_s
        compute = (compute_s or {}).get(r.batch, r.compute_time_s)
        step = max(memory, compute) + dequant + launch + r.comm_time_s
        terms = {
            "memory": memory,
            "compute": compute,
            "dequantisation": dequant,
            "launches": launch,
            "all-reduce": r.comm_time_s,
        }
        out.append(
            ExpectedRow(
                batch=r.batch,
                quant_bytes=quant,
                memory_s=memory,
                compute_s=compute,
                dequant_s=dequant,
                kernels=kernels,
                launch_s=launch,
                comm_s=r.comm_time_s,
                step_s=step,
                tokens_per_s=r.batch / step,
                ceiling_tokens_per_s=r.tokens_per_s,
                limited_by=max(terms, key=lambda k: terms[k]),
            )
        )
    return out


def costs_for(spec, per_kernel_s: float | None = None) -> EngineCosts:
    """The engine costs on a device: its bandwidth at the streaming share unless it was
    measured here (a machine profile's device), the given per-kernel floor or the assumed
    one, dequantisation at its fp32 (non-tensor) peak."""
    measured = str(getattr(spec, "key", "")).startswith("measured")
    try:
        vector = spec.peak("fp32")
    except UnsupportedOnDevice:  # no fp32 figure: dequantisation is not counted
        vector = None
    return EngineCosts(
        bandwidth_share=1.0 if measured else BANDWIDTH_SHARE,
        per_kernel_s=GPU_KERNEL_FLOOR_S if per_kernel_s is None else per_kernel_s,
        vector_peak_flops_per_s=vector,
    )


def decoder_matmuls(cfg, batch: int) -> list[tuple[tuple[int, int, int], int]]:
    """(M, N, K) and count of the matmuls of one decode step of the built-in decoder: per
    layer Q, KV, output, FFN up (gate and up together when gated) and down; the head."""
    up = 2 * cfg.ffn_hidden if cfg.ffn_kind == "swiglu" else cfg.ffn_hidden
    per_layer = [
        (cfg.q_dim, cfg.hidden),
        (2 * cfg.kv_dim, cfg.hidden),
        (cfg.hidden, cfg.q_dim),
        (up, cfg.hidden),
        (cfg.hidden, cfg.ffn_hidden),
    ]
    out = [((batch, n, k), cfg.layers) for n, k in per_layer]
    return [*out, ((batch, cfg.vocab, cfg.hidden), 1)]


def compute_with_rates(cfg, ceiling, rates: dict) -> dict[int, float]:
    """Compute time per batch: the decoder's matmuls at their measured rates, the rest
    (attention over the cache, elementwise) at the peak."""
    out = {}
    for r in ceiling.rows:
        matmuls = decoder_matmuls(cfg, r.batch)
        if any(shape not in rates for shape, _ in matmuls):
            continue
        flops = sum(2.0 * m * n * k * count for (m, n, k), count in matmuls)
        at_rates = sum(2.0 * m * n * k * count / rates[(m, n, k)] for (m, n, k), count in matmuls)
        rest = max(r.flops_per_step - flops, 0.0) / ceiling.peak_flops_per_s
        out[r.batch] = at_rates + rest
    return out


def decode_bars(batch: int, ceiling_tokens_per_s: float, expected: ExpectedRow, measured_s: float):
    """From the ceiling to a measured decode step, in bars that sum to `measured_s`."""
    from ceiling.model.waterfall import Bar

    at_ceiling = batch / ceiling_tokens_per_s
    moved = max(expected.memory_s, expected.compute_s) + expected.comm_s
    bars = [
        Bar("the ceiling (bytes at the roof bandwidth, FLOPs at peak)", at_ceiling, "nothing"),
        Bar(
            "bytes at the bandwidth reached (cache or DRAM), beyond the ceiling",
            moved - at_ceiling,
            "smaller weights (int8/int4), a larger batch to share each read",
        ),
        Bar("dequantisation", expected.dequant_s, "a fused dequantising kernel"),
        Bar(
            f"per-op overhead ({expected.kernels} ops × the per-op floor)",
            expected.launch_s,
            "CUDA graphs or torch.compile: fewer, fused ops",
        ),
        Bar(
            "unexplained (measured − expected)",
            measured_s - expected.step_s,
            "threads, small kernels below their roof, a busy machine",
        ),
    ]
    return [b for b in bars if b.seconds or b.name != "dequantisation"]
