"""Activation recomputation policies: which tensors a block keeps for its backward, which it
rebuilds, and what rebuilding costs.

A policy is one of
- ``none``: everything kept (Korthikanti et al. 2022, Table 2, "no recompute");
- ``selective``: the attention core (its s×s scores) rebuilt, the rest kept — Megatron-LM's
  ``--recompute-granularity selective`` (Korthikanti et al. 2022, section 5);
- ``full``: only the block input kept, the whole forward rebuilt in the backward;
- ``layers:N``: N layers of each pipeline stage fully rebuilt, the others keep everything —
  Megatron-LM's ``--recompute-method block --recompute-num-layers N``;
- ``ops:NAMES``: the outputs of the named ops kept, every other op of the block rebuilt
  from them and the block input (PyTorch's selective activation checkpointing with a
  save-list policy; MaxText's ``save_qkv_proj`` is ``ops:qkv``). Op names, in forward
  order: q, k, v (projections), attn (the attention core's output and row statistics),
  o (output projection), gate, up (FFN input projections; gate only in gated FFNs), down
  (FFN output projection). ``qkv`` stands for q+k+v; ``alternate`` keeps the attention output
  and every other linear layer's output counted from the first (torchtitan's per-op policy,
  ``mm`` outputs at odd positions: q, v, gate, down for SwiGLU; q, v, up for GELU).

Codes (what the search's arrays hold): 0, 1, 2 for none, selective, full; OPS_BASE + a
bitmask over OPS (bit ALTERNATE_BIT: the alternate preset) for ops; LAYERS_BASE + N for
layers:N.

What a rebuilt op costs: its forward again — a projection's GEMM (2 FLOPs per weight per
token), the attention kernel, and the pointwise kernels (norms, activation) that feed it.
The FFN output projection is never rebuilt: its output only feeds the residual, which the
next block keeps as its input.
"""

from __future__ import annotations

import numpy as np

from ceiling.errors import InvalidInput

MODES = ("none", "selective", "full")
OPS = ("q", "k", "v", "attn", "o", "gate", "up", "down")
ALTERNATE_BIT = len(OPS)
OPS_BASE = 3
LAYERS_BASE = 1024
MAX_LAYERS = 2**20  # beyond any model: layers:N above it is refused, not overflowed
_GROUPS = {"qkv": ("q", "k", "v")}
VALUES = (
    "none, selective, full, layers:N (1 ≤ N ≤ 2**20 layers per stage fully rebuilt) or ops:NAMES "
    "(outputs kept, '+'-joined: " + ", ".join((*OPS, "qkv", "alternate")) + ")"
)


def parse(text: str) -> str:
    """A policy as typed (`--fixed recompute=...`) -> its canonical value; InvalidInput if bad."""
    text = text.strip().lower()
    if text in MODES:
        return text
    kind, _, arg = text.partition(":")
    if kind == "layers" and arg.isdigit() and 1 <= int(arg) <= MAX_LAYERS:
        return f"layers:{int(arg)}"
    if kind == "ops" and arg:
        names: list[str] = []
        for name in arg.split("+"):
            name = name.strip()
            if name == "alternate" or name in OPS:
                names.append(name)
            elif name in _GROUPS:
                names.extend(_GROUPS[name])
            else:
                raise InvalidInput(f"recompute: unknown op {name!r} in {text!r}; ops: {VALUES}")
        order = (*OPS, "alternate")
        return "ops:" + "+".join(sorted(set(names), key=order.index))
    raise InvalidInput(f"recompute must be {VALUES}, got {text!r}")


def valid(value: object) -> bool:
    if not isinstance(value, str):
        return False
    try:
        return parse(value) == value
    except InvalidInput:
        return False


def encode(value: str) -> int:
    if value in MODES:
        return MODES.index(value)
    kind, _, arg = value.partition(":")
    if kind == "layers":
        return LAYERS_BASE + int(arg)
    mask = 0
    for name in arg.split("+"):
        mask |= 1 << (ALTERNATE_BIT if name == "alternate" else OPS.index(name))
    return OPS_BASE + mask


def decode(code) -> str:
    code = int(code)
    if code < OPS_BASE:
        return MODES[code]
    if code >= LAYERS_BASE:
        return f"layers:{code - LAYERS_BASE}"
    mask = code - OPS_BASE
    names = [name for i, name in enumerate((*OPS, "alternate")) if mask >> i & 1]
    return "ops:" + "+".join(names)


def layers_rebuilt(code, stage_layers):
    """Layers of a stage fully rebuilt: all for full, min(N, layers) for layers:N."""
    code = np.asarray(code)
    n = np.where(code >= LAYERS_BASE, code - LAYERS_BASE, 0)
    return np.where(code == 2, stage_layers, np.minimum(n, stage_layers))


