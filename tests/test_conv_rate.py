"""A convolution's compute roof is its own call run again at the same shapes, not the
matmul peak: the recorded key holds what the replay needs."""

from __future__ import annotations

import torch
from torch import nn

from ceiling.measure import roofs
from ceiling.profile.recorder import OpRecorder


def test_a_recorded_convolution_is_replayed_with_its_own_shapes(monkeypatch):
    conv = nn.Conv2d(4, 8, 3, stride=2, padding=1, groups=2)
    x = torch.randn(2, 4, 9, 9, requires_grad=True)
    with OpRecorder() as rec:
        conv(x).sum().backward()
    keys = [c.replay_key for c in rec.calls if c.replay_key]
    assert [k[0] for k in keys] == ["aten.convolution.default", "aten.convolution_backward.default"]
    forward = keys[0][1]
    assert forward[0] == ("tensor", (2, 4, 9, 9), "float32")
    assert forward[1] == ("tensor", (8, 2, 3, 3), "float32")
    assert forward[3:] == ((2, 2), (1, 1), (1, 1), False, (0, 0), 2)
    fn, args = roofs._replayable(keys[0], "cpu")
    assert fn(*args).shape == (2, 8, 5, 5)  # the same call on fresh tensors
    grads = roofs._replayable(keys[1], "cpu")
    assert [g.shape for g in grads[0](*grads[1])] == [(2, 4, 9, 9), (8, 2, 3, 3), (8,)]
    # each key timed once by the benchmark, its median call kept
    monkeypatch.setattr(
        roofs,
        "benchmark",
        lambda call, inputs, **kw: [call(inputs[0]) or t for t in (3.0, 1.0, 2.0)],
    )
    assert roofs.replayed_times(keys, "cpu") == {keys[0]: 2.0, keys[1]: 2.0}
    assert not [c for c in rec.calls if c.replay_key and c.category != "matmul"]


def test_a_recurrent_layer_is_replayed_and_a_call_that_cannot_run_is_left_out(monkeypatch):
    lstm = nn.LSTM(8, 8, batch_first=True)
    x = torch.randn(2, 5, 8)
    with OpRecorder() as rec:
        lstm(x)[0].sum().backward()
    keys = [c.replay_key for c in rec.calls if c.replay_key]
    names = {k[0].split(".")[1] for k in keys}
    # CPU builds with oneDNN run the layer as one kernel; others decompose it into matmuls
    if not names:
        assert not [c for c in rec.calls if "rnn" in c.op]
        return
    assert names == {"mkldnn_rnn_layer", "mkldnn_rnn_layer_backward"}
    for key in keys:  # the backward's workspace (bytes) made as zeros: it runs
        fn, args = roofs._replayable(key, "cpu")
        fn(*args)
    monkeypatch.setattr(roofs, "benchmark", lambda call, inputs, **kw: [call(inputs[0]) or 1.0])
    wrong = ("aten.mm.default", (("tensor", (2, 3), "float32"), ("tensor", (4, 5), "float32")))
    assert set(roofs.replayed_times([*keys, wrong], "cpu")) == set(keys)


def test_a_replayed_call_reads_arguments_pushed_out_of_the_cache(monkeypatch):
    """With `cold_bytes`, copies of the arguments are rotated, enough of them to hold twice
    that cache, so each call reads what the others pushed out (as matmul_rates does)."""
    conv = nn.Conv2d(4, 8, 3, padding=1)
    with OpRecorder() as rec:
        conv(torch.randn(2, 4, 8, 8))
    (key,) = [c.replay_key for c in rec.calls if c.replay_key]
    held = (2 * 4 * 8 * 8 + 8 * 4 * 3 * 3 + 8) * 4  # input, weight and bias, fp32
    seen = {}

    def fake(call, inputs, min_samples, **kw):
        seen["inputs"], seen["min_samples"] = inputs, min_samples
        return [call(x) or 1.0 for x in inputs]

    monkeypatch.setattr(roofs, "benchmark", fake)
    assert roofs.replayed_times([key], "cpu", cold_bytes=10 * held) == {key: 1.0}
    inputs = seen["inputs"]
    assert len(inputs) == 21 == seen["min_samples"]  # 1 + 2 × 10 copies
    assert len({a[0].data_ptr() for a in inputs}) == 21  # each copy its own tensors
    roofs.replayed_times([key], "cpu")
    assert len(seen["inputs"]) == 1  # no cache to push them out of: the call hot
    assert roofs._copies([torch.ones(10**6)], 1e12) == roofs.MAX_COPIES
