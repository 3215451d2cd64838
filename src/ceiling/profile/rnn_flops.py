"""FLOPs of fused recurrent layers (RNN, LSTM, GRU), a multiply-add counted as 2.

Every step of a recurrent layer multiplies its input by W_ih, its previous hidden state by
W_hh (and, for an LSTM with `proj_size`, the new state by W_hr), each once per token and
direction. So a layer's forward is 2 · tokens · (the elements of its weight matrices),
whatever the gate count (4 for an LSTM, 3 for a GRU, 1 for a plain RNN) or direction: the
gates are in the matrices' rows. Tokens are sequence × batch, or the packed rows of a
PackedSequence. Its backward repeats that product twice: once for the gradients of the
inputs and hidden states, once for the weights' (each dropped when not asked for).

- `mkldnn_rnn_layer` and its backward: one layer, one direction per call (an LSTM on a CPU).
- `_cudnn_rnn`, `miopen_rnn` and their backward: every layer and direction in one call, the
  weights a list of weight_stride0 tensors per layer and direction.

The gate nonlinearities and the cell update inside the kernels (a few FLOPs per hidden
unit) are left out, as for the other fused layers: the matmul peak describes the rest.
"""

from __future__ import annotations

import torch

from ceiling.profile.fused_flops import FusedCount, argument


def _tokens(x: torch.Tensor) -> int:
    """Rows the layer runs: (seq, batch, features) or batch-first, or packed (rows, features)."""
    return x.numel() // int(x.shape[-1]) if x.dim() else 0


def _matrix_elements(weights) -> int:
    return sum(w.numel() for w in weights if isinstance(w, torch.Tensor) and w.dim() == 2)


def mkldnn_layer(func, args, kwargs) -> FusedCount:
    x = argument(func, args, kwargs, "input")
    weights = [argument(func, args, kwargs, f"weight{i}") for i in range(2)]
    return FusedCount(2.0 * _tokens(x) * _matrix_elements(weights), 0.0, True)


def mkldnn_layer_backward(func, args, kwargs) -> FusedCount:
    x = argument(func, args, kwargs, "input")
    weights = [argument(func, args, kwargs, f"weight{i}") for i in (1, 2)]
    # the kernel returns every gradient: inputs, hidden states and weights
    return FusedCount(2.0 * 2.0 * _tokens(x) * _matrix_elements(weights), 0.0, True)


def fused_layers(func, args, kwargs) -> FusedCount:
    x = argument(func, args, kwargs, "input")
    weights = argument(func, args, kwargs, "weight") or []
    return FusedCount(2.0 * _tokens(x) * _matrix_elements(weights), 0.0, True)


def fused_layers_backward(func, args, kwargs) -> FusedCount:
    forward = fused_layers(func, args, kwargs).flops
    mask = argument(func, args, kwargs, "output_mask") or [True] * 4
    passes = int(any(mask[:3])) + int(bool(mask[3]))  # data gradients, weight gradients
    return FusedCount(forward * passes, 0.0, True)


FORMULAS = {
    "mkldnn_rnn_layer": ("matmul", mkldnn_layer),
    "mkldnn_rnn_layer_backward": ("matmul", mkldnn_layer_backward),
    "_cudnn_rnn": ("matmul", fused_layers),
    "_cudnn_rnn_backward": ("matmul", fused_layers_backward),
    "miopen_rnn": ("matmul", fused_layers),
    "miopen_rnn_backward": ("matmul", fused_layers_backward),
}
