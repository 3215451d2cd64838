import json

import pytest

from ceiling.api.bench import comm_rows, latency_bandwidth
from ceiling.errors import InvalidInput
from ceiling.measure import comm


def test_default_sizes_are_powers_of_four():
    assert comm.default_sizes(4096, 65536) == [4096, 16384, 65536]
    with pytest.raises(InvalidInput):
        comm.default_sizes(1024, 16)


def test_iterations_scale_down_with_size():
    assert comm.iterations_for(1024) == comm.MAX_ITERS
    assert comm.iterations_for(2**30) == comm.MIN_ITERS
    assert comm.iterations_for(2**30, iters=7) == 7


def test_rows_apply_nccl_tests_factors_to_the_slowest_rank():
    raw = {
        "ranks": 4,
        "points": [
            {"op": "all_reduce", "bytes": 1_000_000, "iters": 5, "time_s_per_rank": [1e-3, 2e-3]},
            {"op": "all_gather", "bytes": 1_000_000, "iters": 5, "time_s_per_rank": [1e-3]},
            {"op": "broadcast", "bytes": 1_000_000, "iters": 5, "time_s_per_rank": [1e-3]},
        ],
    }
    rows = comm_rows(raw)
    assert rows[0]["time_s"] == 2e-3
    assert rows[0]["algbw_gbps"] == pytest.approx(0.5)
    assert rows[0]["busbw_gbps"] == pytest.approx(0.5 * 2 * 3 / 4)
    assert rows[1]["busbw_gbps"] == pytest.approx(1.0 * 3 / 4)
    assert rows[2]["busbw_gbps"] == pytest.approx(1.0)


def test_latency_bandwidth_per_op():
    rows = [{"op": "all_reduce", "bytes": b, "time_s": 1e-4 + b / 1e9} for b in (1e3, 1e5, 1e7)]
    fit = latency_bandwidth(rows)["all_reduce"]
    assert fit["latency_s"] == pytest.approx(1e-4, rel=1e-6)
    assert fit["bandwidth_gbps"] == pytest.approx(1.0, rel=1e-6)


def test_unknown_op_is_refused(cli):
    code, _, err = cli("bench", "comm", "--ops", "gossip")
    assert code == 2
    assert "unknown collective 'gossip'" in err


@pytest.mark.slow
def test_bench_comm_two_workers_json(cli):
    code, out, err = cli("bench", "comm", "--workers", "2", "--quick", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["ranks"] == 2
    assert doc["backend"] == "gloo"
    ops = {r["op"] for r in doc["rows"]}
    assert ops == {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all"}
    assert len(doc["rows"]) == 5 * 3
    n = 2
    for r in doc["rows"]:
        assert set(r) >= {"op", "bytes", "time_s", "algbw_gbps", "busbw_gbps"}
        assert r["time_s"] > 0
        assert r["algbw_gbps"] == r["bytes"] / r["time_s"] / 1e9
        if r["op"] == "all_reduce":
            assert r["busbw_gbps"] == r["algbw_gbps"] * 2 * (n - 1) / n
        if r["op"] == "broadcast":
            assert r["busbw_gbps"] == r["algbw_gbps"]
        assert r["checked"] is True
        assert r["in_place"] is (r["op"] in ("all_reduce", "broadcast"))
    assert set(doc["latency_bandwidth"]) == ops
    # CPU ranks under gloo cross no catalog link: the share is null, and said so
    assert doc["busbw_share_of_link"] is None and doc["link"] is None
    assert "gloo" in doc["link_note"]
    assert all(r["busbw_share_of_link"] is None for r in doc["rows"])


def test_a_corrupted_element_fails_the_data_check():
    import torch

    from ceiling.errors import WrongResult

    want = torch.arange(1000, dtype=torch.float32)
    comm._expect("all-gather", want.clone(), want)  # equal: passes
    got = want.clone()
    got[617] = -1.0
    with pytest.raises(WrongResult, match=r"returned -1\.0 at element 617 of 1000, expected 617"):
        comm._expect("all-gather", got, want)
