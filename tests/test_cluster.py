import math
from dataclasses import dataclass, field

import pytest

from ceiling.errors import InvalidInput
from ceiling.hardware.catalog import get_spec
from ceiling.model import cluster as cl


def test_a100_cluster_defaults_from_catalog_and_data():
    c = cl.make_cluster(get_spec("a100-80gb"), 1024)
    assert (c.nodes, c.devices_per_node, c.devices) == (128, 8, 1024)
    assert c.intra_node_bandwidth_bytes_per_s == 300e9  # NVLink 3, one way (catalog)
    assert c.inter_node_bandwidth_bytes_per_s == 25e9  # 8x HDR 200 Gb/s per node
    assert c.peak_flops_per_s == 312e12
    assert c.matmul_flops_per_s == pytest.approx(312e12 * c.matmul_efficiency)
    assert c.link(True) == (pytest.approx(25e9 * 0.92), pytest.approx(10e-6))
    assert c.link(False)[0] == pytest.approx(300e9 * 0.77)
    assert "a100-80gb" in c.efficiency_source


def test_h100_nodes_have_ndr_infiniband():
    c = cl.make_cluster(get_spec("h100-sxm"), 64)
    assert c.inter_node_bandwidth_bytes_per_s == 50e9  # 8x 400 Gb/s per node
    assert c.intra_node_bandwidth_bytes_per_s == 450e9


def test_small_counts_make_one_partial_node_and_ragged_counts_are_refused():
    c = cl.make_cluster(get_spec("a100-80gb"), 4)
    assert (c.nodes, c.devices_per_node) == (1, 4)
    with pytest.raises(InvalidInput, match=r"1001 % 8 = 1"):
        cl.make_cluster(get_spec("a100-80gb"), 1001)
    with pytest.raises(InvalidInput):
        cl.make_cluster(get_spec("a100-80gb"), 0)


def test_overrides_and_unknown_devices_fall_back_to_generic_defaults():
    c = cl.make_cluster(
        get_spec("l4"), 16, 4, inter_node_bandwidth_bytes_per_s=5e9, matmul_efficiency=0.5
    )
    assert (c.nodes, c.devices_per_node) == (4, 4)
    assert c.inter_node_bandwidth_bytes_per_s == 5e9
    assert c.matmul_efficiency == 0.5
    assert c.efficiency_source == "given"
    with pytest.raises(InvalidInput):
        cl.make_cluster(get_spec("l4"), 16, matmul_efficiency=1.5)


def test_every_default_entry_names_its_sources_and_a_catalog_device():
    data = cl._defaults()
    for key, entry in data.items():
        assert entry["sources"], key
        assert any(k in entry["sources"] for k in ("network", "efficiency")), key
        for f in ("matmul_efficiency", "memory_efficiency"):
            assert 0 < entry[f] <= 1
        if key != "default":
            get_spec(key)  # raises if the key is not a catalog device


@dataclass
class FakeMeasured:
    name: str
    peak_flops_per_s: dict
    bandwidth_bytes_per_s: float | None
    extra: dict = field(default_factory=dict)


def test_profile_efficiencies_are_measured_over_datasheet():
    spec = get_spec("h100-sxm")
    m = FakeMeasured("NVIDIA H100 80GB HBM3", {"bf16": 700e12}, 2.9e12)
    mm, mem = cl.efficiencies_from_profile(m, spec)
    assert mm == pytest.approx(700 / 989.5)
    assert mem == pytest.approx(2.9 / 3.35)
    with pytest.raises(InvalidInput, match="no fp8"):
        cl.efficiencies_from_profile(m, spec, "fp8")
    assert math.isfinite(
        cl.efficiencies_from_profile(FakeMeasured("x", {"bf16": 1e12}, None), spec)[1]
    )


def test_rack_scale_domains_take_whole_trays_when_a_job_does_not_fill_whole_racks():
    gb200 = get_spec("gb200")
    c = cl.make_cluster(gb200, 256)  # 4 racks of 64 GPUs: 16 of each rack's 18 trays
    assert (c.nodes, c.devices_per_node) == (4, 64)
    assert "4 of 64" in c.sources["placement"]
    c = cl.make_cluster(gb200, 144)  # whole racks: as they are, nothing said
    assert (c.nodes, c.devices_per_node) == (2, 72) and "placement" not in c.sources
    with pytest.raises(InvalidInput, match="74 % 72 = 2"):
        cl.make_cluster(gb200, 74)  # 74 = 2 x 37: no whole number of trays per rack
    with pytest.raises(InvalidInput, match="12 % 8 = 4"):
        cl.make_cluster(get_spec("h100-sxm"), 12)  # 8-GPU nodes are not split
