"""Transformer shapes: parameter counts, FLOPs per token, memory pieces, the model catalog.

Pure arithmetic over a frozen `TransformerConfig`. FLOPs count a multiply-add as 2.
Notation in comments: l layers, h hidden size, a heads, d head dim, k KV heads, f FFN size,
V vocabulary, s sequence length, E experts, e active experts per token.

Layer kinds. A model's blocks need not be alike: with experts, the first `dense_layers`
blocks and those off the `moe_every` step keep a dense FFN of `ffn_hidden` (DeepSeek's
`first_k_dense_replace`, Llama 4's interleaved MoE); the rest route each token to e of E
experts of `moe_ffn_hidden` plus `shared_experts` always-on experts. Attention is "mha"
(multi-head, grouped-query or multi-query: K and V of k heads) or "mla" (multi-head latent
attention, DeepSeek-V2: a compressed latent of `kv_lora_rank` plus a shared rotary key of
`qk_rope_head_dim` is all a token caches). Local layers (`sliding_window`, laid out by
`local_global`) attend to at most the window and cache at most the window.

The catalog (`models.toml`, shipped with the package) holds published architectures, each
with a source; `parse_model` also accepts explicit dimensions:
``custom:layers=32,hidden=4096,heads=32,ffn_hidden=11008,vocab=32000`` (see CUSTOM_HELP).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ceiling.errors import InvalidInput, UnknownName
from ceiling.model.attention import attention_flops, mla_decode_flops
from ceiling.text import shortened

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

FFN_KINDS = ("gelu", "swiglu")
NORM_KINDS = ("layernorm", "rmsnorm")
ATTENTION_KINDS = ("mha", "mla")

# Adam with mixed precision keeps 16 bytes per parameter: 2 (16-bit weights) + 2 (16-bit
# gradients) + 12 (fp32 master weights, momentum, variance) — ZeRO paper, section 3.1.
ADAM_MIXED_BYTES_PER_PARAM = 16

CUSTOM_HELP = (
    "custom:KEY=VALUE,... with keys layers, hidden, heads (required) and kv_heads, head_dim "
    "(default hidden/heads), ffn_hidden (default 4·hidden), ffn_kind gelu|swiglu, vocab "
    "(default 32000), tied_embeddings, max_seq (default 4096), experts, active_experts, "
    "norm layernorm|rmsnorm, bias, learned_positions, trained_dropout; mixture-of-experts "
    "layout moe_ffn_hidden, shared_experts, shared_ffn_hidden, shared_expert_gate, "
    "router_bias, expert_groups, expert_groups_per_token, dense_layers, moe_every, "
    "expert_weight_bits; attention mha|mla with "
    "q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim; "
    "sliding_window, local_global L:G (L local layers then G global, repeated), "
    "chunked_attention, attention_sinks, qkv_bias, qk_norm, norms_per_layer; booleans as "
    "true/false, none for an absent size"
)


# The largest of each size a config may give: far above any published model (126 layers,
# 16k hidden, 256k vocabulary, 10M positions), low enough that every count stays exact in
# a float and the planner's search over layers stays short.
SIZE_BOUNDS = {
    "layers": 2**17,
    "hidden": 2**20,
    "heads": 2**16,
    "kv_heads": 2**16,
    "head_dim": 2**16,
    "ffn_hidden": 2**22,
    "vocab": 2**24,
    "max_seq": 2**32,
    "experts": 2**16,
    "active_experts": 2**16,
}
# Sizes that may be absent (None) and, when given, have the same kind of bound.
OPTIONAL_SIZE_BOUNDS = {
    "moe_ffn_hidden": 2**22,
    "shared_ffn_hidden": 2**22,
    "q_lora_rank": 2**20,
    "kv_lora_rank": 2**20,
    "qk_nope_head_dim": 2**16,
    "qk_rope_head_dim": 2**16,
    "v_head_dim": 2**16,
    "sliding_window": 2**32,
    "expert_groups_per_token": 2**16,
}
# Counts that may be 0.
COUNT_BOUNDS = {"shared_experts": 2**16, "dense_layers": 2**17, "norms_per_layer": 16}
MOE_LAYOUT_KEYS = (
    "shared_experts", "dense_layers", "moe_every", "shared_expert_gate", "expert_groups",
    "expert_groups_per_token",
)  # fmt: skip
STORED_WEIGHTS = ("fp8", "mxfp4", "gptq", "awq")
MLA_DIMS = ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")


@dataclass(frozen=True)
class TransformerConfig:
    """A decoder-only transformer's shape. Validated on construction."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn_hidden: int
    ffn_kind: str
    vocab: int
    tied_embeddings: bool
    max_seq: int
    experts: int = 1
    active_experts: int = 1
    # Details that move parameter counts by well under 1 % but keep them exact.
    norm: str = "rmsnorm"
    bias: bool = False
    learned_positions: bool = False
    name: str = ""
    source: str = field(default="", compare=False)
    # Whether the model's published training run used dropout (its config's dropout
    # probabilities): the planner's default. The attention kernel is not the model's: the
    # planner assumes one for every model (`plan.step.DEFAULT_ATTENTION`).
    trained_dropout: bool = field(default=True, compare=False)
    # ---- mixture-of-experts layout (defaults: every layer alike) ----
    # Always-on experts of each MoE layer (DeepSeek's n_shared_experts, Llama 4's and
    # Qwen2-MoE's shared expert), each `shared_ffn_hidden` wide (None: `moe_ffn_hidden`).
    shared_experts: int = 0
    moe_ffn_hidden: int | None = None  # a routed expert's FFN width; None: ffn_hidden
    shared_ffn_hidden: int | None = None
    shared_expert_gate: bool = False  # Qwen2-MoE: a sigmoid gate of h weights on the shared
    router_bias: bool = False  # a bias per expert on the router (gpt-oss; DeepSeek-V3's
    # e_score_correction_bias)
    # Group-limited routing (DeepSeek's n_group, topk_group): the routed experts form
    # `expert_groups` groups and a token's experts come from at most
    # `expert_groups_per_token` of them (None: any). Changes no count; it bounds how many
    # groups (nodes, with one group per node) a token's dispatch reaches.
    expert_groups: int = 1
    expert_groups_per_token: int | None = None
    dense_layers: int = 0  # the first k layers keep a dense FFN (first_k_dense_replace)
    moe_every: int = 1  # layer i (from 0) is MoE when (i + 1) % moe_every == 0 (Llama 4)
    # Bits per routed-expert weight as published (gpt-oss: MXFP4, 4 bits + an 8-bit scale
    # per 32 = 4.25); None: the weights' dtype like every other parameter.
    expert_weight_bits: float | None = None
    # The format the published weights are stored in (a Hugging Face quantization_config:
    # fp8, mxfp4, gptq, awq); None: 16-bit. Decode and serve read them so by default; a
    # training plan runs FP8 weights' linear layers in FP8.
    stored_weights: str | None = field(default=None, compare=False)
    # ---- attention ----
    attention: str = "mha"  # "mha" (MHA/GQA/MQA) or "mla" (multi-head latent attention)
    q_lora_rank: int | None = None  # MLA: query compression rank; None: no compression
    kv_lora_rank: int | None = None  # MLA: the cached latent's width
    qk_nope_head_dim: int | None = None  # MLA: a head's query/key dims without rotary
    qk_rope_head_dim: int | None = None  # MLA: rotary dims (one key of them shared by heads)
    v_head_dim: int | None = None  # MLA: a head's value width
    sliding_window: int | None = None  # local layers attend to at most this many tokens
    # "L:G": L local layers then G global ones, repeated from layer 0 ("5:1" Gemma 3, "1:1"
    # gpt-oss and Gemma 2, "3:1" Llama 4); "" with a window: every layer local.
    local_global: str = ""
    chunked_attention: bool = False  # local layers attend within fixed chunks (Llama 4)
    attention_sinks: bool = False  # a learned logit per head and layer (gpt-oss)
    qkv_bias: bool = False  # biases on Q, K and V only (Qwen2)
    qk_norm: bool = False  # a norm gain of head_dim on Q and one on K per layer
    norms_per_layer: int = 2  # Gemma 2/3: 4 (pre and post attention and FFN)

    def __post_init__(self) -> None:
        for key, most in SIZE_BOUNDS.items():
            _check_size(key, getattr(self, key), most, 1)
        for key, most in OPTIONAL_SIZE_BOUNDS.items():
            if getattr(self, key) is not None:
                _check_size(key, getattr(self, key), most, 1)
        for key, most in COUNT_BOUNDS.items():
            _check_size(key, getattr(self, key), most, 0)
        _check_size("moe_every", self.moe_every, self.layers, 1)
        if self.ffn_kind not in FFN_KINDS:
            raise InvalidInput(
                f"ffn_kind must be one of {', '.join(FFN_KINDS)}, got {self.ffn_kind!r}"
            )
        if self.norm not in NORM_KINDS:
            raise InvalidInput(f"norm must be one of {', '.join(NORM_KINDS)}, got {self.norm!r}")
        if self.heads % self.kv_heads:
            raise InvalidInput(
                f"kv_heads must divide heads: heads({self.heads}) % kv_heads({self.kv_heads}) "
                f"= {self.heads % self.kv_heads}"
            )
        if self.active_experts > self.experts:
            raise InvalidInput(f"active_experts({self.active_experts}) > experts({self.experts})")
        if self.stored_weights not in (None, *STORED_WEIGHTS):
            raise InvalidInput(
                f"stored_weights must be one of {', '.join(STORED_WEIGHTS)}, "
                f"got {self.stored_weights!r}"
            )
        self._check_layout()

    def _check_layout(self) -> None:
        _check_size("expert_groups", self.expert_groups, 2**16, 1)
        if self.experts == 1:
            given = [k for k in MOE_LAYOUT_KEYS if getattr(self, k) != _DEFAULTS[k]]
            if given:
                raise InvalidInput(f"{', '.join(given)} need experts > 1")
        elif self.moe_layers == 0:
            raise InvalidInput(
                f"no MoE layer is left: dense_layers({self.dense_layers}), "
                f"moe_every({self.moe_every}) and layers({self.layers})"
            )
        else:
            self._check_groups()
        if self.expert_weight_bits is not None and not (
            isinstance(self.expert_weight_bits, int | float) and 0 < self.expert_weight_bits <= 32
        ):
            bits = shortened(self.expert_weight_bits, 24)
            raise InvalidInput(f"expert_weight_bits must be in (0, 32], got {bits}")
        if self.attention not in ATTENTION_KINDS:
            raise InvalidInput(
                f"attention must be one of {', '.join(ATTENTION_KINDS)}, got {self.attention!r}"
            )
        if self.attention == "mla":
            missing = [k for k in MLA_DIMS if getattr(self, k) is None]
            if missing:
                raise InvalidInput(f"multi-head latent attention needs {', '.join(missing)}")
        else:
            given = [k for k in (*MLA_DIMS, "q_lora_rank") if getattr(self, k) is not None]
            if given:
                raise InvalidInput(f"{', '.join(given)} need attention=mla")
        if self.sliding_window is None:
            for key in ("local_global", "chunked_attention"):
                if getattr(self, key) != _DEFAULTS[key]:
                    raise InvalidInput(f"{key} needs a sliding_window")
        self.local_pattern  # noqa: B018 (validates the pattern)

    def _check_groups(self) -> None:
        groups, limit = self.expert_groups, self.expert_groups_per_token
        if self.experts % groups:
            raise InvalidInput(
                f"expert_groups must divide the experts: experts({self.experts}) % "
                f"expert_groups({groups}) = {self.experts % groups}"
            )
        if limit is not None:
            reach = min(limit, groups) * (self.experts // groups)
            if limit > groups or self.active_experts > reach:
                raise InvalidInput(
                    f"expert_groups_per_token({limit}) must be at most expert_groups({groups}) "
                    f"and its groups must hold the {self.active_experts} active experts"
                )

    # ---- layer kinds --------------------------------------------------------------------

    @property
    def moe_layers(self) -> int:
        """Blocks whose FFN is a mixture of experts: layer i (from 0) when i ≥ dense_layers
        and (i + 1) % moe_every == 0; none for a dense model."""
        if self.experts == 1:
            return 0
        step = self.moe_every
        return self.layers // step - self.dense_layers // step

    @property
    def dense_ffn_layers(self) -> int:
        """Blocks with a dense FFN of ffn_hidden (all of them in a dense model)."""
        return self.layers - self.moe_layers

    @property
    def local_pattern(self) -> tuple[int, int]:
        """(local, global) layers of one period of the attention pattern: (1, 0) when a
        window is given without a pattern (every layer local), (0, 1) without a window."""
        if self.sliding_window is None:
            return (0, 1)
        if not self.local_global:
            return (1, 0)
        try:
            local, glob = (int(p) for p in self.local_global.split(":"))
        except ValueError:
            local = glob = -1
        if local < 0 or glob < 0 or local + glob == 0:
            raise InvalidInput(
                f"local_global must be L:G (L local layers then G global ones, whole numbers, "
                f"not both 0), got {shortened(self.local_global, 24)}"
            )
        return (local, glob)

    @property
    def local_layers(self) -> int:
        """Blocks whose attention is local (a sliding window or a chunk)."""
        local, glob = self.local_pattern
        period = local + glob
        whole, rest = divmod(self.layers, period)
        return whole * local + min(rest, local)

    @property
    def global_layers(self) -> int:
        return self.layers - self.local_layers

    def attended(self, keys):
        """Keys summed over all blocks when a query could see `keys` of them: every key in
        a global layer, at most the window in a local one. Accepts arrays."""
        keys = np.asarray(keys, dtype=float)
        out = self.global_layers * keys
        if self.local_layers:
            out = out + self.local_layers * np.minimum(keys, float(self.sliding_window))
        return out if out.ndim else float(out)

    def causal_attended(self, prompt: int) -> float:
        """Query-key pairs of a causal pass over `prompt` tokens, summed over all blocks:
        P(P+1)/2 in a global layer; a sliding window of W keeps min(i, W) for query i; a
        chunk of C keeps the query's position inside its chunk."""
        p = prompt
        full = p * (p + 1) / 2.0
        local = full
        if self.local_layers:
            w = self.sliding_window
            if self.chunked_attention:
                whole, rest = divmod(p, w)
                local = whole * w * (w + 1) / 2.0 + rest * (rest + 1) / 2.0
            elif p > w:
                local = w * (w + 1) / 2.0 + (p - w) * w
        return self.global_layers * full + self.local_layers * local

    # ---- parameter counts -------------------------------------------------------------

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

    # ---- FLOPs ------------------------------------------------------------------------

    @property
    def attention_widths(self) -> tuple[int, int]:
        """(score width, value width) of all heads: a·d and a·d (MHA/GQA); MLA scores over
        a·(d_nope + d_rope) and sums values of a·d_v."""
        if self.attention == "mla":
            qk = self.heads * (self.qk_nope_head_dim + self.qk_rope_head_dim)
            return qk, self.heads * self.v_head_dim
        return self.q_dim, self.q_dim

    def attention_flops_per_token(self, seq_len: int) -> float:
        """Forward FLOPs of the scores Q·Kᵀ and the weighted sum over V, all layers.

        4·l·a·d·s, counted over the full s as PaLM does (ceiling.model.attention); a local
        layer counts at most its window of keys; MLA scores over d_nope + d_rope and sums
        values of d_v per head (its non-absorbed form, the one training runs).
        """
        width, value = self.attention_widths
        return attention_flops(1, self.attended(seq_len), width, value_width=value)

    def flops_per_token(self, seq_len: int | None = None, training: bool = False) -> float:
        """Model FLOPs per token, a multiply-add counted as 2.

        Forward: 2·N + 4·l·a·d·s, N the weights in matrix multiplies (`params_matmul`).
        Training: forward + backward (2× forward) = 6·N + 12·l·a·d·s (PaLM, Appendix B).
        Recomputation is not counted (that is hardware FLOPs, not model FLOPs).
        `seq_len` defaults to `max_seq`.
        """
        s = self.max_seq if seq_len is None else seq_len
        if s < 0:
            raise InvalidInput(f"sequence length must be ≥ 0, got {s}")
        forward = 2.0 * self.params_matmul + self.attention_flops_per_token(s)
        return 3.0 * forward if training else forward

    def decode_attention_flops(self, context, absorbed: bool = False):
        """Forward attention FLOPs of one new token over `context` cached tokens and itself,
        all blocks (a local block sees at most its window). MLA: `absorbed` or not
        (`ceiling.model.attention.mla_decode_flops`); other attention ignores it."""
        keys = self.attended(np.asarray(context) + 1)
        if self.attention != "mla":
            width, value = self.attention_widths
            return attention_flops(1, keys, width, value_width=value)
        cached = self.attended(context)
        return mla_decode_flops(
            self.heads,
            self.kv_lora_rank,
            self.qk_nope_head_dim,
            self.qk_rope_head_dim,
            self.v_head_dim,
            keys,
            absorbed,
            cached,
        )

    def prefill_attention_flops(self, prompt: int, absorbed: bool = False) -> float:
        """Forward attention FLOPs of a causal pass over `prompt` tokens, all blocks
        (`causal_attended` query-key pairs). MLA: each token's own up-projection is among
        its weights, so non-absorbed costs only the attention per pair."""
        pairs = self.causal_attended(prompt)
        if self.attention != "mla":
            width, value = self.attention_widths
            return attention_flops(1, pairs, width, value_width=value)
        dims = (self.kv_lora_rank, self.qk_nope_head_dim, self.qk_rope_head_dim, self.v_head_dim)
        return float(mla_decode_flops(self.heads, *dims, pairs, absorbed, cached=0))

    def decode_flops_per_token(self, context, absorbed: bool = False):
        """Forward FLOPs of one decode step's token: 2·N + attention over the cache."""
        return 2.0 * self.params_matmul + self.decode_attention_flops(context, absorbed)

    # ---- memory -----------------------------------------------------------------------

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

    def replace(self, **changes) -> TransformerConfig:
        return dataclasses.replace(self, **changes)


_DEFAULTS = {f.name: f.default for f in dataclasses.fields(TransformerConfig)}


def _check_size(key: str, v, most: int, least: int) -> None:
    if not isinstance(v, int) or isinstance(v, bool) or v < least:
        kind = "a positive integer" if least else "a whole number ≥ 0"
        raise InvalidInput(f"{key} must be {kind}, got {shortened(v, 24)}")
    if v > most:
        raise InvalidInput(
            f"{key} must be at most {most:,} (far beyond any published model), "
            f"got {shortened(v, 24)}"
        )


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


# ---- catalog --------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _catalog() -> dict[str, TransformerConfig]:
    from importlib.resources import files

    text = files("ceiling.model").joinpath("models.toml").read_text(encoding="utf-8")
    raw = tomllib.loads(text)
    out = {}
    for key, entry in raw.items():
        out[key.lower()] = from_dict(key, entry)
    return out


def from_dict(name: str, entry: dict) -> TransformerConfig:
    """Build a config from catalog-style keys; head_dim, kv_heads, ffn default sensibly."""
    known = {f.name for f in dataclasses.fields(TransformerConfig)}
    unknown = sorted(set(entry) - known)
    if unknown:
        close = difflib.get_close_matches(unknown[0], sorted(known), n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise InvalidInput(f"model {name!r}: unknown key(s) {', '.join(unknown)}{hint}")
    for key in ("layers", "hidden", "heads"):
        if key not in entry:
            raise InvalidInput(f"model {name!r}: {key} is required")
    values = dict(entry)
    hidden, heads = values["hidden"], values["heads"]
    if values.get("attention") == "mla" and "head_dim" not in values:
        # a query/key head's width; keys and values come from the latent, one per head
        nope, rope = values.get("qk_nope_head_dim"), values.get("qk_rope_head_dim")
        if isinstance(nope, int) and isinstance(rope, int):
            values["head_dim"] = nope + rope
    if "head_dim" not in values:
        if not isinstance(hidden, int) or not isinstance(heads, int) or heads < 1:
            raise InvalidInput(f"model {name!r}: hidden and heads must be positive integers")
        if hidden % heads:
            raise InvalidInput(
                f"model {name!r}: heads must divide hidden or head_dim be given: "
                f"hidden({hidden}) % heads({heads}) = {hidden % heads}"
            )
        values["head_dim"] = hidden // heads
    values.setdefault("kv_heads", heads)
    values.setdefault("ffn_hidden", 4 * hidden if isinstance(hidden, int) else hidden)
    values.setdefault("ffn_kind", "gelu")
    values.setdefault("vocab", 32000)
    values.setdefault("tied_embeddings", False)
    values.setdefault("max_seq", 4096)
    values.setdefault("name", name)
    return TransformerConfig(**values)


def model_names() -> list[str]:
    return sorted(_catalog())


def all_models() -> dict[str, TransformerConfig]:
    return dict(_catalog())


def get_model(name: str) -> TransformerConfig:
    """A catalog model by name (case-insensitive); UnknownName lists close matches."""
    catalog = _catalog()
    key = name.strip().lower()
    if key in catalog:
        return catalog[key]
    close = difflib.get_close_matches(key, list(catalog), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise UnknownName(
        f"unknown model {name!r}{hint} (`ceiling models` lists them; or give "
        f"custom:layers=..,hidden=..,heads=.. or hf:PATH to a Hugging Face config.json)"
    )


_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


def _parse_value(key: str, text: str):
    t = text.strip()
    kind = {f.name: f.type for f in dataclasses.fields(TransformerConfig)}.get(key)
    if kind is None:
        return t  # an unknown key: from_dict names it, with the closest known one
    if kind == "bool":
        if t.lower() not in _TRUE + _FALSE:
            raise InvalidInput(f"custom model: {key}={text!r} must be true or false (a boolean)")
        return t.lower() in _TRUE
    if kind == "str":
        return t.lower()
    if "None" in kind and t.lower() == "none":
        return None
    try:
        value = float(t)
    except ValueError:
        raise InvalidInput(f"custom model: {key}={text!r} is not a number") from None
    if kind.startswith("float"):
        return value
    if not value.is_integer():
        raise InvalidInput(f"custom model: {key}={text!r} must be a whole number")
    return int(value)


@runtime_checkable
class PretrainedConfig(Protocol):
    """A Hugging Face model config held in memory: anything with `to_dict()` giving the
    fields of its config.json, as transformers' `PretrainedConfig` (never imported here)."""

    def to_dict(self) -> dict[str, Any]: ...


# What a model argument may be, for the API's annotations.
ModelArgument = str | dict | PretrainedConfig | TransformerConfig


def _from_config_object(model: Any) -> TransformerConfig:
    """A Hugging Face config given as a dict (config.json's content) or a config object."""
    raw = model.to_dict() if isinstance(model, PretrainedConfig) else dict(model)
    if not isinstance(raw, dict):
        raise InvalidInput(f"the model config's to_dict() gave {type(raw).__name__}, not a dict")
    label = raw.get("_name_or_path") or raw.get("model_type") or "config"
    where = "a config object" if isinstance(model, PretrainedConfig) else "a config dict"
    from ceiling.model.hf_config import config_from_hf

    return config_from_hf(raw, f"hf:{label}", where)


def parse_model(text: ModelArgument) -> TransformerConfig:
    """A catalog name, explicit dims ``custom:layers=32,...``, or ``hf:PATH`` (config.json);
    from Python also a Hugging Face config as a dict or an object with `to_dict()` (a
    transformers `PretrainedConfig`), or a `TransformerConfig` itself."""
    if isinstance(text, TransformerConfig):
        return text
    if isinstance(text, Mapping | PretrainedConfig) and not isinstance(text, str):
        return _from_config_object(text)
    if not isinstance(text, str):
        raise InvalidInput(
            f"a model is a name (catalog, custom:..., hf:PATH), a Hugging Face config dict or "
            f"config object; got {type(text).__name__}"
        )
    t = text.strip()
    if t.lower().startswith("hf:"):
        from ceiling.hf_files import read_config
        from ceiling.model.hf_config import config_from_hf

        raw, name, where = read_config(t[len("hf:") :])
        return config_from_hf(raw, name, where)
    if t.lower().startswith("custom:"):
        body = t[len("custom:") :]
        entry = {}
        for part in filter(None, (p.strip() for p in body.split(","))):
            if "=" not in part:
                raise InvalidInput(
                    f"custom model: expected KEY=VALUE, got {part!r} ({CUSTOM_HELP})"
                )
            key, value = (s.strip() for s in part.split("=", 1))
            if key in entry:
                raise InvalidInput(f"custom model: {key} is given twice")
            entry[key] = _parse_value(key, value)
        entry.setdefault("name", t)
        return from_dict("custom", entry)
    return get_model(t)
