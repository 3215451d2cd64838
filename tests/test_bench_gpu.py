"""CUDA paths of the benchmarks: events, L2 flush, pinned transfers, fp8, crossover."""

import pytest

from ceiling.measure import matmul, overhead, transfer

pytestmark = pytest.mark.gpu


def test_fp32_and_bf16_matmul_on_gpu():
    for dtype in ("fp32", "tf32", "bf16", "fp16"):
        r = matmul.run_matmul(dtype, 1024, 1024, 1024, "cuda", warmup_ms=5, budget_ms=20)
        assert r.rel_error <= matmul.TOLERANCE[dtype]
        assert r.best_s > 0


def test_fp8_matmul_where_supported():
    import torch

    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("fp8 needs compute capability >= 8.9")
    r = matmul.run_matmul("fp8", 1024, 1024, 1024, "cuda", warmup_ms=5, budget_ms=20)
    assert r.rel_error <= matmul.TOLERANCE["fp8"]


def test_pinned_beats_nothing_but_is_measured():
    results = transfer.run_transfer("cuda", sizes=(16 * 2**20,), budget_ms=20)
    cases = {(r.direction, r.host_memory) for r in results}
    assert cases == {
        ("h2d", "pinned"),
        ("h2d", "pageable"),
        ("d2h", "pinned"),
        ("d2h", "pageable"),
        ("d2d", "device"),
    }
    assert all(r.best_gbps > 0 for r in results)


def test_crossover_on_gpu():
    c = overhead.crossover("elementwise", "cuda", (2**10, 2**20, 2**24), budget_ms=10)
    assert len(c.gpu_s) == len(c.cpu_s) == len(c.gpu_with_transfer_s) == 3
    assert c.crossover is None or c.crossover in c.sizes


def test_tf32_setting_is_restored_after_a_tf32_run():
    import torch

    before = torch.get_float32_matmul_precision()
    matmul.run_matmul("tf32", 512, 512, 512, "cuda", warmup_ms=2, budget_ms=10)
    assert torch.get_float32_matmul_precision() == before


def test_device_copy_traffic_counts_read_and_write():
    (d2d,) = [
        r
        for r in transfer.run_transfer("cuda", sizes=(64 * 2**20,), budget_ms=20)
        if r.direction == "d2d"
    ]
    assert d2d.traffic_bytes == 2 * d2d.bytes
    assert d2d.best_traffic_gbps == pytest.approx(2 * d2d.best_gbps)


def test_bf16_rate_is_a_sane_fraction_of_the_datasheet():
    # against the catalog peak: never above it (dense peaks), and not absurdly low at 4096^3
    from ceiling.measure import machine

    peak = machine.datasheet_peaks("cuda").get("bf16")
    if not peak:
        pytest.skip("this GPU is not in the catalog")
    r = matmul.run_matmul("bf16", 4096, 4096, 4096, "cuda", warmup_ms=20, budget_ms=100)
    assert 0.2 < r.best_flops_per_s / peak < 1.0
