from importlib import resources

import pytest

from ceiling.errors import InvalidInput, MalformedFile, UnknownName, UnsupportedOnDevice
from ceiling.hardware import catalog
from ceiling.hardware.catalog import DeviceSpec, all_specs, get_spec, match_driver_name

REQUIRED = [
    "h100-sxm",
    "h100-pcie",
    "h200-sxm",
    "a100-40gb",
    "a100-80gb",
    "l4",
    "l40s",
    "t4",
    "v100",
    "rtx-4090",
    "rtx-3090",
    "b200",
    "mi250x",
    "mi300x",
    "tpu-v4",
    "tpu-v5e",
    "tpu-v5p",
    "h100-nvl",
    "h800",
    "h20",
    "gh200",
    "gb200",
    "gb300",
    "b300",
    "mi300a",
    "mi325x",
    "mi350x",
    "mi355x",
    "gaudi2",
    "gaudi3",
    "a10",
    "a30",
    "l40",
    "rtx-5090",
    "rtx-4080",
    "apple-m1-max",
]


def test_catalog_ships_as_package_data():
    assert resources.files("ceiling.hardware").joinpath("catalog.toml").is_file()


def test_required_devices_present():
    keys = [s.key for s in all_specs()]
    assert set(REQUIRED) <= set(keys)
    assert len(keys) == len(set(keys))


def test_h100_sxm_published_dense_figures():
    h100 = get_spec("h100-sxm")
    # Datasheet prints 1,979 TFLOP/s bf16 "with sparsity"; the dense ceiling is half.
    assert h100.peak("bf16") == pytest.approx(989e12, rel=0.01)
    assert h100.peak("fp16") == pytest.approx(989e12, rel=0.01)
    assert h100.peak("fp8") == pytest.approx(1979e12, rel=1e-3)
    assert h100.peak("tf32") == pytest.approx(494.5e12, rel=1e-3)
    assert h100.memory_bandwidth_bytes_per_s == pytest.approx(3.35e12)
    assert h100.memory_bytes == 80 * 2**30
    # NVLink 4: 900 GB/s counts both directions; one direction is 450 GB/s.
    assert h100.link_bandwidth_bytes_per_s == pytest.approx(450e9)
    assert h100.l2_bytes == 50 * 2**20
    assert h100.sms == 132


def test_a100_matches_figures_used_in_published_mfu_numbers():
    # Narayanan et al. and Korthikanti et al. use 312 TFLOP/s; decode ceilings use 2.039 TB/s.
    a100 = get_spec("a100-80gb")
    assert a100.peak("bf16") == pytest.approx(312e12)
    assert a100.memory_bandwidth_bytes_per_s == pytest.approx(2.039e12)
    assert get_spec("a100-40gb").memory_bandwidth_bytes_per_s == pytest.approx(1.555e12)


@pytest.mark.parametrize("spec", all_specs(), ids=lambda s: s.key)
def test_dtype_ratios_rule_out_sparse_figures(spec):
    # A sparse figure mixed with dense ones would break these 2:1 ratios by a factor of 2.
    p = spec.peak_flops_per_s
    if "fp8" in p and "bf16" in p:
        assert p["fp8"] >= p["bf16"]
        if "ratios" not in spec.sources:  # e.g. Gaudi 3: fp8 at the bf16 rate, said by Intel
            assert p["fp8"] == pytest.approx(2 * p["bf16"], rel=0.03)
    if "tf32" in p and "bf16" in p:
        assert p["tf32"] == pytest.approx(p["bf16"] / 2, rel=0.03)
    if "fp16" in p and "bf16" in p:
        assert p["fp16"] == p["bf16"]
    # no device reaches 10 dense PFLOP/s (GB200 and MI355X are at 5 in fp8); a sparse
    # figure taken for a dense one on those would cross it
    assert max(p.values()) < 1e16
    if spec.kind == "gpu" and "bf16" in p:
        assert p["bf16"] < 3e15


@pytest.mark.parametrize("spec", all_specs(), ids=lambda s: s.key)
def test_every_number_has_a_source(spec):
    assert "http" in spec.sources["datasheet"]
    for field in ("peak_flops_per_s", "memory_bytes", "memory_bandwidth_bytes_per_s"):
        assert spec.sources[field]
    for field in ("link_bandwidth_bytes_per_s", "pcie_bandwidth_bytes_per_s", "l2_bytes", "sms"):
        if getattr(spec, field) is not None:
            assert spec.sources[field], field