def _kept_ops(ffn_mats: int, code):
    """Per op (OPS order), 1.0 where an ops policy keeps its output (arrays over codes)."""
    code = np.asarray(code)
    is_ops = (code >= OPS_BASE) & (code < LAYERS_BASE)
    mask = np.where(is_ops, code - OPS_BASE, 0)
    alternate = (mask >> ALTERNATE_BIT) & 1
    # Linear layers in forward order; the attention core is not one of them.
    linears = ("q", "k", "v", "o", "gate", "up", "down") if ffn_mats == 3 else (
        "q", "k", "v", "o", "up", "down")  # fmt: skip
    odd = {name for i, name in enumerate(linears) if i % 2 == 0} | {"attn"}
    kept = {}
    for i, name in enumerate(OPS):
        bit = (mask >> i) & 1
        kept[name] = np.where(is_ops, np.maximum(bit, alternate * (name in odd)), 0).astype(float)
    if ffn_mats != 3:
        kept["gate"] = np.zeros_like(kept["gate"])
    return is_ops, kept


def _per_code(code, fn):
    """fn over the distinct codes, spread back over the plans (thousands share a few)."""
    code = np.asarray(code)
    uniq, inv = np.unique(code, return_inverse=True)
    return tuple(np.asarray(v)[inv].reshape(code.shape) for v in fn(uniq))


def attention_widths_saved(sh, t):
    """Elements per token of (Q, K, V, the attention output) one device keeps for the
    attention kernel's backward, as arrays over t. MHA/GQA: q/t, k/t each for K and V (one
    KV head per device at least), q/t. Multi-head latent attention (Megatron-Core's
    MultiLatentAttention, heads split over t): Q and K of a·(d_nope + d_rope)/t (the rotary
    key every head shares is copied into each head's key before the kernel), V and the
    output of a·d_v/t."""
    t = np.asarray(t, dtype=float)
    if sh.kv_lora_rank:
        value = sh.value_dim / t
        return sh.q_dim / t, sh.kv_dim / t, value, value
    kv_dev = np.maximum(sh.kv_dim / t, sh.head_dim)
    return sh.q_dim / t, kv_dev, kv_dev, sh.q_dim / t


def mla_latent_bytes(sh, norms_kept: bool = True) -> float:
    """Bytes per token multi-head latent attention keeps of its latents (0 without MLA): the
    query latent (r_q wide, 0 when the query is not compressed) and the key-value latent
    (r_kv), 16-bit, each as its RMSNorm's input and, unless the norms are rebuilt
    (`norms_kept` False), that norm's output, the up-projection's input. The down-projections
    are replicated over the tensor-parallel ranks (Megatron-Core builds them as duplicated
    linear layers), so none of it splits over t."""
    return (4.0 if norms_kept else 2.0) * (sh.q_lora_rank + sh.kv_lora_rank)


def ops_kept(sh, code):
    """Per plan, arrays: (an ops policy, its attention output kept, FFN input-projection
    outputs kept (gate and up: 0, 1 or 2), the routed copies kept (either))."""

    def rows(codes):
        is_ops, kept = _kept_ops(sh.ffn_mats, codes)
        ffn = kept["gate"] + kept["up"]
        return is_ops.astype(float), kept["attn"], ffn, np.minimum(ffn, 1.0)

    return _per_code(code, rows)


def routed_copy_bytes(sh) -> float:
    """Bytes per token a MoE layer keeps of the routed copies its experts' first GEMM reads
    (k rows of 2h after the dispatch, for that GEMM's weight gradient), averaged over the
    layers; 0 for a dense model."""
    moe = sh.moe
    return 2.0 * sh.hidden * moe.top_k * moe.moe_share if moe is not None and moe.routed else 0.0


def ops_activation_bytes(sh, seq_len, t, sp, code, attention, dropout):
    """Bytes per token one block keeps under an ops policy (0 for other codes): the block
    input and dropout masks (as Korthikanti's count: 2h and h each, over t with sequence
    parallelism) and each kept op's output — Q, K and V as the attention kernel keeps them
    (`attention_widths_saved`), its output plus fp32 row statistics 4a/t with FlashAttention
    (the s×s scores' 5as/t bytes without), o and down 2h (over t with sequence parallelism),
    gate and up 2f/t per active expert. With MLA the latents stay (`mla_latent_bytes`, their
    norms rebuilt), so rebuilding Q, K or V re-runs only the up-projections. A MoE layer that
    keeps gate or up keeps their input too, the k routed copies after the dispatch (2h each),
    since rebuilding it would repeat the all-to-all."""
    t = np.asarray(t, dtype=float)
    sp = np.asarray(sp, dtype=bool) & (t > 1)
    h = sh.hidden
    drop = 1.0 if dropout else 0.0

    def coefficients(codes):
        _, kept = _kept_ops(sh.ffn_mats, codes)
        return (kept["o"] + kept["down"]) * 2.0 * h, kept["q"], kept["k"], kept["v"]

    residuals, q, k, v = _per_code(code, coefficients)
    on, attn, ffn, routed = ops_kept(sh, code)
    seq = on * (2.0 * h + 2.0 * drop * h) + residuals
    q_w, k_w, v_w, o_w = attention_widths_saved(sh, t)
    if attention == "flash":
        attn_out = 2.0 * o_w + 4.0 * sh.heads / t
    else:
        attn_out = 2.0 * o_w + (2.0 + 3.0 * drop) * sh.heads * float(seq_len) / t
    per_t = ffn * 2.0 * sh.ffn_active + routed * routed_copy_bytes(sh)
    kept = 2.0 * (q * q_w + k * k_w + v * v_w) + attn * attn_out + on * mla_latent_bytes(sh, False)
    return seq * np.where(sp, 1.0 / t, 1.0) + per_t / t + kept


