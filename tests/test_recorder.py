from dataclasses import MISSING

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from ceiling.profile.recorder import OpRecorder


def _work(rec):
    return [c for c in rec.calls if c.category != "view"]


@pytest.mark.parametrize(("dtype", "itemsize"), [(torch.float32, 4), (torch.bfloat16, 2)])
def test_mm_flops_and_bytes_exact(dtype, itemsize):
    m, n, k = 3, 5, 7
    a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
    with OpRecorder() as rec:
        torch.mm(a, b)
    (call,) = rec.calls
    assert call.op == "aten.mm"
    assert call.flops == 2 * m * n * k
    assert call.bytes_read == (m * k + k * n) * itemsize
    assert call.bytes_written == m * n * itemsize
    assert call.flops_exact and call.bytes_exact
    assert call.matmul_dims == (m, n, k)


def test_views_are_free_and_transposed_operand_costs_its_own_size():
    a, b = torch.randn(7, 3), torch.randn(7, 5)
    with OpRecorder() as rec:
        torch.mm(a.t(), b)
    views = [c for c in rec.calls if c.category == "view"]
    assert views and all(c.bytes == 0 and c.flops == 0 for c in views)
    (mm,) = _work(rec)
    assert mm.flops == 2 * 3 * 5 * 7
    assert mm.bytes == (21 + 35 + 15) * 4


def test_broadcast_operand_counts_its_own_memory_once():
    x, bias = torch.randn(64, 32), torch.randn(32)
    with OpRecorder() as rec:
        x + bias.expand(64, 32)
    (add,) = _work(rec)
    assert add.bytes_read == (64 * 32 + 32) * 4
    assert add.bytes_written == 64 * 32 * 4
    assert add.flops == 64 * 32


def test_inplace_update_reads_and_writes_copy_only_writes_destination():
    x, y = torch.randn(10), torch.randn(10)
    with OpRecorder() as rec:
        x.add_(y)
        x.copy_(y)
    add, copy = _work(rec)
    assert (add.bytes_read, add.bytes_written) == (80, 40)
    assert (copy.bytes_read, copy.bytes_written) == (40, 40)


def test_mlp_forward_backward_counted_op_by_op():
    torch.manual_seed(0)
    b, d_in, d_hid, d_out = 5, 8, 16, 4
    mlp = nn.Sequential(nn.Linear(d_in, d_hid), nn.GELU(), nn.Linear(d_hid, d_out))
    x = torch.randn(b, d_in)
    with OpRecorder() as rec:
        mlp(x).sum().backward()
    got = [(c.op, c.phase, c.module, c.flops) for c in _work(rec) if c.op != "aten.ones_like"]
    expected = [
        ("aten.addmm", "forward", "Sequential.0", 2 * b * d_in * d_hid),
        ("aten.gelu", "forward", "Sequential.1", 8 * b * d_hid),  # estimated: 8 per element
        ("aten.addmm", "forward", "Sequential.2", 2 * b * d_hid * d_out),
        ("aten.sum", "forward", "Global", b * d_out - 1),
        ("aten.mm", "backward", "Sequential.2", 2 * b * d_out * d_hid),  # grad of the input
        ("aten.mm", "backward", "Sequential.2", 2 * d_out * b * d_hid),  # grad of the weight
        ("aten.sum", "backward", "Sequential.2", b * d_out - d_out),  # grad of the bias
        ("aten.gelu_backward", "backward", "Sequential.1", 12 * b * d_hid),
        ("aten.mm", "backward", "Sequential.0", 2 * d_hid * b * d_in),  # x needs no grad
        ("aten.sum", "backward", "Sequential.0", b * d_hid - d_hid),
    ]
    assert got == expected
    first = _work(rec)[0]
    assert first.bytes_read == (b * d_in + d_in * d_hid + d_hid) * 4
    assert first.bytes_written == b * d_hid * 4
    gelu = _work(rec)[1]
    assert not gelu.flops_exact
    matmuls = 2 * b * d_in * d_hid * 2 + 2 * b * d_hid * d_out * 3
    assert rec.model_flops() == matmuls == rec.hardware_flops()
    modules = {t.name: t for t in rec.by_module()}
    assert modules["Sequential"].model_flops == matmuls
    assert modules["Sequential.0"].model_flops == 2 * b * d_in * d_hid * 2


def _sdpa_forward_flops(b, h, s, d):
    return 2 * (2 * b * h * s * s * d)  # scores and values, 2 per multiply-add


