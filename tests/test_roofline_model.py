import math

import pytest

from ceiling.errors import InvalidInput, UnknownName
from ceiling.model import opcost, roofline


def test_ridge_and_attainable():
    # H100 SXM bf16 dense 989 TFLOP/s over 3.35 TB/s: ridge ~295 FLOP/byte
    assert roofline.ridge_point(989e12, 3.35e12) == pytest.approx(295.2, abs=0.1)
    assert roofline.attainable_flops_per_s(1.0, 989e12, 3.35e12) == 3.35e12
    assert roofline.attainable_flops_per_s(1000.0, 989e12, 3.35e12) == 989e12
    assert roofline.attainable_flops_per_s(math.inf, 1e12, 1e9) == 1e12
    assert roofline.bound(10, 100.0, 1.0) == "memory"
    assert roofline.bound(100, 100.0, 1.0) == "compute"


def test_predicted_time_is_the_slower_roof():
    assert roofline.predicted_time_s(1e12, 1e9, 1e12, 1e10) == 1.0  # compute: 1 s vs 0.1 s
    assert roofline.predicted_time_s(1e9, 1e10, 1e12, 1e10) == 1.0  # memory: 1 ms vs 1 s
    op = opcost.matvec(4096)
    t = roofline.predicted_time_s(op.flops, op.bytes, 1e12, 1e11)
    assert t == pytest.approx(op.flops / roofline.attainable_flops_per_s(op.intensity, 1e12, 1e11))


@pytest.mark.parametrize(
    "args", [(-1, 1e12, 1e9), (1.0, 0, 1e9), (1.0, 1e12, -5), (1.0, math.nan, 1e9)]
)
def test_bad_roofs(args):
    with pytest.raises(InvalidInput):
        roofline.attainable_flops_per_s(*args)


def test_fp32_intensities_from_the_acceptance_list():
    add = opcost.add(100_000_000)
    assert add.flops == 1e8 and add.bytes == 12e8
    assert add.intensity == pytest.approx(1 / 12)  # 0.083
    mv = opcost.matvec(8192)
    assert mv.flops == 2 * 8192**2
    assert mv.intensity == pytest.approx(0.5, rel=1e-3)
    mm = opcost.matmul(4096, 4096, 4096)
    assert mm.flops == 2 * 4096**3
    assert mm.intensity == pytest.approx(4096 / 6)  # 2n^3 / (3 n^2 * 4 bytes) = 682.7


def test_bf16_matches_formula_sheet():
    assert opcost.add(10**6, "bf16").intensity == pytest.approx(1 / 6)  # 0.17
    assert opcost.matmul(999, 999, 999, "bf16").intensity == pytest.approx(999 / 3)


def test_attention_naive_vs_fused():
    naive, fused = opcost.parse_ops("attention:8,16,4096,128", "bf16")
    assert naive.flops == fused.flops == 4 * 8 * 16 * 4096**2 * 128
    assert fused.bytes == 4 * 8 * 16 * 4096 * 128 * 2
    assert naive.bytes == fused.bytes + 4 * 8 * 16 * 4096**2 * 2
    # fused intensity = S/2 FLOP/byte in bf16 (4 S^2 D / (4 S D * 2))
    assert fused.intensity == pytest.approx(4096 / 2)
    assert naive.intensity < fused.intensity / 20


def test_parse_ops():
    (mm,) = opcost.parse_ops("matmul:128x256x512")
    assert mm.shape == (128, 256, 512) and mm.dtype == "fp32"
    (a,) = opcost.parse_ops("add:1e6", "fp16")
    assert a.shape == (1_000_000,) and a.bytes == 6e6
    (big,) = opcost.parse_ops("add:100M")
    assert big.shape == (100_000_000,)


@pytest.mark.parametrize(
    "spec",
    ["add", "add:x", "matmul:3x4", "add:-5", "attention:1,2,3", "add:1e400", "add:1.5e0", "add:"],
)
def test_parse_ops_errors(spec):
    with pytest.raises(InvalidInput):
        opcost.parse_ops(spec)


def test_unknown_op_and_dtype():
    with pytest.raises(UnknownName):
        opcost.parse_ops("conv:3")
    with pytest.raises(UnknownName):
        opcost.add(3, "fp128")