@pytest.mark.parametrize(
    "name, key",
    [
        ("h100-sxm", "h100-sxm"),
        ("H100 SXM", "h100-sxm"),
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("nvidia h100 80gb hbm3", "h100-sxm"),
        ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
        ("NVIDIA A100-SXM4-40GB", "a100-40gb"),
        ("NVIDIA H200", "h200-sxm"),
        ("Tesla T4", "t4"),
        ("NVIDIA GeForce RTX 4090", "rtx-4090"),
        ("tpu_v5e", "tpu-v5e"),
        ("MI300X", "mi300x"),
        ("NVIDIA H100 NVL", "h100-nvl"),
        ("AMD Instinct MI300X", "mi300x"),
        ("AMD Instinct MI355X", "mi355x"),
        ("NVIDIA GB200", "gb200"),
        ("NVIDIA GH200 480GB", "gh200"),
        ("NVIDIA GeForce RTX 5090", "rtx-5090"),
        ("gaudi3", "gaudi3"),
        ("NVIDIA A10", "a10"),
    ],
)
def test_lookup_by_short_and_driver_names(name, key):
    assert get_spec(name).key == key


def test_match_driver_name_returns_none_for_unknown():
    assert match_driver_name("NVIDIA Quantum Accelerator 9000") is None


def test_unknown_name_suggests_close_matches():
    with pytest.raises(UnknownName) as exc:
        get_spec("h100-sx")
    assert "h100-sxm" in str(exc.value)
    assert "\n" not in str(exc.value)


def test_peak_accepts_torch_spellings_and_names_missing_dtypes():
    h100 = get_spec("h100-sxm")
    assert h100.peak("torch.bfloat16") == h100.peak("bf16")
    assert h100.peak("float32") == 67e12
    with pytest.raises(UnsupportedOnDevice, match="fp32, fp16, int8"):
        get_spec("t4").peak("bf16")
    with pytest.raises(InvalidInput):
        h100.peak("fp7")


def _spec(**overrides):
    fields = dict(
        key="x",
        name="X",
        vendor="V",
        kind="gpu",
        driver_names=(),
        peak_flops_per_s={"fp32": 1e12},
        memory_bytes=1e9,
        memory_bandwidth_bytes_per_s=1e11,
    )
    fields.update(overrides)
    return DeviceSpec(**fields)


def test_spec_validation():
    assert _spec().peak("fp32") == 1e12
    with pytest.raises(InvalidInput, match="fp32"):
        _spec(peak_flops_per_s={"fp32": -1.0})
    with pytest.raises(InvalidInput, match="kind"):
        _spec(kind="fpga")
    with pytest.raises(InvalidInput, match="bandwidth"):
        _spec(memory_bandwidth_bytes_per_s=0.0)
    with pytest.raises(InvalidInput, match="dtype"):
        _spec(peak_flops_per_s={"fp4": 1e12})


def test_entry_without_a_source_is_rejected():
    table = {
        "name": "X",
        "vendor": "V",
        "kind": "gpu",
        "memory_gib": 1,
        "memory_bandwidth_gb_per_s": 100,
        "l2_mib": 4,
        "dense_tflops": {"fp32": 1},
        "sources": {"datasheet": "https://example", "peaks": "p", "memory": "m"},
    }
    with pytest.raises(MalformedFile, match="l2_bytes"):
        catalog._spec_from_table("x", table)
    table["sources"]["l2"] = "whitepaper"
    spec = catalog._spec_from_table("x", table)
    assert spec.l2_bytes == 4 * 2**20
    assert spec.memory_bandwidth_bytes_per_s == 100e9


@pytest.mark.parametrize(
    "key, bf16_tflops, memory_gib, bandwidth_tb_s",
    [
        ("h100-nvl", 835.5, 94, 3.9),
        ("mi355x", 2516.6, 288, 8.0),
        ("gaudi3", 1835, 128, 3.67),
        ("gb200", 2500, 186, 8.0),
        ("gb300", 2500, 288, 8.0),
        ("mi300a", 980.6, 128, 5.3),
    ],
)
def test_new_entries_carry_their_datasheet_figures(key, bf16_tflops, memory_gib, bandwidth_tb_s):
    spec = get_spec(key)
    assert spec.peak("bf16") == pytest.approx(bf16_tflops * 1e12)
    assert spec.memory_bytes == memory_gib * 2**30
    assert spec.memory_bandwidth_bytes_per_s == pytest.approx(bandwidth_tb_s * 1e12)


def test_a_gpu_missing_from_the_catalog_is_not_matched_to_a_neighbour():
    # AWS's A10G differs from the A10 in tensor rates; no figure is guessed for it
    assert match_driver_name("NVIDIA A10G") is None
    assert match_driver_name("NVIDIA H100 NVL").key == "h100-nvl"