def test_sdpa_on_cpu_is_counted_and_causal_is_half():
    b, h, s, d = 2, 4, 8, 16
    q, k, v = (torch.randn(b, h, s, d, requires_grad=True) for _ in range(3))
    with OpRecorder() as rec:
        F.scaled_dot_product_attention(q, k, v).sum().backward()
    fwd = [c for c in rec.calls if c.category == "attention" and c.phase == "forward"]
    bwd = [c for c in rec.calls if c.category == "attention" and c.phase == "backward"]
    assert [c.flops for c in fwd] == [_sdpa_forward_flops(b, h, s, d)]
    # the fused backward does 5 matmuls of forward size/2: 2x the forward plus Q·Kᵀ again
    assert [c.flops for c in bwd] == [2.5 * _sdpa_forward_flops(b, h, s, d)]
    assert [c.recomputed_flops for c in bwd] == [0.5 * _sdpa_forward_flops(b, h, s, d)]
    assert rec.model_flops() == 3 * _sdpa_forward_flops(b, h, s, d)
    assert rec.hardware_flops() == 3.5 * _sdpa_forward_flops(b, h, s, d)
    with OpRecorder() as causal:
        F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert causal.model_flops() == _sdpa_forward_flops(b, h, s, d) / 2


def test_meta_tensors_give_flops_and_bytes_without_time():
    with torch.device("meta"):
        layer = nn.Linear(4096, 4096, bias=False)
        x = torch.randn(8, 4096)
    with OpRecorder(time_ops=True) as rec:
        layer(x)
    (mm,) = _work(rec)
    assert mm.flops == 2 * 8 * 4096 * 4096
    assert mm.bytes == (8 * 4096 + 4096 * 4096 + 8 * 4096) * 4
    assert mm.time_s is None


def test_fake_tensors_are_counted():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        a, b = torch.randn(64, 32), torch.randn(32, 16)
        with OpRecorder() as rec:
            torch.mm(a, b)
    assert rec.totals().flops == 2 * 64 * 16 * 32


def test_per_op_time_is_recorded_when_asked():
    a = torch.randn(64, 64)
    with OpRecorder(time_ops=True) as rec:
        a @ a
    assert rec.calls[0].time_s is not None and rec.calls[0].time_s > 0
    with OpRecorder() as untimed:
        a @ a
    assert untimed.calls[0].time_s is None


def test_recomputation_counts_in_hardware_flops_only():
    from torch.utils.checkpoint import checkpoint

    # GELU keeps the matmul's output for backward, so recomputation must redo the matmul
    block = nn.Sequential(nn.Linear(16, 16, bias=False), nn.GELU())
    x = torch.randn(4, 16, requires_grad=True)
    with OpRecorder() as rec:
        checkpoint(block, x, use_reentrant=False).sum().backward()
    forward_mm = 2 * 4 * 16 * 16
    assert [c.phase for c in rec.calls if c.op == "aten.mm"].count("recompute") == 1
    assert rec.hardware_flops() - rec.model_flops() == forward_mm
    assert rec.model_flops() == 3 * forward_mm


def test_optimizer_phase_label():
    p = nn.Parameter(torch.randn(10))
    p.grad = torch.randn(10)
    opt = torch.optim.SGD([p], lr=0.1)
    with OpRecorder() as rec, rec.phase("optimizer"):
        opt.step()
    assert rec.calls and {c.phase for c in rec.calls} == {"optimizer"}


def test_custom_ops_are_recorded_with_their_bytes():
    lib = torch.library.Library("ceilingtest", "DEF")
    lib.define("double(Tensor x) -> Tensor")
    lib.impl("double", lambda x: x * 2, "CPU")
    x = torch.randn(16)
    with OpRecorder() as rec:
        torch.ops.ceilingtest.double(x)
    custom = [c for c in rec.calls if c.op == "ceilingtest.double"]
    assert len(custom) == 1
    assert custom[0].bytes_read == 64 and custom[0].bytes_written == 64
    assert custom[0].flops == 0 and not custom[0].flops_exact


def test_a_call_made_fast_equals_one_made_by_the_dataclass():
    from dataclasses import fields

    from ceiling.profile.recorder import OpCall, _new_call

    required = [f.name for f in fields(OpCall) if f.default is MISSING]
    values = {name: f"{name}-value" for name in required}
    values["matmul_batch"] = 4  # one default overridden, the others taken
    fast, slow = _new_call(values), OpCall(**values)
    assert fast == slow and fast.__dict__ == slow.__dict__
