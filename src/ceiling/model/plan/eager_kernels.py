"""The memory traffic a transformer block's pointwise ops add when PyTorch runs them eagerly,
one kernel per op, instead of fused.

A fused stack (Megatron-Core with Transformer Engine, or torch.compile) reads a block's
16-bit activations once per norm, activation or residual and writes the result once: that is
what `costs.layer_elementwise_bytes_per_token` prices. Eager PyTorch (torchtitan's
Llama without torch.compile) launches one kernel per op, and each reads its inputs from HBM
and writes its output back. The ops as torchtitan's Llama runs them (torchtitan 9dec370,
``models/norms.py`` RMSNorm, ``models/llama/model.py``), per element of the tensor they act on:

- RMSNorm written as ops: ``x.float()``, ``pow(2)``, ``mean``, ``x * rsqrt(...)``,
  ``type_as(x)``, ``* weight`` (nn.LayerNorm is one native kernel even in eager: nothing extra);
- rotary embedding in complex fp32: ``float()``, the complex product, ``type_as`` on Q and K;
- grouped-query attention's ``repeat_kv``: K and V copied to every query head;
- the attention output's ``transpose(1, 2).contiguous()`` copy;
- the gated FFN's ``silu(w1 x) * w3 x``: two kernels where a fused one reads both inputs once;
- without a fused bias-dropout-add, dropout and the residual add as two kernels.

Byte counts per op: the forward reads each input and writes the output (2 bytes an element
16-bit, 4 fp32); the backward reads the output's gradient and the saved inputs it needs and
writes each input's gradient; a product with a per-row or per-column operand that needs a
gradient (the norm's inverse root, its weight) writes and reduces a full-size temporary; a
tensor used by two ops has its two gradients added (read both, write one). Per-row scalars
and the rotary table (cached, tiny) count nothing.
"""

from __future__ import annotations

import numpy as np

# One eager RMSNorm over 16-bit x, bytes per element of x (forward, backward):
#   x.float()   read 2 write 4 = 6;       backward read 4 write 2 = 6
#   pow(2)      read 4 write 4 = 8;       backward read grad 4, x 4, write 4 = 12
#   mean(-1)    read 4 = 4;               backward write the expanded gradient 4
#   x * rsqrt   read 4 write 4 = 8;       backward grad·r: read 4 write 4; the root's
#                                         gradient: read grad 4 and x 4, write 4, reduce 4: 24
#   type_as(x)  read 4 write 2 = 6;       backward read 2 write 4 = 6
#   * weight    read 2 write 2 = 4;       backward grad·w: 4; the weight's gradient: 8: 12
#   x's two gradients added:              read 8 write 4 = 12
# 36 forward, 76 backward; a fused RMSNorm is priced at 4 each way (read 2, write 2).
RMSNORM_EAGER = (36.0, 76.0)
# The complex rotary embedding on a 16-bit tensor: float() 6, complex product 8 (read 4,
# write 4), type_as 6 = 20 forward; the backward mirrors each (6 + 8 + 6).
ROTARY_EAGER = (20.0, 20.0)
# SwiGLU's two kernels, bytes per element of the FFN width: silu read 2 write 2 = 4,
# backward read grad, input, write = 6; the product read 4 write 2 = 6, backward read grad
# and both inputs, write both gradients = 10. A fused kernel is priced at 6 each way.
SWIGLU_EAGER = (10.0, 16.0)
FUSED_GATED_FFN = 6.0


def eager_extra_bytes_per_token(sh, t, sp, dropout: bool):
    """HBM bytes per token one block's eager pointwise ops move beyond the fused kernels
    `costs.layer_elementwise_bytes_per_token` prices: (forward, backward), on one of
    t tensor-parallel devices (norms and residuals split over t with sequence parallelism)."""
    t = np.asarray(t, dtype=float)
    sp = np.asarray(sp, dtype=bool) & (t > 1)
    h = sh.hidden
    q_dev = sh.q_dim / t
    kv_dev = np.maximum(sh.kv_dim / t, sh.head_dim)
    fused_norm = 4.0
    norm = np.array(RMSNORM_EAGER) - fused_norm if sh.rmsnorm else np.zeros(2)
    # Two eager kernels where a fused bias-dropout-add is one: dropout reads 2, writes 2 and
    # its 1-byte mask before the add; its backward reads the gradient and mask, writes 2.
    drop = np.array((4.0, 5.0)) if dropout else np.zeros(2)
    unsplit = 2 * h * (norm + drop)  # two norms and two residuals per block
    rotary = np.array(ROTARY_EAGER) if sh.rotary else np.zeros(2)
    # repeat_kv copies K and V (read the KV width, write the query width); the backward
    # sums the copies back. The attention output's contiguous copy reads and writes q.
    repeat = np.where(kv_dev < q_dev, 2.0 * (2.0 * kv_dev + 2.0 * q_dev), 0.0)
    ffn_width = sh.ffn_active / t
    gated = np.array(SWIGLU_EAGER) - FUSED_GATED_FFN if sh.ffn_mats == 3 else np.zeros(2)
    out = []
    for k in range(2):
        split = rotary[k] * (q_dev + kv_dev) + repeat + 4.0 * q_dev + gated[k] * ffn_width
        out.append(np.where(sp, unsplit[k] / t, unsplit[k]) + split)
    return out[0], out[1]
