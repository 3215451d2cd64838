"""Recurrent layers against their analytic count: each weight matrix meets each token once
per direction (2 FLOPs per multiply-add), the backward twice more (a multiply-add counted
as 2)."""

import pytest
import torch
from torch import nn

from ceiling.profile import rnn_flops
from ceiling.profile.recorder import OpRecorder

B, T, IN, HID = 3, 5, 8, 16


def _step(layer: nn.Module, x, train: bool = True) -> OpRecorder:
    with OpRecorder() as rec:
        if train:
            layer(x)[0].sum().backward()
        else:
            with torch.no_grad():
                layer(x)
    return rec


def _lstm_forward(layers: int, directions: int, tokens: int = B * T) -> int:
    gates = 4 * HID
    first = gates * IN + gates * HID
    later = gates * HID * directions + gates * HID
    return 2 * tokens * directions * (first + (layers - 1) * later)


@pytest.mark.parametrize("bidirectional", [False, True])
def test_lstm_training_step(bidirectional):
    lstm = nn.LSTM(IN, HID, num_layers=2, batch_first=True, bidirectional=bidirectional)
    rec = _step(lstm, torch.randn(B, T, IN, requires_grad=True))
    forward = _lstm_forward(2, 2 if bidirectional else 1)
    assert forward == (107_520 if not bidirectional else 276_480)
    assert rec.model_flops() == 3 * forward
    assert not [c.op for c in rec.calls if c.category == "unknown"]


def test_lstm_inference_and_packed_sequences():
    lstm = nn.LSTM(IN, HID, num_layers=1)
    assert _step(lstm, torch.randn(T, B, IN), train=False).model_flops() == _lstm_forward(1, 1)
    lengths = [5, 3, 2]  # the packed rows: 10 tokens, not 15
    packed = nn.utils.rnn.pack_padded_sequence(torch.randn(T, B, IN), lengths)
    rec = _step(lstm, packed, train=False)
    assert rec.model_flops() == _lstm_forward(1, 1, tokens=sum(lengths))


@pytest.mark.parametrize(("cls", "gates"), [(nn.GRU, 3), (nn.RNN, 1)])
def test_gru_and_rnn_training_steps(cls, gates):
    layer = cls(IN, HID, num_layers=2)
    rec = _step(layer, torch.randn(T, B, IN, requires_grad=True))
    g = gates * HID
    forward = 2 * B * T * (g * IN + g * HID + g * HID + g * HID)
    # decomposed into matmuls on a CPU: the initial state (zeros) needs no gradient, so the
    # first step's product with W_hh has no backward for it, in either layer
    unused = 2 * 2 * B * g * HID
    assert rec.model_flops() == 3 * forward - unused
    assert not [c.op for c in rec.calls if c.category == "unknown"]  # unsafe_split, transpose_


def test_cudnn_rnn_formula_from_the_weight_list():
    # a 2-layer bidirectional LSTM with proj_size 4: per layer and direction W_ih, W_hh
    # (4H × proj), W_hr (proj × H) and two biases (left out)
    proj, gates = 4, 4 * HID
    weights = []
    for layer_in in (IN, IN, 2 * proj, 2 * proj):
        weights += [torch.empty(gates, layer_in), torch.empty(gates, proj)]
        weights += [torch.empty(gates), torch.empty(gates), torch.empty(proj, HID)]
    x = torch.empty(T, B, IN)
    func = torch.ops.aten._cudnn_rnn.default
    args = [x, weights, 5, None, torch.empty(4, B, proj), torch.empty(4, B, HID), 2, HID, proj]
    args += [2, False, 0.0, True, True, [], None]
    per_token = 2 * (gates * IN + gates * proj + proj * HID) + 2 * (
        gates * 2 * proj + gates * proj + proj * HID
    )
    assert rnn_flops.fused_layers(func, args, {}).flops == 2 * B * T * per_token
    backward = torch.ops.aten._cudnn_rnn_backward.default
    names = [a.name for a in backward._schema.arguments]
    kwargs = {"input": x, "weight": weights, "output_mask": [True, False, False, True]}
    assert "output_mask" in names
    assert rnn_flops.fused_layers_backward(backward, [], kwargs).flops == 4 * B * T * per_token
    kwargs["output_mask"] = [False, False, False, True]  # weights only
    assert rnn_flops.fused_layers_backward(backward, [], kwargs).flops == 2 * B * T * per_token
