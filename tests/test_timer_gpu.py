"""CUDA paths of the harness: event timing and the L2 flush sized from the device."""

import pytest

from ceiling.measure import timer

pytestmark = pytest.mark.gpu


def test_l2_flush_buffer_is_twice_the_l2():
    import torch

    props = torch.cuda.get_device_properties(0)
    flush = timer.make_l2_flush("cuda")
    buf = flush.__self__  # the bound zero_ of the flush buffer
    assert buf.numel() == 2 * props.L2_cache_size
    assert buf.device.type == "cuda"


def test_cuda_events_time_a_matmul():
    import torch

    a = torch.randn(2048, 2048, device="cuda")
    samples = timer.benchmark(lambda: a @ a, device="cuda", warmup_ms=5, budget_ms=20)
    assert len(samples) >= 3
    # 2*2048^3 FLOP in >0 s and well under a second on any CUDA GPU
    assert all(0 < s < 1 for s in samples)


def test_event_timer_matches_host_clock_for_a_sleep_kernel():
    import torch

    t = timer.CudaEventTimer("cuda")
    token = t.start()
    torch.cuda._sleep(10_000_000)  # spins the GPU for ~millions of cycles
    (elapsed,) = t.collect([t.stop(token)])
    assert elapsed > 1e-4
