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


def ops_activation_bytes(sh, seq_len, t, sp, code, attention, dropout):
    """Bytes per token one block keeps under an ops policy (0 for other codes): the block
    input and dropout masks (as Korthikanti's count: 2h and h each, over t with sequence
    parallelism) and each kept op's output — Q 2q/t, K and V 2k/t each (one KV head per device
    at least), attention output 2q/t plus fp32 row statistics 4a/t with FlashAttention (the
    s×s scores' 5as/t bytes without), o and down 2h (over t with sequence parallelism), gate
    and up 2f/t per active expert."""
    t = np.asarray(t, dtype=float)
    sp = np.asarray(sp, dtype=bool) & (t > 1)
    h = sh.hidden
    drop = 1.0 if dropout else 0.0

    def coefficients(codes):
        is_ops, kept = _kept_ops(sh.ffn_mats, codes)
        on = is_ops.astype(float)
        seq = on * (2.0 * h + 2.0 * drop * h) + (kept["o"] + kept["down"]) * 2.0 * h
        return seq, kept["q"], kept["k"] + kept["v"], kept["attn"], kept["gate"] + kept["up"]

    seq, q, kv, attn, ffn = _per_code(code, coefficients)
    if attention == "flash":
        attn_out = 2.0 * sh.q_dim + 4.0 * sh.heads
    else:
        attn_out = 2.0 * sh.q_dim + (2.0 + 3.0 * drop) * sh.heads * float(seq_len)
    kv_dev = np.maximum(sh.kv_dim / t, sh.head_dim)
    per_t = q * 2.0 * sh.q_dim + attn * attn_out + ffn * 2.0 * sh.ffn_active
    return seq * np.where(sp, 1.0 / t, 1.0) + per_t / t + kv * 2.0 * kv_dev


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
    h, q, k = sh.hidden, sh.q_dim, sh.kv_dim
    f = sh.ffn_active
    weights = {"q": h * q, "k": h * k, "v": h * k, "o": q * h, "gate": h * f if
               sh.ffn_mats == 3 else 0.0, "up": h * f, "down": f * h}  # fmt: skip
    total = float(sum(weights.values()))

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
