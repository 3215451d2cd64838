"""A transformer's memory: the KV cache per token and per sequence, the weights' bytes, and one
training step's pieces.

Mixed into `TransformerConfig` (`ceiling.model.transformer_config`): reads its shape, its
layer kinds (`attended`, `moe_layers`) and its parameter counts.
"""

from __future__ import annotations

from dataclasses import dataclass

from ceiling.errors import InvalidInput

# Adam with mixed precision keeps 16 bytes per parameter: 2 (16-bit weights) + 2 (16-bit
# gradients) + 12 (fp32 master weights, momentum, variance) — ZeRO paper, section 3.1.
ADAM_MIXED_BYTES_PER_PARAM = 16


@dataclass(frozen=True)
class TrainingMemory:
    """Bytes of one training step's pieces (model state split as 2 + 2 + the rest)."""

    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    logits_bytes: float

    @property
    def model_state_bytes(self) -> float:
        return self.weights_bytes + self.gradients_bytes + self.optimizer_bytes


class TransformerMemory:
    """Bytes a `TransformerConfig` keeps: KV cache, weights, a training step's state."""

    @property
    def kv_elements_per_layer(self) -> int:
        """Elements one token caches in one block: K and V of k heads, 2·k·d; MLA its latent
        and shared rotary key, r_kv + d_rope (DeepSeek-V2, section 2.1.2)."""
        if self.attention == "mla":
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.kv_dim

    def kv_bytes_per_token(self, dtype_bytes: float = 2) -> float:
        """KV cache per token, every block: 2 (K and V) · l · k · d · bytes (GQA counts KV
        heads only); MLA l · (r_kv + d_rope) · bytes. Local blocks hold it only for the
        last window of tokens: `kv_bytes` gives a sequence's cache."""
        return float(self.layers * self.kv_elements_per_layer * dtype_bytes)

    def kv_bytes(self, context, dtype_bytes: float = 2):
        """KV cache of one sequence of `context` tokens: each local block holds at most its
        window of them. Accepts arrays."""
        return self.attended(context) * self.kv_elements_per_layer * dtype_bytes

    @property
    def params_routed_expert_matrices(self) -> int:
        """The routed experts' weight matrices (biases apart): what `expert_weight_bits`
        stores."""
        return self.moe_layers * self.experts * self.ffn_mats * self.hidden * self.expert_ffn_hidden

    def weight_bytes(self, dtype_bytes: float = 2) -> float:
        """All weights at `dtype_bytes`, the routed experts' matrices at `expert_weight_bits`
        when the model publishes them so and that is smaller."""
        bits = self.expert_weight_bits
        if bits is None or bits / 8 >= dtype_bytes:
            return self.params_total * dtype_bytes
        experts = self.params_routed_expert_matrices
        return (self.params_total - experts) * dtype_bytes + experts * bits / 8

    def training_memory(
        self,
        micro_batch: int,
        seq_len: int | None = None,
        state_bytes_per_param: float = ADAM_MIXED_BYTES_PER_PARAM,
        recompute: str = "none",
    ) -> TrainingMemory:
        """Memory of one replica's training step, no parallelism.

        Model state: `state_bytes_per_param` × parameters (16 for mixed-precision Adam).
        Activations per layer, 16-bit (Korthikanti et al. 2022, Table 2): s·b·h·(34 +
        5·a·s/h) without recompute, 34·s·b·h with selective recompute, 2·s·b·h with full
        recompute (only the layer inputs kept). Logits add 4·s·b·V (fp32 for the loss).
        """
        s = self.max_seq if seq_len is None else seq_len
        if micro_batch < 1 or s < 1:
            raise InvalidInput(f"micro_batch and seq_len must be ≥ 1, got {micro_batch}, {s}")
        sbh = s * micro_batch * self.hidden
        if recompute == "none":
            per_layer = sbh * (34 + 5 * self.heads * s / self.hidden)
        elif recompute == "selective":
            per_layer = 34.0 * sbh
        elif recompute == "full":
            per_layer = 2.0 * sbh
        else:
            raise InvalidInput(f"recompute must be none, selective or full, got {recompute!r}")
        n = self.params_total
        return TrainingMemory(
            weights_bytes=2.0 * n,
            gradients_bytes=2.0 * n,
            optimizer_bytes=(state_bytes_per_param - 4.0) * n,
            activations_bytes=self.layers * per_layer,
            logits_bytes=4.0 * s * micro_batch * self.vocab,
        )
