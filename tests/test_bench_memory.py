import pytest

from ceiling.errors import WrongResult
from ceiling.measure import machine, memory
from ceiling.measure.memory import bandwidth_ceiling, run_naive_triad, run_stream

N = 1 << 16


def test_stream_byte_counts_and_validation():
    results = run_stream("cpu", elements=N, warmup_ms=1, budget_ms=5)
    by_kernel = {r.kernel: r for r in results}
    assert list(by_kernel) == ["copy", "scale", "add", "triad", "dot"]
    assert by_kernel["copy"].bytes == 2 * 8 * N
    assert by_kernel["scale"].bytes == 2 * 8 * N
    assert by_kernel["add"].bytes == 3 * 8 * N
    assert by_kernel["triad"].bytes == 3 * 8 * N
    assert by_kernel["dot"].bytes == 2 * 8 * N
    for r in results:
        assert len(r.samples) >= 3  # first timed iteration discarded from >= 4
        assert r.best_gbps == pytest.approx(r.bytes / r.stats.min / 1e9)
        assert r.best_gbps >= r.median_gbps
        assert {"kernel", "bytes", "best_gbps", "median_gbps"} <= r.row().keys()


def test_stream_values_like_stream():
    # a=1, b=2, c=0, s=3: copy c=1, scale b=3, add c=4, triad a=3+3*4=15
    assert memory.expected_values() == {"a": 15.0, "b": 3.0, "c": 4.0}


def test_a_wrong_array_is_an_error():
    import torch

    with pytest.raises(WrongResult, match=r"expected 15\.0"):
        memory._check("a", torch.tensor([15.0, 15.0, 14.0]), 15.0, "triad")


def test_bandwidth_ceiling_leaves_out_dot():
    results = run_stream("cpu", elements=N, warmup_ms=1, budget_ms=5)
    writing = [r.bytes / r.stats.min for r in results if r.kernel != "dot"]
    assert bandwidth_ceiling(results) == max(writing)


def test_arrays_are_four_times_the_llc():
    n = memory.array_elements("cpu")
    assert n * 8 >= min(4 * machine.last_level_cache_bytes("cpu"), 0.25 * 2**30)


def test_naive_numpy_triad_row():
    r = run_naive_triad(N, warmup_ms=1, budget_ms=5)
    assert r.bytes == 3 * 8 * N and "temporary" in r.note


def test_cli_memory_json(cli):
    import json

    code, out, _ = cli("bench", "memory", "--quick", "--json")
    assert code == 0
    data = json.loads(out)
    kernels = [r["kernel"] for r in data["memory"]]
    assert kernels == ["copy", "scale", "add", "triad", "dot"]
    triad = data["memory"][3]
    assert triad["bytes"] == 3 * 8 * triad["elements"]
    assert triad["elements"] * 8 >= 4 * machine.last_level_cache_bytes("cpu") or (
        triad["elements"] * 8 * 3 >= 0.2 * machine.device_memory_bytes("cpu")
    )
    assert data["memory_naive_numpy"]["kernel"].startswith("triad (numpy")
