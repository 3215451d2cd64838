"""A user's own devices: --spec FILE.toml, CEILING_CATALOG, `ceiling specs --template`."""

import json

import pytest

from ceiling.errors import InvalidInput, MalformedFile, UnknownName
from ceiling.hardware import catalog
from ceiling.hardware.catalog import all_specs, get_spec, match_driver_name
from ceiling.hardware.spec_template import spec_to_toml, template_text
from ceiling.model.cluster import make_cluster

ENTRY = """\
[lab-gpu]
name = "Lab GPU 48GB"
vendor = "Example"
kind = "gpu"
driver_names = ["Example Lab GPU 48GB"]
memory_gib = 48
memory_bandwidth_gb_per_s = 960
l2_mib = 96

[lab-gpu.dense_tflops]
fp32 = 90
bf16 = 180

[lab-gpu.sources]
datasheet = "lab measurement sheet"
peaks = "vendor slide"
memory = "vendor slide"
l2 = "whitepaper"
"""


@pytest.fixture
def entry_file(tmp_path):
    path = tmp_path / "lab.toml"
    path.write_text(ENTRY)
    return path


def _write(tmp_path, text, name="mine.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_template_loads_back_unchanged(tmp_path):
    text = template_text()
    spec = get_spec(str(_write(tmp_path, text)))
    assert spec.key == "my-gpu" and spec.kind == "gpu"
    assert spec.peak("bf16") == 800e12 and spec.memory_bytes == 80 * 2**30
    assert spec.pcie_bandwidth_bytes_per_s == 64e9
    assert spec.cluster_defaults["devices_per_node"] == 8
    assert spec_to_toml(spec) == text  # read, written again: the very same text


@pytest.mark.parametrize("spec", all_specs(), ids=lambda s: s.key)
def test_every_catalog_entry_round_trips_through_a_file(tmp_path, spec):
    again = get_spec(str(_write(tmp_path, spec_to_toml(spec))))
    assert again.peak_flops_per_s == pytest.approx(spec.peak_flops_per_s, rel=1e-12)
    assert again.memory_bytes == pytest.approx(spec.memory_bytes, rel=1e-12)
    assert again.memory_bandwidth_bytes_per_s == pytest.approx(spec.memory_bandwidth_bytes_per_s)
    for f in ("link_bandwidth_bytes_per_s", "pcie_bandwidth_bytes_per_s", "l2_bytes", "sms"):
        assert getattr(again, f) == pytest.approx(getattr(spec, f)), f
    assert again.sources == spec.sources
    assert (again.name, again.kind, again.driver_names) == (spec.name, spec.kind, spec.driver_names)
    assert (again.compute_capability, again.gcn_arch) == (spec.compute_capability, spec.gcn_arch)


def test_a_detected_cpu_round_trips_through_a_file(tmp_path, monkeypatch):
    """This machine's CPU (no document: one source for all its numbers) written as a spec
    file loads back, so `--spec` can name it (`plan` on this CPU)."""
    from ceiling.hardware.resolve import this_machine

    monkeypatch.setenv("CEILING_PROFILE", str(tmp_path / "no-profile.json"))
    spec = this_machine("cpu", read_bandwidth=lambda: 12.5e9).spec
    again = get_spec(str(_write(tmp_path, spec_to_toml(spec))))
    assert again.peak_flops_per_s == pytest.approx(spec.peak_flops_per_s, rel=1e-12)
    assert (again.kind, again.memory_bandwidth_bytes_per_s) == ("cpu", 12.5e9)
    told = spec.sources["all"]
    assert again.sources["datasheet"] == again.sources["peak_flops_per_s"] == told


def test_spec_file_is_read_wherever_a_name_is(entry_file):
    spec = get_spec(str(entry_file))
    assert spec.key == "lab-gpu" and spec.origin == str(entry_file)
    assert spec.peak("bf16") == 180e12 and spec.l2_bytes == 96 * 2**20
    assert get_spec(f"{entry_file}#lab-gpu") == spec
    with pytest.raises(UnknownName, match="has no \\[other\\]"):
        get_spec(f"{entry_file}#other")


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            ("memory_gib = 48", "memory_gbi = 48"),
            "unknown field 'memory_gbi' (did you mean 'memory_gib'?)",
        ),
        (("memory_gib = 48", 'memory_gib = "48GB"'), "field 'memory_gib' must be a number"),
        (("bf16 = 180", "bfloat = 180"), "unknown field 'dense_tflops.bfloat'"),
        (('l2 = "whitepaper"\n', ""), "l2_bytes has no source (sources.l2)"),
        (('kind = "gpu"', 'kind = "fpga"'), "kind must be one of"),
        (('name = "Lab GPU 48GB"\n', ""), "missing field 'name'"),
        (("[lab-gpu.dense_tflops]", "[lab-gpu.dense_tflops"), "not valid TOML"),
    ],
)
def test_a_mistake_gets_one_line_naming_the_field_and_file(tmp_path, edit, message):
    path = _write(tmp_path, ENTRY.replace(*edit))
    with pytest.raises(MalformedFile) as exc:
        get_spec(str(path))
    text = str(exc.value)
    assert message in text and str(path) in text
    assert "\n" not in text


def test_a_missing_file_and_a_file_of_several_devices_are_refused(tmp_path, entry_file):
    with pytest.raises(InvalidInput, match="does not exist"):
        get_spec(str(tmp_path / "nothere.toml"))
    two = _write(tmp_path, ENTRY + "\n" + ENTRY.replace("lab-gpu", "lab-gpu-2"), "two.toml")
    with pytest.raises(InvalidInput, match=r"pick one with .*#lab-gpu"):
        get_spec(str(two))
    assert get_spec(f"{two}#lab-gpu-2").key == "lab-gpu-2"


