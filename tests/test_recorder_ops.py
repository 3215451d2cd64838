"""FLOPs and bytes of common ops, each against a hand derivation (fp32: 4 bytes/element).

A multiply-add counts 2 FLOPs. Bytes are each distinct input and output once, stride-aware
(a stride-0 dimension counts once), views free.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

from ceiling.profile.recorder import OpRecorder

F32 = 4


def _calls(fn, phase=None):
    with OpRecorder() as rec:
        fn()
    return [
        c for c in rec.calls if c.category != "view" and (phase is None or c.phase == phase)
    ], rec


def _one(calls, op):
    (call,) = [c for c in calls if c.op == op]
    return call


def test_bmm():
    b, m, k, n = 3, 4, 5, 6
    x, y = torch.randn(b, m, k), torch.randn(b, k, n)
    (c,), _ = _calls(lambda: torch.bmm(x, y))
    assert c.op == "aten.bmm" and c.category == "matmul"
    assert c.flops == 2 * b * m * n * k
    assert (c.bytes_read, c.bytes_written) == ((b * m * k + b * k * n) * F32, b * m * n * F32)
    assert c.matmul_dims == (m, n, k) and c.flops_exact and c.bytes_exact


def test_linear_is_addmm_with_the_bias_read_once():
    m, k, n = 7, 5, 3
    layer, x = nn.Linear(k, n), torch.randn(m, k)
    (c,), _ = _calls(lambda: layer(x))
    assert c.op == "aten.addmm"
    # torch's formula counts the matmul only (the bias add is m·n more, left out)
    assert c.flops == 2 * m * n * k
    # the weight arrives transposed (a view): it costs its own k·n elements
    assert c.bytes_read == (m * k + k * n + n) * F32
    assert c.bytes_written == m * n * F32


def test_conv2d_forward_and_backward():
    n, c_in, c_out, hw, kk = 2, 3, 4, 5, 3
    conv = nn.Conv2d(c_in, c_out, kk, padding=1)
    x = torch.randn(n, c_in, hw, hw, requires_grad=True)
    calls, _ = _calls(lambda: conv(x).sum().backward())
    out_elems = n * c_out * hw * hw
    per_output = c_in * kk * kk  # multiply-adds per output element
    fwd = _one(calls, "aten.convolution")
    assert fwd.flops == 2 * out_elems * per_output == 10800
    weight = c_out * c_in * kk * kk
    assert fwd.bytes_read == (n * c_in * hw * hw + weight + c_out) * F32
    assert fwd.bytes_written == out_elems * F32
    bwd = _one(calls, "aten.convolution_backward")
    # input gradient and weight gradient, each the forward's size; the bias gradient is a sum
    assert bwd.flops == 2 * fwd.flops
    # the incoming gradient of .sum() is one value expanded (stride 0): 4 bytes
    assert bwd.bytes_read == (1 + n * c_in * hw * hw + weight) * F32
    assert bwd.bytes_written == (n * c_in * hw * hw + weight + c_out) * F32


def test_sdpa_on_cpu_causal_forward_and_backward():
    b, h, s, d = 2, 3, 8, 4
    q, k, v = (torch.randn(b, h, s, d, requires_grad=True) for _ in range(3))
    calls, rec = _calls(
        lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
    )
    full = 2 * (2 * b * h * s * s * d)  # Q·Kᵀ and P·V, 2 per multiply-add
    fwd = _one(calls, "aten._scaled_dot_product_flash_attention_for_cpu")
    assert fwd.flops == full / 2  # causal: half the pairs
    qkv = b * h * s * d * F32
    assert fwd.bytes_read == 3 * qkv
    assert fwd.bytes_written == qkv + b * h * s * F32  # output + logsumexp
    bwd = _one(calls, "aten._scaled_dot_product_flash_attention_for_cpu_backward")
    # five matmuls of the forward's size / 2: dV, dP, dQ, dK, and Q·Kᵀ recomputed
    assert bwd.flops == 2.5 * full / 2
    assert bwd.recomputed_flops == 0.5 * full / 2
    # grad (one expanded value), q, k, v, output, logsumexp; writes dq, dk, dv
    assert bwd.bytes_read == F32 + 4 * qkv + b * h * s * F32
    assert bwd.bytes_written == 3 * qkv
    assert rec.model_flops() == 3 * full / 2
    assert rec.hardware_flops() == 3.5 * full / 2


def test_layer_norm_and_softmax_are_estimated_per_element():
    rows, width = 4, 8
    ln, x = nn.LayerNorm(width), torch.randn(rows, width, requires_grad=True)
    calls, _ = _calls(lambda: ln(x).sum().backward())
    n = rows * width
    fwd = _one(calls, "aten.native_layer_norm")
    assert fwd.flops == 8 * n and not fwd.flops_exact
    assert fwd.bytes_read == (n + 2 * width) * F32  # x, gain, bias
    assert fwd.bytes_written == (n + 2 * rows) * F32  # y, mean, 1/std
    bwd = _one(calls, "aten.native_layer_norm_backward")
    assert bwd.flops == 16 * n
    assert bwd.bytes_written == (n + 2 * width) * F32  # dx, dgain, dbias
    y = torch.randn(rows, width, requires_grad=True)
    calls, _ = _calls(lambda: y.softmax(-1).sum().backward())
    sm = _one(calls, "aten._softmax")
    assert sm.flops == 5 * n and (sm.bytes_read, sm.bytes_written) == (n * F32, n * F32)
    assert _one(calls, "aten._softmax_backward_data").flops == 4 * n


def test_embedding_reads_the_rows_it_returns():
    vocab, width = 20, 8
    emb, idx = nn.Embedding(vocab, width), torch.randint(0, vocab, (3, 5))
    calls, _ = _calls(lambda: emb(idx).sum().backward())
    fwd = _one(calls, "aten.embedding")
    assert fwd.flops == 0
    assert fwd.bytes_read == 15 * 8 + 15 * width * F32  # int64 indices + the rows
    assert fwd.bytes_written == 15 * width * F32
    bwd = _one(calls, "aten.embedding_dense_backward")
    assert bwd.flops == 15 * width  # one add per gathered element
    assert bwd.bytes_written == vocab * width * F32  # the whole table's gradient


def test_cross_entropy_touches_one_logit_per_target():
    n, classes = 6, 10
    logits = torch.randn(n, classes, requires_grad=True)
    target = torch.randint(0, classes, (n,))
    calls, _ = _calls(lambda: F.cross_entropy(logits, target).backward())
    assert _one(calls, "aten._log_softmax").flops == 5 * n * classes
    nll = _one(calls, "aten.nll_loss_forward")
    assert nll.flops == n + 1 and nll.flops_exact  # n adds, one divide for the mean
    assert nll.bytes_read == n * 8 + n * F32  # int64 targets + the picked log-probabilities
    assert nll.bytes_written == 2 * F32  # the loss and the weight total
    back = _one(calls, "aten.nll_loss_backward")
    assert back.flops == n
    assert back.bytes_read == n * 8 + 2 * F32  # targets, incoming gradient, weight total
    assert back.bytes_written == n * classes * F32  # the whole gradient (mostly zeros)


def test_mse_loss():
    x, y = torch.randn(5, 3, requires_grad=True), torch.randn(5, 3)
    calls, _ = _calls(lambda: F.mse_loss(x, y).backward())
    n = 15
    assert _one(calls, "aten.mse_loss").flops == 2 * n + (n - 1) + 1
    assert _one(calls, "aten.mse_loss_backward").flops == 3 * n


def test_in_place_and_out_ops():
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    buf = torch.empty(4, 8)
    calls, _ = _calls(lambda: (x.relu_(), x.mul_(y), torch.add(x, y, out=buf)))
    relu, mul, add = [c for c in calls if c.op != "aten.empty"]
    n = 32 * F32
    assert (relu.op, relu.flops, relu.bytes_read, relu.bytes_written) == ("aten.relu_", 32, n, n)
    assert (mul.bytes_read, mul.bytes_written) == (2 * n, n)
    assert (add.bytes_read, add.bytes_written) == (2 * n, n)  # out= is written, not read


def test_views_are_free_and_a_copy_is_not():
    x = torch.randn(4, 6)
    calls, rec = _calls(
        lambda: (x.t().contiguous(), x.view(2, 12), x[:, :2], x[0].expand(3, 6), x.reshape(24))
    )
    assert [c.op for c in calls] == ["aten.clone"]
    assert (calls[0].bytes_read, calls[0].bytes_written) == (96, 96)
    views = [c for c in rec.calls if c.category == "view"]
    assert len(views) >= 5 and all(c.bytes == 0 and c.flops == 0 for c in views)


def test_ops_without_arithmetic_are_not_unknown():
    # in-place and unsafe variants of views relabel a buffer; bitwise ops build masks
    x, m = torch.randn(4, 6), torch.ones(4, 6, dtype=torch.bool)

    def run():
        y = x.clone()
        y.transpose_(0, 1).unsqueeze_(0).squeeze_(0)
        y.as_strided_((6, 4), (4, 1))
        torch.ops.aten.unsafe_split(y, 2)
        _ = m & (x > 0)

    _, rec = _calls(run)
    assert not [c.op for c in rec.calls if c.category == "unknown"]
    relabels = [c for c in rec.calls if c.op in ("aten.transpose_", "aten.unsafe_split")]
    assert len(relabels) == 2 and all(c.flops == 0 and c.bytes == 0 for c in relabels)
    (c,) = [c for c in rec.calls if c.op == "aten.bitwise_and"]
    assert c.flops == 24 and c.flops_exact
