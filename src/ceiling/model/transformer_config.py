"""A decoder-only transformer's shape (`TransformerConfig`): its fields, their validation and
its layer kinds; `from_dict` builds one from catalog-style keys.

Layer kinds. A model's blocks need not be alike: with experts, the first `dense_layers`
blocks and those off the `moe_every` step keep a dense FFN of `ffn_hidden` (DeepSeek's
`first_k_dense_replace`, Llama 4's interleaved MoE); the rest route each token to e of E
experts of `moe_ffn_hidden` plus `shared_experts` always-on experts. Attention is "mha"
(multi-head, grouped-query or multi-query: K and V of k heads) or "mla" (multi-head latent
attention, DeepSeek-V2: a compressed latent of `kv_lora_rank` plus a shared rotary key of
`qk_rope_head_dim` is all a token caches). Local layers (`sliding_window`, laid out by
`local_global`) attend to at most the window and cache at most the window.

The formulas over a config live beside it: parameter counts `transformer_params.py`, FLOPs
`transformer_flops.py`, KV cache, weight and training memory `transformer_memory.py`.
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass, field

import numpy as np

from ceiling.errors import InvalidInput
from ceiling.model.transformer_flops import TransformerFlops
from ceiling.model.transformer_memory import TransformerMemory
from ceiling.model.transformer_params import ParameterCounts
from ceiling.text import shortened

FFN_KINDS = ("gelu", "swiglu")
NORM_KINDS = ("layernorm", "rmsnorm")
ATTENTION_KINDS = ("mha", "mla")


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
class TransformerConfig(ParameterCounts, TransformerFlops, TransformerMemory):
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
