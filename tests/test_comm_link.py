"""busbw against the link it crosses: NVLink, PCIe, the scale-out NIC, or none."""

import pytest

from ceiling.api.bench import _link
from ceiling.hardware.catalog import get_spec
from ceiling.model.comm_link import best_shares, collective_link, share_rows


def _rows(busbw_gbps):
    return [
        {"op": "all_reduce", "bytes": 2**20, "busbw_gbps": busbw_gbps / 4},
        {"op": "all_reduce", "bytes": 2**30, "busbw_gbps": busbw_gbps},
    ]


def test_the_link_a_collective_crosses():
    nvlink = collective_link(get_spec("h100-sxm"), spans_nodes=False)
    assert (nvlink.kind, nvlink.bytes_per_s_one_way) == ("NVLink", 450e9)
    pcie = collective_link(get_spec("l4"), spans_nodes=False)  # no NVLink on an L4
    assert (pcie.kind, pcie.bytes_per_s_one_way) == ("PCIe", 32e9)
    nic = collective_link(get_spec("h100-sxm"), spans_nodes=True)
    assert (nic.kind, nic.bytes_per_s_one_way) == ("scale-out network", 50e9)
    assert "ConnectX-7" in nic.source
    fabric = collective_link(get_spec("mi355x"), spans_nodes=False)
    assert fabric.kind == "Infinity Fabric" and fabric.bytes_per_s_one_way == 537.6e9
    assert collective_link(None, spans_nodes=False) is None


def test_share_of_link_and_the_ring_bound():
    link = collective_link(get_spec("h100-sxm"), spans_nodes=False)
    rows = _rows(360.0)
    assert share_rows(rows, link) == []
    assert rows[1]["busbw_share_of_link"] == pytest.approx(0.8)
    assert best_shares(rows) == {"all_reduce": pytest.approx(0.8)}
    rows = _rows(480.0)  # NVLS: the switch reduces, beyond what a ring can move
    notes = share_rows(rows, link)
    assert rows[1]["above_ring_bound"] and not rows[0]["above_ring_bound"]
    assert len(notes) == 1 and "above the ring bound" in notes[0] and "NVLS" in notes[0]
    rows = _rows(100.0)
    assert share_rows(rows, None) == [] and best_shares(rows) is None
    assert rows[0]["busbw_share_of_link"] is None


def _raw(device, name, ranks=8, per_node=8):
    return {"device": device, "device_name": name, "ranks": ranks, "ranks_per_node": per_node}


def test_bench_comm_finds_the_gpu_link_by_driver_name():
    rows = _rows(400.0)
    link, note, _ = _link(_raw("cuda:0", "NVIDIA H100 80GB HBM3"), rows, None)
    assert link.kind == "NVLink" and "h100-sxm" in note
    assert rows[1]["busbw_share_of_link"] == pytest.approx(400 / 450)
    link, _, _ = _link(_raw("cuda:0", "NVIDIA H100 80GB HBM3", 16, 8), _rows(40.0), None)
    assert link.kind == "scale-out network"


def test_bench_comm_says_why_there_is_no_link():
    rows = _rows(5.0)
    link, note, _ = _link(_raw("cpu", "cpu", 2, 2), rows, None)
    assert link is None and "gloo" in note and rows[0]["busbw_share_of_link"] is None
    link, note, _ = _link(_raw("cuda:0", "NVIDIA Quantum 9000"), _rows(5.0), None)
    assert link is None and "no catalog entry" in note
    link, _, _ = _link(_raw("cuda:0", "NVIDIA Quantum 9000"), _rows(5.0), get_spec("a100"))
    assert link.bytes_per_s_one_way == 300e9  # --spec names the device
