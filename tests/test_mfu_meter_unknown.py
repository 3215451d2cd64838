"""`ceiling.MfuMeter` says when MFU is a lower bound: the ops of the counted step whose
arithmetic has no count are named; a recurrent model is counted in full."""

import pytest
import torch
from torch import nn

import ceiling

_LIB = torch.library.Library("ceilingmeter", "DEF")
_LIB.define("mix(Tensor x) -> Tensor")
_LIB.impl("mix", lambda x: x @ x.T, "CPU")  # a matmul the recorder cannot see into


def _loop(meter, model, x, steps: int = 3, extra=None) -> None:
    for _ in range(steps):
        with meter.step(x):
            out = model(x)
            out = out[0] if isinstance(out, tuple) else out
            out.pow(2).mean().backward()
            if extra is not None:
                extra(out.detach())


def test_a_pure_lstm_is_counted_in_full():
    torch.manual_seed(0)
    lstm = nn.LSTM(16, 32, num_layers=2, batch_first=True)
    x = torch.randn(4, 10, 16)
    meter = ceiling.MfuMeter(lstm, peak_flops_per_s=1e12)
    _loop(meter, lstm, x)
    r = meter.result()
    gates, tokens = 4 * 32, 4 * 10
    forward = 2 * tokens * (gates * 16 + gates * 32 + gates * 32 + gates * 32)
    assert r.model_flops_per_step == 3 * forward
    assert r.unknown_ops == () and not r.mfu_is_lower_bound and not meter.mfu_is_lower_bound
    assert r.to_dict()["mfu_is_lower_bound"] is False and "at least" not in r.heading()


def test_ops_it_cannot_count_are_named_and_mfu_is_a_lower_bound():
    model, x = nn.Linear(8, 8), torch.randn(4, 8)
    meter = ceiling.MfuMeter(model, peak_flops_per_s=1e12)
    _loop(meter, model, x, extra=torch.ops.ceilingmeter.mix)
    r = meter.result()
    assert meter.unknown_ops == r.unknown_ops == ("ceilingmeter.mix",)
    assert r.mfu_is_lower_bound and r.to_dict()["unknown_ops"] == ["ceilingmeter.mix"]
    assert r.heading().startswith("MFU at least ")


def test_a_step_only_of_ops_it_cannot_count_says_which_and_what_to_give():
    meter = ceiling.MfuMeter(nn.Linear(2, 2), peak_flops_per_s=1e12)
    x = torch.randn(4, 4)
    with pytest.raises(ceiling.CeilingError) as info, meter.step(x):
        torch.ops.ceilingmeter.mix(x)
    message = str(info.value)
    assert "ceilingmeter.mix" in message and "model_flops_per_step=" in message
    assert "\n" not in message
