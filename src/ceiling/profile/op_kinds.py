"""The aten ops `profile.op_flops` counts by name, as tables: per-element costs (exact and
estimated), reductions, fused attention kernels the registry does or does not know, and the
ops that move or relabel memory or do no work at all. Names only: no torch here."""

from __future__ import annotations

# Fused attention ops, forward and backward, whose FLOPs the registry does not know.
CPU_ATTENTION = {
    "_scaled_dot_product_flash_attention_for_cpu": "forward",
    "_scaled_dot_product_flash_attention_for_cpu_backward": "backward",
    "_scaled_dot_product_fused_attention_overrideable": "forward",
    "_scaled_dot_product_fused_attention_overrideable_backward": "backward",
}
REGISTRY_ATTENTION = {
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_efficient_attention_backward",
    "_scaled_dot_product_flash_attention_backward",
    "_scaled_dot_product_cudnn_attention_backward",
    "_flash_attention_forward",
    "_efficient_attention_forward",
    "_flash_attention_backward",
    "_efficient_attention_backward",
}

# FLOPs per output element. Values of 1 are exact under the 1-per-element convention.
PER_ELEMENT_EXACT = {
    name: 1.0
    for name in [
        "add",
        "sub",
        "rsub",
        "mul",
        "div",
        "neg",
        "abs",
        "reciprocal",
        "sqrt",
        "rsqrt",
        "exp",
        "exp2",
        "expm1",
        "log",
        "log2",
        "log1p",
        "sin",
        "cos",
        "tan",
        "tanh",
        "sigmoid",
        "relu",
        "threshold",
        "threshold_backward",
        "pow",
        "maximum",
        "minimum",
        "clamp",
        "clamp_min",
        "clamp_max",
        "where",
        "eq",
        "ne",
        "lt",
        "gt",
        "le",
        "ge",
        "masked_fill",
        "sign",
        "floor",
        "ceil",
        "round",
        "trunc",
        "erf",
        "erfc",
        "square",
        "logical_not",
        "logical_and",
        "logical_or",
        "logical_xor",
        "bitwise_not",
        "bitwise_and",  # mask building: a logical operation per element
        "bitwise_or",
        "bitwise_xor",
        "isnan",
        "isinf",
        "isfinite",
        "remainder",
        "fmod",
        "floor_divide",
        "sigmoid_backward",
        "tanh_backward",
        "hardtanh_backward",
        "leaky_relu",
        "leaky_relu_backward",
        "relu6",
        "hardtanh",
    ]
}
PER_ELEMENT_EXACT.update({"addcmul": 2.0, "addcdiv": 2.0, "lerp": 2.0})
# (input - target) · (2/n) · grad: a subtract and two multiplies per element
PER_ELEMENT_EXACT["mse_loss_backward"] = 3.0

# Losses that pick one entry per target from a (batch, classes) input: they touch as many
# elements as there are targets, not the whole input.
NLL_LOSSES = {"nll_loss_forward", "nll_loss2d_forward", "nll_loss_backward", "nll_loss2d_backward"}
REDUCTION_MEAN = 1  # at::Reduction: 0 none, 1 mean, 2 sum

# Composite activations and normalisations: the count of arithmetic steps in the usual
# formulation, per element. Kernels differ, so these are estimates.
PER_ELEMENT_ESTIMATED = {
    "gelu": ("elementwise", 8.0),  # 0.5·x·(1 + tanh(√(2/π)(x + 0.044715x³)))
    "gelu_backward": ("elementwise", 12.0),
    "silu": ("elementwise", 4.0),  # x · 1/(1+e^-x)
    "silu_backward": ("elementwise", 6.0),
    "mish": ("elementwise", 6.0),
    "hardswish": ("elementwise", 4.0),
    "elu": ("elementwise", 4.0),
    "softplus": ("elementwise", 4.0),
    "softplus_backward": ("elementwise", 4.0),  # grad · sigmoid(βx)
    "dropout": ("elementwise", 2.0),
    "native_dropout": ("elementwise", 2.0),
    "native_dropout_backward": ("elementwise", 2.0),
    "_softmax": ("norm", 5.0),  # max, subtract, exp, sum, divide
    "_safe_softmax": ("norm", 5.0),
    "_log_softmax": ("norm", 5.0),
    "_softmax_backward_data": ("norm", 4.0),
    "_log_softmax_backward_data": ("norm", 4.0),
    "native_layer_norm": ("norm", 8.0),  # mean, centre, square, sum, rsqrt-scale, affine
    "native_layer_norm_backward": ("norm", 16.0),
    "native_group_norm": ("norm", 8.0),
    "native_group_norm_backward": ("norm", 16.0),
    "native_batch_norm": ("norm", 8.0),
    "_native_batch_norm_legit": ("norm", 8.0),
    "_native_batch_norm_legit_no_training": ("norm", 4.0),
    "native_batch_norm_backward": ("norm", 16.0),
    "_fused_rms_norm": ("norm", 5.0),  # square, mean, rsqrt-scale, weight
    "_fused_rms_norm_backward": ("norm", 10.0),
    "_fused_adam": ("elementwise", 16.0),  # moments, bias correction, update, weight decay
    "_fused_adamw": ("elementwise", 16.0),
    "_fused_sgd": ("elementwise", 4.0),
    # a fused LSTM/GRU cell's gates and state update, per element of its outputs
    "_thnn_fused_lstm_cell": ("elementwise", 2.0),
    "_thnn_fused_lstm_cell_backward_impl": ("elementwise", 2.0),
    "_thnn_fused_gru_cell": ("elementwise", 3.0),
    "_thnn_fused_gru_cell_backward": ("elementwise", 2.0),
}

