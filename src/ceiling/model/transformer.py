"""Transformer shapes: parameter counts, FLOPs per token, memory pieces, the model catalog.

Pure arithmetic over a frozen `TransformerConfig`. FLOPs count a multiply-add as 2.
Notation in comments: l layers, h hidden size, a heads, d head dim, k KV heads, f FFN size,
V vocabulary, s sequence length, E experts, e active experts per token.

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

from ceiling.errors import InvalidInput, UnknownName
from ceiling.model.attention import attention_flops
from ceiling.text import shortened

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

FFN_KINDS = ("gelu", "swiglu")
NORM_KINDS = ("layernorm", "rmsnorm")

# Adam with mixed precision keeps 16 bytes per parameter: 2 (16-bit weights) + 2 (16-bit
# gradients) + 12 (fp32 master weights, momentum, variance) — ZeRO paper, section 3.1.
ADAM_MIXED_BYTES_PER_PARAM = 16

CUSTOM_HELP = (
    "custom:KEY=VALUE,... with keys layers, hidden, heads (required) and kv_heads, head_dim "
    "(default hidden/heads), ffn_hidden (default 4·hidden), ffn_kind gelu|swiglu, vocab "
    "(default 32000), tied_embeddings, max_seq (default 4096), experts, active_experts, "
    "norm layernorm|rmsnorm, bias, learned_positions, trained_dropout; booleans as true/false"
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

    def __post_init__(self) -> None:
        for key, most in SIZE_BOUNDS.items():
            v = getattr(self, key)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise InvalidInput(f"{key} must be a positive integer, got {shortened(v, 24)}")
            if v > most:
                raise InvalidInput(
                    f"{key} must be at most {most:,} (far beyond any published model), "
                    f"got {shortened(v, 24)}"
                )
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

    # ---- parameter counts -------------------------------------------------------------

    @property
    def q_dim(self) -> int:
        """Width of all query heads together, a·d (equals h in most models)."""
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of the keys (or the values) of all KV heads, k·d."""
        return self.kv_heads * self.head_dim

    @property
    def params_attention(self) -> int:
        """Per layer: Q and output projections h·a·d each, K and V h·k·d each (GQA)."""
        weights = 2 * self.hidden * self.q_dim + 2 * self.hidden * self.kv_dim
        biases = self.q_dim + 2 * self.kv_dim + self.hidden if self.bias else 0
        return weights + biases

    @property
    def params_expert(self) -> int:
        """One FFN: GELU has up and down (2·h·f); SwiGLU adds a gate (3·h·f)."""
        mats = 2 if self.ffn_kind == "gelu" else 3
        weights = mats * self.hidden * self.ffn_hidden
        biases = (mats - 1) * self.ffn_hidden + self.hidden if self.bias else 0
        return weights + biases

    @property
    def params_router(self) -> int:
        return self.hidden * self.experts if self.experts > 1 else 0

    @property
    def params_norm(self) -> int:
        return 2 * self.hidden if self.norm == "layernorm" else self.hidden

    @property
    def params_layer(self) -> int:
        """All parameters of one block (every expert counted)."""
        return (
            self.params_attention
            + self.experts * self.params_expert
            + self.params_router
            + 2 * self.params_norm
        )

    @property
    def params_layer_active(self) -> int:
        """Parameters one token passes through in a block (only its active experts)."""
        return (
            self.params_attention
            + self.active_experts * self.params_expert
            + self.params_router
            + 2 * self.params_norm
        )

    @property
    def params_embedding(self) -> int:
        """Token table, the output head when untied, and learned positions."""
        table = self.vocab * self.hidden
        head = 0 if self.tied_embeddings else self.vocab * self.hidden
        positions = self.max_seq * self.hidden if self.learned_positions else 0
        return table + head + positions

    @property
    def params_total(self) -> int:
        return self.layers * self.params_layer + self.params_norm + self.params_embedding

    @property
    def params_non_embedding(self) -> int:
        """Blocks and the final norm: the N of Kaplan et al. and of PaLM's 6N."""
        return self.layers * self.params_layer + self.params_norm

    @property
    def params_active(self) -> int:
        """Parameters used per token (differs from total only for mixture-of-experts)."""
        return self.layers * self.params_layer_active + self.params_norm + self.params_embedding

    @property
    def params_layer_matmul_active(self) -> int:
        """Weights one token multiplies in a block: Q, K, V, output, its experts' FFNs, router.

        Biases and norm gains are added or scaled (about one FLOP per element of the
        activation), not multiplied against the token (two FLOPs per weight), so they are
        left out.
        """
        attention = 2 * self.hidden * self.q_dim + 2 * self.hidden * self.kv_dim
        mats = 2 if self.ffn_kind == "gelu" else 3
        ffn = mats * self.hidden * self.ffn_hidden
        return attention + self.active_experts * ffn + self.params_router

    @property
    def params_matmul(self) -> int:
        """Active weights that take part in a matrix multiply for each token.

        The blocks' matrices plus the output head (V·h, whether tied or not); the input
        table and learned positions are lookups, and biases and norm gains are not
        multiplied, so none of them is counted.
        """
        return self.layers * self.params_layer_matmul_active + self.vocab * self.hidden

    # ---- FLOPs ------------------------------------------------------------------------

    def attention_flops_per_token(self, seq_len: int) -> float:
        """Forward FLOPs of the scores Q·Kᵀ and the weighted sum over V, all layers.

        4·l·a·d·s, counted over the full s as PaLM does (ceiling.model.attention).
        """
        return self.layers * attention_flops(1, seq_len, self.q_dim)

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

    # ---- memory -----------------------------------------------------------------------

    def kv_bytes_per_token(self, dtype_bytes: float = 2) -> float:
        """KV cache per token: 2 (K and V) · l · k · d · bytes. GQA counts KV heads only."""
        return 2.0 * self.layers * self.kv_dim * dtype_bytes

    def weight_bytes(self, dtype_bytes: float = 2) -> float:
        return self.params_total * dtype_bytes

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
    try:
        value = float(t)
    except ValueError:
        raise InvalidInput(f"custom model: {key}={text!r} is not a number") from None
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