def rebuilt_shares(sh, code, stage_layers):
    """What the backward re-runs, averaged over a stage's layers, as arrays:
    (share of the block's linear FLOPs, share of layers whose attention core is rebuilt,
    share whose pointwise kernels are rebuilt, tensor-parallel collectives rebuilt per layer).

    none 0, 0, 0, 0; selective 0, 1, 0, 0; full 1, 1, 1, 2 (the attention and MLP inputs
    gathered or reduced again); layers:N the full row times N/layers; ops: the unkept linear
    layers' share of the block's GEMM FLOPs (down never), the attention core unless kept,
    the pointwise kernels, and one collective per half of the block that rebuilds any GEMM."""
    code = np.asarray(code)
    layers = np.maximum(np.asarray(stage_layers, dtype=float), 1.0)
    full = np.asarray(layers_rebuilt(code, stage_layers), dtype=float) / layers
    weights, kept_always = _op_weights(sh)
    total = float(sum(weights.values())) + kept_always

    def ops_rows(codes):
        is_ops, kept = _kept_ops(sh.ffn_mats, codes)
        redo = {name: 1.0 - kept[name] for name in weights}
        linear = sum(redo[n] * w for n, w in weights.items() if n != "down") / total
        attn_side = np.maximum.reduce([redo["q"], redo["k"], redo["v"], redo["o"]])
        mlp_side = np.maximum(redo["up"], redo["gate"] * (sh.ffn_mats == 3))
        return is_ops, linear, 1.0 - kept["attn"], attn_side + mlp_side

    is_ops, linear_ops, attention_ops, collectives_ops = _per_code(code, ops_rows)
    linear = np.where(is_ops, linear_ops, full)
    attention = np.where(is_ops, attention_ops, np.where(code == 1, 1.0, full))
    pointwise = np.where(is_ops, 1.0, full)
    collectives = np.where(is_ops, collectives_ops, 2.0 * full)
    return linear, attention, pointwise, collectives


def _op_weights(sh) -> tuple[dict[str, float], float]:
    """Each op's weights (what rebuilding it re-multiplies per token) and the block's weights
    an ops policy never re-runs. MHA/GQA: q, k, v, o the projections. Multi-head latent
    attention keeps its latents (`ops_activation_bytes`), so q re-runs the query
    up-projection (r_q·a·(d_nope + d_rope); the whole query projection where it is not
    compressed), k and v the key-value up-projection's a·d_nope and a·d_v columns, and the
    down-projections (h·r_q, h·(r_kv + d_rope)) are never re-run."""
    h, f = sh.hidden, sh.ffn_active
    ffn = {"gate": h * f if sh.ffn_mats == 3 else 0.0, "up": h * f, "down": f * h}
    if not sh.kv_lora_rank:
        q, k = sh.q_dim, sh.kv_dim
        return {"q": h * q, "k": h * k, "v": h * k, "o": q * h, **ffn}, 0.0
    r_q, r_kv, value = sh.q_lora_rank, sh.kv_lora_rank, sh.value_dim
    nope = sh.heads * (sh.head_dim - sh.rope_dim)
    attention = {"q": (r_q or h) * sh.q_dim, "k": r_kv * nope, "v": r_kv * value, "o": value * h}
    return {**attention, **ffn}, float(h * r_q + h * (r_kv + sh.rope_dim))


def rebuilds_whole_layers(code):
    """Whether the backward rebuilds a layer's activations (their set is live once)."""
    code = np.asarray(code)
    return code >= 2


def explain(value: str, ffn_mats: int) -> dict[str, str]:
    """In words, what a policy keeps for the backward and what it rebuilds."""
    if value == "none":
        return {"kept": "every tensor the backward reads", "rebuilt": "nothing"}
    if value == "selective":
        return {
            "kept": "everything but the attention core's internals",
            "rebuilt": "the attention core (its s×s scores are not kept)",
        }
    if value == "full":
        return {"kept": "each layer's input", "rebuilt": "every layer's forward"}
    kind, _, arg = value.partition(":")
    if kind == "layers":
        return {
            "kept": f"the input of {arg} layers of each stage, everything in the others",
            "rebuilt": f"the forward of {arg} layers of each stage",
        }
    code = encode(value)
    _, kept = _kept_ops(ffn_mats, np.asarray([code]))
    names = [n for n in OPS if not (n == "gate" and ffn_mats != 3)]
    outputs = [n for n in names if kept[n][0]]
    redo = [n for n in names if not kept[n][0] and n != "down"]
    return {
        "kept": "each layer's input and the outputs of " + (", ".join(outputs) or "no op"),
        "rebuilt": ", ".join([*redo, "the norms and activation functions"]),
    }
