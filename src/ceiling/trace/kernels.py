"""What a device kernel is, from its name alone: its category, the bound that category
implies, and the precision a GEMM or convolution ran in.

Kernel names are how cuBLAS, cuDNN, CUTLASS, NCCL, FlashAttention, Triton/inductor and
PyTorch's own ATen kernels identify themselves; they stay readable when the trace recorded
no shapes and the launching op has no cost rule. Pure.
"""

from __future__ import annotations

import re

from ceiling.trace.events import MEMCPY, MEMSET, collective_op, is_comm_kernel

GEMM, CONV, ATTENTION = "GEMM", "convolution", "attention"
ELEMENTWISE, NORM, REDUCTION, OPTIMIZER = "elementwise", "normalization", "reduction", "optimizer"
OTHER = "other"
COMPUTE_CATEGORIES = (GEMM, CONV, ATTENTION)
MEMORY_CATEGORIES = (ELEMENTWISE, NORM, REDUCTION, OPTIMIZER)

# Checked in this order: the first family whose pattern is in the lower-cased name wins.
_FAMILIES: tuple[tuple[str, re.Pattern], ...] = tuple(
    (category, re.compile(pattern))
    for category, pattern in (
        (ATTENTION, r"flash|fmha|attention|attn|sdpa|_mha_"),
        (NORM, r"bn_fw|bn_bw|batch_?norm|layer_?norm|rms_?norm|group_?norm|instance_?norm"),
        (OPTIMIZER, r"adam|sgd|lamb(?!da)|adagrad|_foreach|multi_tensor_apply"),
        (ELEMENTWISE, r"nchwtonhwc|nhwctonchw|transpose|permute|pool"),
        # cuDNN's FFT convolutions multiply in the frequency domain with complex GEMMs
        # (volta_cgemm, ampere_gcgemm): convolution work, not the model's matmuls
        (CONV, r"conv(?!ert)|fprop|dgrad|wgrad|scudnn|fft2d|fft_|winograd|implicit_gemm|_g?cgemm"),
        (GEMM, r"gemm|gemv|matmul|bmm|cublas|cutlass|xmma|nvjet|triton_tem|_dot_|^cijk_"),
        (REDUCTION, r"reduce|softmax|triton_red|triton_per|norm_kernel|sum_kernel"),
        (
            ELEMENTWISE,
            r"elementwise|triton_poi|copy|fill|cat_|catarray|index|gather|scatter|embedding",
        ),
    )
)

# The precision in a GEMM/convolution kernel's name. FP8 and BF16 are looked for before FP16
# ("bf16" contains "f16"); CUTLASS/cuBLAS name tensor-core TF32 kernels with an "s" (single)
# operand and an MMA shape (s1688, s16816), FP32 SIMT kernels "sgemm"/"scudnn".
_PRECISIONS: tuple[tuple[str, re.Pattern], ...] = tuple(
    (dtype, re.compile(pattern))
    for dtype, pattern in (
        ("fp8", r"e4m3|e5m2|fp8|f8f8"),
        ("bf16", r"bf16|bfloat16"),
        ("fp16", r"h1688|h16816|h884|h884gemm|hgemm|fp16|f16f16|half"),
        ("tf32", r"tf32|s1688|s16816|tensorop_s"),
        ("int8", r"i8816|i16832|imma|int8"),
        ("fp32", r"sgemm|scudnn|gcgemm|cgemm|sgemv|\bfloat\b"),
    )
)
# AMD Tensile GEMMs: Cijk_<A layout>_<B layout>_<types>_..., the types' first letter
_TENSILE = re.compile(r"cijk_a[a-z]+_b[a-z]+_([a-z0-9]+)_")
_TENSILE_TYPES = {"s": "fp32", "h": "fp16", "b": "bf16", "d": "fp64", "i": "int8", "f": "fp8"}


def _function(low: str) -> tuple[str, str]:
    """('function name', 'its template arguments'): a kernel's category is in its name,
    not in the types it is instantiated with (fbgemm_gpu:: inside an embedding kernel's
    arguments is no GEMM); a generic launcher (cutlass::Kernel<...>) names it in the first."""
    low = low.removeprefix("void ").replace("(anonymous namespace)", "anon")
    # a library's namespace is no family: fbgemm_gpu::permute_2d_data_kernel moves data
    low = low.removeprefix("fbgemm_gpu::").removeprefix("fbgemm::")
    head = low.split("(", 1)[0]
    fn, _, rest = head.partition("<")
    return fn, rest


def category(name: str, cat: str) -> str:
    """'GEMM', 'attention', 'NCCL all_reduce', 'memcpy HtoD', 'memset', 'elementwise', ..."""
    if cat == MEMCPY:
        m = re.search(r"[HDP]to[HDP]", name)
        return f"memcpy {m.group(0)}" if m else "memcpy"
    if cat == MEMSET:
        return "memset"
    if is_comm_kernel(name):
        return f"NCCL {collective_op(name) or 'other'}"
    fn, template = _function(name.lower())
    for text in (fn, template.split(",", 1)[0]):
        for family, pattern in _FAMILIES:
            if pattern.search(text):
                return family
    return OTHER


def is_compute(kernel_category: str) -> bool:
    return kernel_category in COMPUTE_CATEGORIES


def is_memory(kernel_category: str) -> bool:
    return kernel_category in MEMORY_CATEGORIES or kernel_category.startswith(("memcpy", "memset"))


def precision(name: str) -> str | None:
    """The dtype key of the peak a GEMM, convolution or attention kernel ran against, when
    its name says; None otherwise."""
    low = name.lower()
    if m := _TENSILE.match(low):
        return _TENSILE_TYPES.get(m.group(1)[0])
    for dtype, pattern in _PRECISIONS:
        if pattern.search(low):
            return dtype
    return None