def test_catalog_directories_add_entries_found_by_driver_name(tmp_path, monkeypatch, entry_file):
    other = tmp_path / "more"
    other.mkdir()
    (other / "b.toml").write_text(ENTRY.replace("lab-gpu", "lab-gpu-b").replace("Lab GPU", "B"))
    monkeypatch.setenv("CEILING_CATALOG", f"{tmp_path}{catalog.os.pathsep}{other}")
    assert match_driver_name("Example Lab GPU 48GB").key == "lab-gpu"
    assert get_spec("lab-gpu-b").origin == str(other / "b.toml")
    assert {"lab-gpu", "lab-gpu-b", "h100-sxm"} <= {s.key for s in all_specs()}
    monkeypatch.delenv("CEILING_CATALOG")
    assert match_driver_name("Example Lab GPU 48GB") is None


def test_catalog_directory_cannot_redefine_a_built_in_name(tmp_path, monkeypatch):
    _write(tmp_path, ENTRY.replace('["Example Lab GPU 48GB"]', '["NVIDIA H100 80GB HBM3"]'))
    monkeypatch.setenv("CEILING_CATALOG", str(tmp_path))
    with pytest.raises(MalformedFile, match=r"already names \[h100-sxm\]"):
        all_specs()
    monkeypatch.setenv("CEILING_CATALOG", str(tmp_path / "missing"))
    with pytest.raises(InvalidInput, match=r"CEILING_CATALOG: .* is not a directory"):
        all_specs()


def test_a_device_file_carries_its_cluster_defaults(tmp_path, entry_file):
    text = ENTRY + (
        "\n[lab-gpu.cluster]\ndevices_per_node = 4\ninter_node_gb_per_s = 25\n"
        "matmul_efficiency = 0.5\nattention_efficiency = 0.4\n\n"
        '[lab-gpu.cluster.sources]\nnetwork = "2x 400G per node"\n'
    )
    spec = get_spec(str(_write(tmp_path, text)))
    cluster = make_cluster(spec, 8)
    assert (cluster.nodes, cluster.devices_per_node) == (2, 4)
    assert cluster.inter_node_bandwidth_bytes_per_s == 25e9
    assert cluster.matmul_efficiency == 0.5 and cluster.attention_efficiency == 0.4
    assert "lab-gpu.cluster" in cluster.efficiency_source
    assert cluster.sources["network"] == "2x 400G per node"
    bad = _write(tmp_path, text.replace("devices_per_node", "device_per_node"), "bad.toml")
    with pytest.raises(MalformedFile, match=r"did you mean .cluster\.devices_per_node."):
        get_spec(str(bad))


def test_cli_specs_template_file_and_typo(cli, tmp_path, entry_file):
    code, out, _ = cli("specs", "--template")
    assert code == 0 and out == template_text()
    code, out, _ = cli("specs", "--template", "h100-sxm")
    assert code == 0 and "[h100-sxm]\n" in out and "bf16 = 989.5" in out
    code, out, _ = cli("specs", str(entry_file), "--json")
    assert code == 0 and json.loads(out)["origin"] == str(entry_file)
    code, out, _ = cli("roofline", "--spec", str(entry_file), "--json")
    assert code == 0 and "Lab GPU" in out
    bad = _write(tmp_path, ENTRY.replace("memory_gib", "memory_gbi"), "bad.toml")
    code, out, err = cli("plan", "gpt2", "--spec", str(bad), "--gpus", "8")
    assert code == 2
    assert err.strip().count("\n") == 0 and "memory_gbi" in err and str(bad) in err


@pytest.mark.parametrize(
    "edit, field",
    [
        (("memory_gib = 48", "memory_gib = 0"), "memory_gib' must be in (0, 1e+09], got 0"),
        (("memory_gib = 48", "memory_gib = -48"), "memory_gib' must be in (0, 1e+09], got -48"),
        (("memory_bandwidth_gb_per_s = 960", "memory_bandwidth_gb_per_s = 0"), "bandwidth"),
        (("memory_bandwidth_gb_per_s = 960", "memory_bandwidth_gb_per_s = -1"), "bandwidth"),
        (("memory_gib = 48", "memory_gib = 48\nlink_gb_per_s_one_way = 0"), "link_gb_per_s"),
        (("bf16 = 180", "bf16 = 0"), "dense_tflops.bf16' must be in [1e-06, 1e+09], got 0"),
        (("bf16 = 180", "bf16 = -180"), "dense_tflops.bf16' must be in [1e-06, 1e+09], got -180"),
        (("l2_mib = 96", "l2_mib = 0"), "l2_mib' must be in (0, 1e+09], got 0"),
    ],
)
def test_no_memory_bandwidth_or_peak_of_zero_or_less(cli, tmp_path, edit, field):
    """A device of no memory made `plan` divide by zero; each such figure is refused where
    the file is read, in one line naming the field, before any command uses it."""
    path = _write(tmp_path, ENTRY.replace(*edit))
    code, out, err = cli("plan", "llama-2-7b", "--spec", path, "--gpus", "8")
    assert code == 2 and out == ""
    assert err.startswith(f"error: {path} [lab-gpu]: field '") and field in err
    assert err.count("\n") == 1


def test_a_device_of_unknown_memory_gets_no_headroom_hint():
    """A saved profile that could not read the memory size carries 0 bytes: no hint is
    worked out from it (it divided by zero)."""
    from ceiling.model.plan.search import _headroom_hint

    assert _headroom_hint(10 * 2**30, 0.0, 0.1) == ""
    assert _headroom_hint(10 * 2**30, 20 * 2**30, 0.1).endswith("(50% of the device kept free)")