REDUCTIONS = {
    "sum": True,  # exact: n - k adds to reduce n elements to k
    "mean": True,  # n - k adds and k divides
    "amax": False,
    "amin": False,
    "max": False,
    "min": False,
    "prod": False,
    "var": False,
    "std": False,
    "var_mean": False,
    "std_mean": False,
    "norm": False,
    "linalg_vector_norm": False,
    "logsumexp": False,
    "cumsum": False,
    "all": False,
    "any": False,
    "histc": False,
    "argmax": False,
    "argmin": False,
    "embedding_dense_backward": False,
    # pooling: about one compare or add per input element (windows rarely overlap much)
    "max_pool2d_with_indices": False,
    "max_pool2d_with_indices_backward": False,
    "max_pool3d_with_indices": False,
    "avg_pool2d": False,
    "avg_pool2d_backward": False,
    "_adaptive_avg_pool2d": False,
    "_adaptive_avg_pool2d_backward": False,
}

# Ops that move or allocate memory without arithmetic.
MEMORY_OPS = set(
    [
        "copy",
        "_to_copy",
        "clone",
        "contiguous",
        "cat",
        "stack",
        "index_select",
        "gather",
        "scatter",
        "scatter_add",
        "index",
        "index_put",
        "index_add",
        "embedding",
        "fill",
        "zero",
        "zeros",
        "zeros_like",
        "ones",
        "ones_like",
        "full",
        "full_like",
        "empty",
        "empty_like",
        "empty_strided",
        "new_empty",
        "new_empty_strided",
        "new_zeros",
        "new_ones",
        "new_full",
        "arange",
        "randn",
        "rand",
        "randint",
        "normal",
        "uniform",
        "bernoulli",
        "masked_select",
        "constant_pad_nd",
        "flip",
        "roll",
        "repeat",
        "tril",
        "triu",
        "_local_scalar_dense",
        "lift_fresh",
        "lift_fresh_copy",
        "scalar_tensor",
        "slice_scatter",
        "select_scatter",
        "split_with_sizes_copy",
        "slice_backward",
        "select_backward",
        "index_select_backward",
        "unbind_copy",
        "_unsafe_index",
        "topk",
        "sort",
        # nested tensors of nn.TransformerEncoder's fast path: packing and unpacking rows
        "_nested_tensor_from_mask",
        "_nested_from_padded",
        "_nested_from_padded_and_nested_example",
        "_nested_tensor_from_tensor_list",
        "to_padded_tensor",
    ]
)


# Checks and bookkeeping that do no arithmetic and move no data worth counting.
NO_WORK = {
    "_assert_async",
    "_assert_scalar",
    "_assert_tensor_metadata",
    "_functional_assert_async",
    "_functional_assert_scalar",
    "sym_constrain_range",
    "sym_constrain_range_for_size",
    "record_stream",
    "_has_compatible_shallow_copy_type",
    "is_same_size",
    "is_nonzero",
    "_nested_tensor_size",
    "_nested_tensor_strides",
    "_nested_tensor_storage_offsets",
    "_nested_tensor_from_mask_left_aligned",
}

# Not flagged as views by their schema, but they only relabel an existing buffer.
FREE_OPS = {
    "_unsafe_view",
    "lift_fresh",
    "alias",
    "_reshape_alias",
    "set_",
    "resize_",
    # in-place and unsafe variants of views (GRU cells split their gates with unsafe_split)
    "transpose_",
    "t_",
    "as_strided_",
    "unsqueeze_",
    "squeeze_",
    "swapdims_",
    "swapaxes_",
    "detach_",
    "unsafe_split",
    "unsafe_split_with_sizes",
    "unsafe_chunk",
}
