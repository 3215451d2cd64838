"""What a decode ceiling gives: one `DecodeRow` per batch size and the `DecodeCeiling` around
them, with their JSON. Computed by `ceiling.model.decode`, whose docstring states the
conventions behind each figure."""

from __future__ import annotations

from dataclasses import dataclass, field

from ceiling.model.decode_setup import Dtypes


@dataclass(frozen=True)
class DecodeRow:
    """One decode step at one batch size, per device (all t tensor-parallel devices alike)."""

    batch: int
    weight_bytes: float
    kv_read_bytes: float
    kv_write_bytes: float
    bytes_per_step: float
    flops_per_step: float
    memory_time_s: float
    compute_time_s: float
    comm_time_s: float
    step_time_s: float
    bound: str  # "memory" | "compute"
    tokens_per_s_per_sequence: float
    tokens_per_s: float
    intensity_flop_per_byte: float
    memory_needed_bytes: float
    fits: bool
    ttft_s: float  # prefill of the prompt for the whole batch
    attention_flops: float = 0.0  # of flops_per_step: scores and weighted sums over the cache
    weights_read: float = 0.0  # weights the step reads (0: not counted; weight_bytes / dtype)
    narrow_weights_read: float = 0.0  # of them, routed experts stored in fewer bits

    def to_json(self) -> dict:
        return {
            "batch": self.batch,
            "tokens_per_s": self.tokens_per_s,
            "tokens_per_s_per_sequence": self.tokens_per_s_per_sequence,
            "bound": self.bound,
            "step_time_s": self.step_time_s,
            "memory_time_s": self.memory_time_s,
            "compute_time_s": self.compute_time_s,
            "comm_time_s": self.comm_time_s,
            "bytes_per_step": self.bytes_per_step,
            "weight_bytes_per_step": self.weight_bytes,
            "kv_bytes_per_step": self.kv_read_bytes + self.kv_write_bytes,
            "flops_per_step": self.flops_per_step,
            "intensity_flop_per_byte": self.intensity_flop_per_byte,
            "memory_needed_bytes": self.memory_needed_bytes,
            "ttft_s": self.ttft_s,
            "fits": self.fits,
        }


@dataclass(frozen=True)
class DecodeCeiling:
    model: str
    device: str
    dtypes: Dtypes
    context: int
    prompt_tokens: int
    tp: int
    peak_flops_per_s: float
    bandwidth_bytes_per_s: float
    link_bandwidth_bytes_per_s: float | None
    memory_bytes: float | None  # per device; None when the spec does not say
    params_total: int
    params_active: int
    weight_bytes_total: float  # all weights, all devices
    kv_bytes_per_token: float  # whole model, before tensor parallelism
    kv_bytes_per_token_per_device: float
    kv_bytes_per_sequence: float  # at context + 1 tokens, whole model
    ridge_flop_per_byte: float
    crossover_batch: int | None
    crossover_batch_with_kv: int | None
    max_batch: int | None  # largest batch whose weights + KV fit; None: memory unknown
    rows: list[DecodeRow]
    notes: list[str] = field(default_factory=list)
    # multi-head latent attention: "absorbed" or "non-absorbed", the faster at this
    # context; None for other attention
    mla_attention: str | None = None

    def to_json(self) -> dict:
        """The ceiling's figures (its rows apart: `DecodeRow.to_json`)."""
        return {
            "device": self.device,
            "params_total": self.params_total,
            "params_active": self.params_active,
            "weights_dtype": self.dtypes.weights,
            "activation_dtype": self.dtypes.activations,
            "compute_dtype": self.dtypes.compute,
            "kv_dtype": self.dtypes.kv,
            "context": self.context,
            "prompt_tokens": self.prompt_tokens,
            "tp": self.tp,
            "peak_flops_per_s": self.peak_flops_per_s,
            "bandwidth_bytes_per_s": self.bandwidth_bytes_per_s,
            "memory_bytes_per_device": self.memory_bytes,
            "weight_bytes": self.weight_bytes_total,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "kv_bytes_per_token_per_device": self.kv_bytes_per_token_per_device,
            "kv_bytes_per_sequence": self.kv_bytes_per_sequence,
            "ridge_flop_per_byte": self.ridge_flop_per_byte,
            "crossover_batch": self.crossover_batch,
            "crossover_batch_with_kv": self.crossover_batch_with_kv,
            "max_batch": self.max_batch,
            **({"mla_attention": self.mla_attention} if self.mla_attention else {}),
            "notes": self.notes,
        }
