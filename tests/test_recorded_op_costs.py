"""What the recorder keeps for the roofs beyond FLOPs and bytes (new buffers, the
elementwise function, the attention shape), and the quick measurements that price them."""

import torch
import torch.nn.functional as F

from ceiling.profile.recorder import OpRecorder


def test_recorder_keeps_new_buffers_functions_and_attention_shapes():
    x = torch.randn(8, 32)
    q, k, v = (torch.randn(2, 3, 16, 8) for _ in range(3))
    with OpRecorder(time_ops=True) as rec:
        y = x * 2  # a new buffer
        x.add_(1)  # written in place: none
        x.view(32, 8)  # a view: none
        F.gelu(y, approximate="tanh")
        torch.log_softmax(y, -1)
        F.dropout(y, 0.1, training=True)  # its mask: a random draw per element
        F.scaled_dot_product_attention(q, k, v, is_causal=True)
    calls = {c.op: c for c in rec.calls}
    assert calls["aten.mul"].new_buffers == (8 * 32 * 4,)
    assert calls["aten.add_"].new_buffers == () and calls["aten.view"].new_buffers == ()
    assert (calls["aten.gelu"].function, calls["aten.gelu"].elements) == ("gelu[tanh]", 256)
    assert calls["aten._log_softmax"].function == "_log_softmax"
    drop = calls.get("aten.bernoulli_") or calls["aten.native_dropout"]
    assert drop.function in ("bernoulli_", "native_dropout") and drop.elements == 256
    attention = [c for c in rec.calls if c.category == "attention"]
    assert attention and attention[0].attention_dims == ("forward", 2, 3, 16, 16, 8, True)
    assert calls["aten.mul"].attention_dims is None and calls["aten.mul"].matmul_dims is None
    # page faults are counted per op where the operating system counts them per thread
    assert all(c.page_faults is None or c.page_faults >= 0 for c in rec.calls)


def test_counting_on_meta_records_no_buffers():
    x = torch.empty(4, 4, device="meta")
    with OpRecorder(time_ops=True) as rec:
        F.gelu(x * 2)
    assert all(c.new_buffers == () and c.time_s is None for c in rec.calls)


def test_quick_measurements_return_raw_times_for_every_case():
    from ceiling.measure.first_touch import time_first_touch
    from ceiling.measure.functions import ELEMENTS, NAMES, time_functions
    from ceiling.measure.roofs import attention_times, matmul_rates
    from ceiling.model.first_touch import fit

    sizes = (2**16, 2**18)
    t = time_first_touch("cpu", sizes=sizes, budget_ms=1.0)
    assert t.sizes_bytes == list(sizes) and len(t.fresh_s) == len(t.reused_s) == 2
    assert all(s > 0 for s in t.fresh_s + t.reused_s)
    assert t.fresh_faults is None or len(t.fresh_faults) == 2
    assert fit(t.sizes_bytes, t.fresh_s, t.reused_s, t.fresh_faults).s_per_byte >= 0.0
    f = time_functions("cpu", budget_ms=0.5)
    assert f.elements == ELEMENTS and set(f.best_s) == set(NAMES)
    assert all(s > 0 for s in f.best_s.values())
    shapes = {(4, 8, 16), (3, 4, 8, 16)}  # a plain product, a batch of 3 in one bmm
    rates = matmul_rates(shapes, "cpu", torch.float32, budget_ms=1.0, cold_bytes=2**16)
    assert set(rates) == shapes and all(r > 0 for r in rates.values())
    keys = [("forward", 1, 2, 8, 8, 4, True), ("backward", 1, 2, 8, 8, 4, True)]
    times = attention_times(keys, "cpu", torch.float32, budget_ms=1.0)
    assert set(times) == set(keys) and all(s > 0 for s in times.values())


def test_a_batched_product_is_keyed_by_its_batch_and_shape():
    from ceiling.profile.explain import rate_key

    a, b, w = torch.randn(6, 3, 4), torch.randn(6, 4, 5), torch.randn(5, 4)
    with OpRecorder() as rec:
        torch.bmm(a, b)
        torch.baddbmm(torch.zeros(6, 3, 5), a, b)
        a.reshape(18, 4) @ w.t()
    keys = [rate_key(c) for c in rec.calls if c.category == "matmul"]
    assert keys == [(6, 3, 5, 4), (6, 3, 5, 4), (18, 5, 4)]
    assert [c.matmul_batch for c in rec.calls if c.category == "matmul"] == [6, 6, 1]


def test_batch_norm_and_pooling_are_priced_per_element_of_their_output():
    x = torch.randn(2, 4, 8, 8, requires_grad=True)
    bn = torch.nn.BatchNorm2d(4)
    with OpRecorder() as rec:
        F.max_pool2d(bn(x), 3, 2, 1).sum().backward()
    fn = {c.op: (c.function, c.elements) for c in rec.calls if c.function}
    assert fn["aten.native_batch_norm"] == ("native_batch_norm", 2 * 4 * 8 * 8)
    assert fn["aten.max_pool2d_with_indices"] == ("max_pool2d_with_indices", 2 * 4 * 4 * 4)
    assert fn["aten.max_pool2d_with_indices_backward"][1] == 2 * 4 * 8 * 8
