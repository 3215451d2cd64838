"""A transformer's parameter counts: every weight of every block kind, and the weights a token
multiplies (what its FLOPs count).

Mixed into `TransformerConfig` (`ceiling.model.transformer_config`), whose fields and layer
kinds (`moe_layers`, `dense_ffn_layers`) these read. Notation: h hidden size, a heads, d head
dim, k KV heads, f FFN size, V vocabulary, E experts, e active experts per token.
"""

from __future__ import annotations


class ParameterCounts:
    """Parameter counts of a `TransformerConfig`, summed over its block kinds."""

    @property
    def q_dim(self) -> int:
        """Width of all query heads together, a·d (equals h in most models)."""
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of the keys (or the values) of all KV heads, k·d."""
        return self.kv_heads * self.head_dim

    def _norm_params(self, width: int) -> int:
        return 2 * width if self.norm == "layernorm" else width

    @property
    def params_attention_matmul(self) -> int:
        """Per layer, the attention's weight matrices.

        MHA/GQA: Q and output h·a·d each, K and V h·k·d each. MLA (DeepSeek-V2, section
        2.1): the query through a rank-r_q compression (h·r_q + r_q·a·(d_nope + d_rope)) or
        directly (h·a·(d_nope + d_rope)); the latent and the shared rotary key
        h·(r_kv + d_rope); the latent's up-projection to keys and values r_kv·a·(d_nope +
        d_v); the output a·d_v·h.
        """
        h, a = self.hidden, self.heads
        if self.attention == "mla":
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            r_q, r_kv = self.q_lora_rank, self.kv_lora_rank
            q = h * a * qk if r_q is None else h * r_q + r_q * a * qk
            kv = h * (r_kv + self.qk_rope_head_dim) + r_kv * a * (
                self.qk_nope_head_dim + self.v_head_dim
            )
            return q + kv + a * self.v_head_dim * h
        return 2 * h * self.q_dim + 2 * h * self.kv_dim

    @property
    def params_attention(self) -> int:
        """Per layer: the matrices (`params_attention_matmul`), biases, the norm gains inside
        attention (MLA's latent norms, per-head Q/K norms) and sinks (one per head)."""
        extra = 0
        if self.attention == "mla":
            if self.q_lora_rank is not None:
                extra += self._norm_params(self.q_lora_rank)
            extra += self._norm_params(self.kv_lora_rank)
            if self.bias:
                extra += self.heads * self.v_head_dim  # not in any published MLA model
        elif self.bias:
            extra += self.q_dim + 2 * self.kv_dim + self.hidden
        elif self.qkv_bias:
            extra += self.q_dim + 2 * self.kv_dim
        if self.qk_norm:
            extra += 2 * self._norm_params(self.head_dim)
        if self.attention_sinks:
            extra += self.heads
        return self.params_attention_matmul + extra

    def _ffn_params(self, width: int) -> int:
        """One FFN of `width`: GELU has up and down (2·h·f); SwiGLU adds a gate (3·h·f)."""
        mats = 2 if self.ffn_kind == "gelu" else 3
        weights = mats * self.hidden * width
        biases = (mats - 1) * width + self.hidden if self.bias else 0
        return weights + biases

    @property
    def ffn_mats(self) -> int:
        return 2 if self.ffn_kind == "gelu" else 3

    @property
    def expert_ffn_hidden(self) -> int:
        """A routed expert's FFN width (`moe_ffn_hidden`, else `ffn_hidden`)."""
        return self.ffn_hidden if self.moe_ffn_hidden is None else self.moe_ffn_hidden

    @property
    def shared_expert_ffn_hidden(self) -> int:
        return self.expert_ffn_hidden if self.shared_ffn_hidden is None else self.shared_ffn_hidden

    @property
    def params_expert(self) -> int:
        """One routed expert's FFN (of `expert_ffn_hidden`)."""
        return self._ffn_params(self.expert_ffn_hidden)

    @property
    def params_dense_ffn(self) -> int:
        """The FFN of a dense block (of `ffn_hidden`)."""
        return self._ffn_params(self.ffn_hidden)

    @property
    def params_shared(self) -> int:
        """A MoE layer's always-on experts and the gate on them."""
        gate = self.hidden if self.shared_expert_gate else 0
        return self.shared_experts * self._ffn_params(self.shared_expert_ffn_hidden) + gate

    @property
    def params_router(self) -> int:
        """A MoE layer's router: h·E (+ E with a bias)."""
        if self.experts == 1:
            return 0
        return self.hidden * self.experts + (self.experts if self.router_bias else 0)

    @property
    def params_norm(self) -> int:
        return self._norm_params(self.hidden)

    @property
    def params_dense_layer(self) -> int:
        """A block with a dense FFN."""
        norms = self.norms_per_layer * self.params_norm
        return self.params_attention + self.params_dense_ffn + norms

    @property
    def params_moe_layer(self) -> int:
        """A MoE block, every expert counted."""
        norms = self.norms_per_layer * self.params_norm
        routed = self.experts * self.params_expert
        return self.params_attention + routed + self.params_shared + self.params_router + norms

    @property
    def params_moe_layer_active(self) -> int:
        """What one token passes through in a MoE block: its e routed experts."""
        unused = (self.experts - self.active_experts) * self.params_expert
        return self.params_moe_layer - unused

    @property
    def params_routed_experts(self) -> int:
        """Every routed expert of every MoE block (what expert parallelism splits)."""
        return self.moe_layers * self.experts * self.params_expert if self.moe_layers else 0

    @property
    def params_blocks(self) -> int:
        """All blocks' parameters, every expert counted."""
        return (
            self.dense_ffn_layers * self.params_dense_layer
            + self.moe_layers * self.params_moe_layer
        )

    @property
    def params_blocks_active(self) -> int:
        return (
            self.dense_ffn_layers * self.params_dense_layer
            + self.moe_layers * self.params_moe_layer_active
        )

    def _per_layer(self, total: int) -> int | float:
        """A sum over blocks as a mean per block: exact when the blocks are alike."""
        whole, rest = divmod(total, self.layers)
        return total / self.layers if rest else whole

    @property
    def params_layer(self) -> int | float:
        """All parameters of one block (every expert counted); with blocks of two kinds,
        the mean over the blocks."""
        return self._per_layer(self.params_blocks)

    @property
    def params_layer_active(self) -> int | float:
        """Parameters one token passes through in a block (only its active experts); with
        blocks of two kinds, the mean over the blocks."""
        return self._per_layer(self.params_blocks_active)

    @property
    def params_embedding(self) -> int:
        """Token table, the output head when untied, and learned positions."""
        table = self.vocab * self.hidden
        head = 0 if self.tied_embeddings else self.vocab * self.hidden
        positions = self.max_seq * self.hidden if self.learned_positions else 0
        return table + head + positions

    @property
    def params_total(self) -> int:
        return self.params_blocks + self.params_norm + self.params_embedding

    @property
    def params_non_embedding(self) -> int:
        """Blocks and the final norm: the N of Kaplan et al. and of PaLM's 6N."""
        return self.params_blocks + self.params_norm

    @property
    def params_active(self) -> int:
        """Parameters used per token (differs from total only for mixture-of-experts)."""
        return self.params_blocks_active + self.params_norm + self.params_embedding

    @property
    def params_blocks_matmul_active(self) -> int:
        """Weights one token multiplies in all blocks: attention's matrices, the FFN of a
        dense block, a MoE block's e routed and its shared experts and its router.

        Biases, norm gains and sinks are added or scaled (about one FLOP per element of the
        activation), not multiplied against the token (two FLOPs per weight), so they are
        left out. A shared expert's gate is a matrix of one column: counted.
        """
        h, mats = self.hidden, self.ffn_mats
        attention = self.layers * self.params_attention_matmul
        dense = self.dense_ffn_layers * mats * h * self.ffn_hidden
        moe = 0
        if self.moe_layers:
            routed = self.active_experts * mats * h * self.expert_ffn_hidden
            shared = self.shared_experts * mats * h * self.shared_expert_ffn_hidden
            gate = h if self.shared_expert_gate else 0
            moe = self.moe_layers * (routed + shared + gate + h * self.experts)
        return attention + dense + moe

    @property
    def params_layer_matmul_active(self) -> int | float:
        """Weights one token multiplies in a block (`params_blocks_matmul_active` per
        block; the mean when blocks differ)."""
        return self._per_layer(self.params_blocks_matmul_active)

    @property
    def params_matmul(self) -> int:
        """Active weights that take part in a matrix multiply for each token.

        The blocks' matrices plus the output head (V·h, whether tied or not); the input
        table and learned positions are lookups, and biases and norm gains are not
        multiplied, so none of them is counted.
        """
        return self.params_blocks_matmul_active + self.vocab * self.hidden
