"""What share of the 16-bit peak a fused attention kernel reaches, as a function of the
kernel, the head dimension, causal masking and the sequence length one device attends over.

Measured curves, TFLOP/s on one H100 80GB SXM5 (989 TFLOP/s dense BF16), BF16, batch × seqlen
= 16k tokens, 2,048 hidden: Shah et al. 2024, "FlashAttention-3", Fig. 5 (forward; causal and
not) and Fig. 6 (backward, not causal), for FlashAttention-2, cuDNN (9.x, what Transformer
Engine's FusedAttention runs on Hopper) and FlashAttention-3, sequence lengths 512 to 16k. FLOPs
are counted as the paper counts them: 4·s²·d·heads forward (half of it when causal), the backward
2.5 times the forward.

A training step runs each layer's attention forward once and backward once (and forward again
where recomputed); the planner prices attention FLOPs as 3 × forward (`compute`), so the share
it needs is 3 / (1/r_fwd + 2.5/r_bwd) over the peak. The paper publishes the backward without
causal masking only: a causal backward is taken at the non-causal one times the forward's
causal/non-causal ratio at that length (the same diagonal blocks and tail waves cost both).
Head dims between 64 and 128 interpolate; above 128 take 128's (a conservative plateau: the
paper's 256 is faster still); lengths interpolate in log2(s) and hold their 16k value beyond.

Devices without a published curve (Ampere, Blackwell, AMD) keep one number per device
(`clusters.toml` attention_efficiency, with its source).
"""

from __future__ import annotations

import numpy as np

KERNELS = ("auto", "fa2", "fa3", "cudnn")
H100_PEAK = 989e12  # the dense BF16 peak the curves were measured against
_SEQ = (512, 1024, 2048, 4096, 8192, 16384)

# (kernel, head dim, causal) -> forward TFLOP/s at _SEQ (FlashAttention-3 paper, Fig. 5).
_FORWARD = {
    ("fa2", 64, False): (282, 306, 318, 321, 322, 324),
    ("cudnn", 64, False): (335, 373, 395, 408, 412, 413),
    ("fa3", 64, False): (333, 392, 460, 476, 496, 497),
    ("fa2", 64, True): (180, 229, 262, 284, 295, 299),
    ("cudnn", 64, True): (225, 288, 334, 363, 379, 388),
    ("fa3", 64, True): (197, 265, 371, 420, 460, 473),
    ("fa2", 128, False): (309, 350, 362, 368, 370, 370),
    ("cudnn", 128, False): (497, 574, 617, 609, 600, 595),
    ("fa3", 128, False): (467, 565, 625, 638, 646, 648),
    ("fa2", 128, True): (191, 260, 298, 319, 333, 335),
    ("cudnn", 128, True): (315, 410, 484, 518, 529, 539),
    ("fa3", 128, True): (292, 423, 521, 579, 602, 616),
}
# kernel -> backward TFLOP/s, head dim 128, not causal (FlashAttention-3 paper, Fig. 6).
_BACKWARD = {
    "fa2": (214, 260, 291, 310, 318, 322),
    "cudnn": (305, 408, 465, 499, 518, 516),
    "fa3": (316, 424, 501, 542, 559, 561),
}


def has_curves(device) -> bool:
    """Whether the device's attention kernels have published curves: Hopper (sm_90: H100,
    H200, H800, GH200) — the same SMs and tensor cores the curves were measured on."""
    return getattr(device, "compute_capability", None) == "9.0"


def default_kernel(framework: str = "megatron") -> str:
    """The kernel a framework runs on Hopper: Transformer Engine's cuDNN fused attention
    (Megatron-Core, NeMo), PyTorch SDPA's flash backend, FlashAttention-2 (torchtitan, and
    the Hugging Face models DeepSpeed trains)."""
    return "fa2" if framework in ("torchtitan", "deepspeed") else "cudnn"


def _curve(table, seq):
    x = np.log2(np.clip(np.asarray(seq, dtype=float), _SEQ[0], _SEQ[-1]))
    return np.interp(x, np.log2(_SEQ), np.asarray(table, dtype=float)) * 1e12


def _forward(kernel, head_dim, causal, seq):
    lo = _curve(_FORWARD[(kernel, 64, causal)], seq)
    hi = _curve(_FORWARD[(kernel, 128, causal)], seq)
    w = np.clip((head_dim - 64) / 64.0, 0.0, 1.0)
    return lo + w * (hi - lo)


def attention_share(kernel: str, head_dim: int, seq, causal: bool = True):
    """Share of the H100's dense BF16 peak that a layer's attention reaches over forward and
    backward (3 × forward FLOPs in the time of a forward and a backward), at `seq` tokens a
    device attends over (arrays allowed)."""
    fwd = _forward(kernel, head_dim, causal, seq)
    plain = _forward(kernel, head_dim, False, seq)
    # Smaller head dims run the backward at the forward's ratio to head dim 128 (the paper's
    # head-dim-64 backward stops short of 16k), causal masking at the forward's ratio too.
    bwd = _curve(_BACKWARD[kernel], seq) * plain / _forward(kernel, 128, False, seq)
    bwd = bwd * fwd / plain
    return 3.0 / (1.0 / fwd + 2.5 / bwd) / H100_PEAK
