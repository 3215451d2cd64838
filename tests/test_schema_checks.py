"""Device files, profiles, `--fixed`, `custom:` and `hf:` models: a value no real device or
model has is refused where it is read, naming the field, its range, and the closest known
name for a misspelt one."""

from __future__ import annotations

import json

import pytest

from ceiling.errors import CeilingError, InvalidInput, MalformedFile
from ceiling.model.plan.axes import parse_fixed
from test_bad_files import _one_line

DEVICE = """[d]
name = "D"
vendor = "V"
kind = "gpu"
memory_gib = 80
memory_bandwidth_gb_per_s = 3000
link_gb_per_s_one_way = 450
dense_tflops = { bf16 = 900 }
sources = { datasheet = "x", peaks = "x", memory = "x", link = "x" }
[d.cluster]
matmul_efficiency = 0.7
"""


@pytest.mark.parametrize(
    "old, new, words",
    [
        ("matmul_efficiency = 0.7", "matmul_efficiency = nan", ("cluster.matmul_efficiency",)),
        ("matmul_efficiency = 0.7", "matmul_efficiency = inf", ("(0, 1]",)),
        ("matmul_efficiency = 0.7", "matmul_efficiency = 0", ("(0, 1]",)),
        ("matmul_efficiency = 0.7", "matmul_efficiency = -0.5", ("(0, 1]",)),
        ("matmul_efficiency = 0.7", "inter_node_gb_per_s = nan", ("cluster.inter_node",)),
        ("matmul_efficiency = 0.7", "inter_node_gb_per_s = 0", ("cluster.inter_node",)),
        ("matmul_efficiency = 0.7", "devices_per_node = 0", ("devices_per_node", "[1,")),
        ("matmul_efficiency = 0.7", "step_jitter = -1", ("step_jitter",)),
        ("link_gb_per_s_one_way = 450", "link_gb_per_s_one_way = 1e-300", ("link_gb",)),
        ("link_gb_per_s_one_way = 450", "link_gb_per_s_one_way = true", ("a number",)),
        ("bf16 = 900", "bf16 = inf", ("dense_tflops.bf16",)),
        ("memory_gib = 80", "memory_gib = -1", ("memory_gib",)),
        ("matmul_efficiency", "matmul_eficiency", ("did you mean 'cluster.matmul_efficiency'",)),
    ],
)
@pytest.mark.parametrize("command", ["specs", "decode", "roofline", "plan"])
def test_a_device_file_out_of_range_is_refused_by_every_command(
    cli, tmp_path, old, new, words, command
):
    path = tmp_path / "d.toml"
    path.write_text(DEVICE.replace(old, new))
    args = {
        "specs": ["specs", path],
        "decode": ["decode", "gpt:tiny", "--spec", path],
        "roofline": ["roofline", "--op", "add:1000", "--spec", path],
        "plan": ["plan", "gpt:tiny", "--gpus", "8", "--spec", path],
    }[command]
    _one_line(*cli(*args)[::2], "d.toml", *words)


def test_the_sound_device_file_is_read(cli, tmp_path):
    path = tmp_path / "d.toml"
    path.write_text(DEVICE)
    assert cli("specs", path)[0] == 0


def test_the_built_in_catalog_is_within_the_schema():
    from ceiling.hardware.catalog import all_specs

    assert len(all_specs()) > 10


@pytest.mark.parametrize("version", [-1, 0, "2", 2.5, True, None])
def test_a_profile_method_version_of_the_wrong_type_or_value_is_named(tmp_path, version):
    from ceiling.hardware.profile import MachineProfile, MeasuredDevice, load_profile

    device = MeasuredDevice("cpu", "cpu", {"fp32": 1e11}, 1e10)
    data = MachineProfile(2, "2026-01-01", "h", {}, [device]).to_json()
    path = tmp_path / "p.json"
    path.write_text(json.dumps({**data, "method_version": version}))
    with pytest.raises(MalformedFile, match="method_version"):
        load_profile(path)
    path.write_text(json.dumps({**data, "method_version": 1}))  # older, still the same figures
    assert load_profile(path).method_version == 1


@pytest.mark.parametrize(
    "text, words",
    [
        ("d=2,d=4", "d is given twice"),
        ("b=2,micro_batch=4", "micro_batch is given twice"),
        ("d=2,,t=2", "empty entry"),
        (",", "empty entry"),
        ("=2", "expected KEY=VALUE"),
    ],
)
def test_fixed_refuses_empty_and_repeated_keys(text, words):
    with pytest.raises(InvalidInput, match=words):
        parse_fixed(text)


@pytest.mark.parametrize(
    "model, words",
    [
        ("custom:layers=2,hidden=64,heads=4,bias=maybe", "true or false"),
        ("custom:layers=2,hidden=64,heads=4,trained_dropout=2.5", "true or false"),
        ("custom:layers=2,layers=3,hidden=64,heads=4", "layers is given twice"),
        ("custom:layrs=2,hidden=64,heads=4", "did you mean layers"),
        ("custom:layers=1e12,hidden=64,heads=4", "at most 131,072"),
        ("custom:layers=2,hidden=1e400,heads=4", "hidden"),
    ],
)
def test_custom_models_name_booleans_repeats_and_bounds(model, words):
    from ceiling.model.transformer import parse_model

    with pytest.raises(InvalidInput, match=words):
        parse_model(model)


def test_custom_booleans_are_read_as_booleans():
    from ceiling.model.transformer import parse_model

    cfg = parse_model("custom:layers=2,hidden=64,heads=4,trained_dropout=no,bias=yes")
    assert cfg.trained_dropout is False and cfg.bias is True


@pytest.mark.parametrize("layers", [2**70, 10**12])
def test_hf_configs_with_impossible_layer_counts_are_refused_with_the_bound(tmp_path, layers):
    from ceiling.model.transformer import parse_model

    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "model_type": "llama",
                "num_hidden_layers": layers,
                "hidden_size": 64,
                "num_attention_heads": 4,
                "intermediate_size": 128,
                "vocab_size": 100,
            }
        )
    )
    with pytest.raises(CeilingError, match="layers must be at most 131,072"):
        parse_model(f"hf:{tmp_path}")
