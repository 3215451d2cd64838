"""The CLI reads the same way everywhere: list options, fractions, names, defaults."""

import json

import pytest
import typer

from ceiling.cli.app import app
from ceiling.cli.output import LIST_HELP
from ceiling.cli.roofline import op_list


def _json(cli, *args):
    code, out, err = cli(*args, "--json")
    assert code == 0, err
    return json.loads(out)


def _options(command, path: str = "ceiling"):
    """Every option of every command, with the command's path (typer's click or its own)."""
    for name, sub in getattr(command, "commands", {}).items():
        yield from _options(sub, f"{path} {name}")
    for param in command.params:
        if param.param_type_name == "option":
            yield path, param


def test_every_list_option_takes_commas_and_repeats():
    lists = [(path, p) for path, p in _options(typer.main.get_command(app)) if p.multiple]
    assert len(lists) >= 5  # amdahl/gustafson -n, decode --batch, roofline --op, ...
    for path, param in lists:
        assert LIST_HELP in (param.help or ""), f"{path} {param.opts[0]}"
    for path, param in _options(typer.main.get_command(app)):
        if "comma" in (param.help or "").lower():
            assert param.multiple, f"{path} {param.opts[0]} reads a comma list but not repeats"


def test_worker_lists(cli):
    for law in ("amdahl", "gustafson"):
        data = _json(cli, law, "0.9", "-n", "8,64", "-n", "256", "--workers", "1k")
        assert [r["n"] for r in data["rows"]] == [8, 64, 256, 1000]


def test_decode_batches_and_roofline_ops(cli):
    data = _json(
        cli, "decode", "llama-3-8b", "--spec", "h100-sxm", "--batch", "1,8", "--batch", "64"
    )
    assert [r["batch"] for r in data["rows"]] == [1, 8, 64]
    assert op_list(["add:1M,attention:1,2,64,16", "matmul:8x8x8"]) == [
        "add:1M",
        "attention:1,2,64,16",
        "matmul:8x8x8",
    ]
    data = _json(cli, "roofline", "--spec", "h100-sxm", "--op", "add:1M,attention:1,2,64,16")
    assert [r["op"] for r in data["ops"]] == [
        "add:1000000",
        "attention:1,2,64,16 (naive)",
        "attention:1,2,64,16 (fused)",
    ]


def _speedups(data):
    return [r["speedup"] for r in data["rows"]]


def test_amdahl_and_gustafson_take_the_same_fraction(cli):
    amdahl = _json(cli, "amdahl", "0.95", "-n", "64")
    assert _json(cli, "amdahl", "--parallel", "0.95", "-n", "64") == amdahl
    assert _speedups(_json(cli, "amdahl", "-s", "0.05", "-n", "64")) == pytest.approx(
        _speedups(amdahl)
    )
    gustafson = _json(cli, "gustafson", "-s", "0.05", "-n", "64")
    assert gustafson["alpha"] == 0.05 and gustafson["p"] == pytest.approx(0.95)
    for args in (["0.95"], ["-p", "0.95"]):
        same = _json(cli, "gustafson", *args, "-n", "64")
        assert _speedups(same) == pytest.approx(_speedups(gustafson))
    for args in (
        ["amdahl"],
        ["amdahl", "0.9", "-s", "0.1"],
        ["gustafson", "-p", "0.5", "-s", "0.5"],
    ):
        code, out, err = cli(*args)
        assert code == 2 and out == "" and "give the parallel fraction once" in err
    helps = []
    for law in ("amdahl", "gustafson"):
        code, out, _ = cli(law, "--help")
        assert code == 0 and "--parallel" in out and "--serial" in out
        helps.append(" ".join(out.split("Arguments:")[1].split("Options:")[0].split()))
    assert helps[0] == helps[1]  # the positional means the same in both


def test_roofline_spec_defaults_to_bf16(cli):
    data = _json(cli, "roofline", "--spec", "h100-sxm", "--op", "attention:1,32,4096,128")
    assert data["dtype"] == "bf16"
    naive, fused = data["ops"]
    assert naive["bound"] == "memory" and fused["bound"] == "compute"  # the memory wall
    assert _json(cli, "roofline", "--spec", "h100-sxm", "--dtype", "fp32")["dtype"] == "fp32"


def test_decode_largest_batch_at_a_stated_context(cli):
    data = _json(cli, "decode", "llama-3-8b", "--spec", "h100-sxm")
    assert data["context"] == 4096 and data["max_batch_context"] == 4096
    # (80 GiB - 16 GB of weights) / (4097 tokens x 128 KiB): about 130 sequences, not 532,827
    assert 120 <= data["max_batch"] <= 140
    code, out, _ = cli("decode", "llama-3-8b", "--spec", "h100-sxm")
    assert code == 0 and "largest batch that fits at context 4096" in out
    at = _json(cli, "decode", "llama-3-8b", "--spec", "h100-sxm", "--context", "2048")
    assert at["max_batch_context"] == 2048 and 250 <= at["max_batch"] <= 270
    small = _json(cli, "decode", "gpt2", "--spec", "h100-sxm")  # 1,024-token model
    assert small["max_batch_context"] == 1023
    # at context 0 (weights alone) the batch that fits is still given at a served context
    bare = _json(cli, "decode", "llama-3-8b", "--spec", "h100-sxm", "--context", "0")
    assert bare["context"] == 0 and bare["max_batch_context"] == 4096


def test_models_names_whole_and_plain_counts(cli):
    code, out, _ = cli("models")
    assert code == 0
    lines = out.splitlines()
    assert all(len(line) <= 80 for line in lines)
    from ceiling.model.model_catalog import model_names

    for name in model_names():
        assert any(line.startswith(name + " ") for line in lines), name
    header = next(line for line in lines if line.startswith("model"))
    assert header.split() == [
        "model", "params", "active", "l", "h", "heads/kv", "ffn", "kind", "ctx", "KV/tok"
    ]  # fmt: skip
    assert "e+" not in out
    mixtral = next(line for line in lines if line.startswith("mixtral-8x7b ")).split()
    assert mixtral[1:3] == ["46.70", "12.88"] and "gated" in mixtral


def test_fit_time_unit_and_weak(cli, tmp_path):
    csv = tmp_path / "t.csv"
    # 10 % serial, fixed problem, times in milliseconds
    csv.write_text("N,time\n" + "".join(f"{n},{100 * (0.1 + 0.9 / n)}\n" for n in (1, 2, 4, 8, 16)))
    data = _json(cli, "fit", csv, "--time-unit", "ms")
    assert data["time_unit"] == "ms" and data["points"][0]["time_s"] == pytest.approx(0.1)
    assert data["fit"]["gustafson"] is None  # never fitted to a fixed problem
    assert data["limits"]["amdahl"].startswith("Amdahl: 10 ms per run")
    code, out, _ = cli("fit", csv, "--time-unit", "ms")
    assert "100 ms" in out and "limit: Amdahl: 10 ms per run" in out
    weak = _json(cli, "fit", csv, "--weak")
    assert weak["mode"] == "weak" and weak["fit"]["gustafson"] is not None
    code, _, err = cli("fit", csv, "--weak", "--mode", "strong")
    assert code == 2 and "disagree" in err
    code, _, err = cli("fit", csv, "--time-unit", "fortnight")
    assert code == 2 and "--time-unit must be one of" in err


def test_straggler_defaults_show_one(cli):
    data = _json(cli, "simulate", "straggler")
    assert data["slowdown"] == pytest.approx(1.5) and data["efficiency"] < 0.7
    code, out, _ = cli("simulate", "straggler", "--slow", "1")
    assert code == 0 and "no straggler asked for" in out


def test_training_profile_ceiling_has_no_decode_reading(tmp_path):
    import torch

    from ceiling.hardware.profile import MachineProfile, MeasuredDevice, save_profile
    from ceiling.measure.decode import local_ceiling
    from ceiling.profile.ceiling import resolve_ceiling

    memory = [{"kernel": "copy", "best_gbps": 5.0}, {"kernel": "dot", "best_gbps": 8.0}]
    dev = MeasuredDevice(
        name="Test CPU",
        kind="cpu",
        peak_flops_per_s={"fp32": 50e9},
        bandwidth_bytes_per_s=5e9,
        extra={"memory": memory},
    )
    stamp = "2026-01-01T00:00:00+00:00"
    path = save_profile(MachineProfile(1, stamp, "h", {}, [dev]), tmp_path / "p.json")
    assert local_ceiling("cpu", path).spec.memory_bandwidth_bytes_per_s == 8e9  # decode: reads
    step = resolve_ceiling(torch.device("cpu"), "fp32", False, None, str(path))
    assert step.bandwidth_bytes_per_s == 5e9  # a training step writes too
    assert "decode" not in step.source and "dot" not in step.source


def test_plan_help_names_expert_parallelism_and_hf(cli):
    code, out, _ = cli("plan", "--help")
    assert code == 0
    text = " ".join(out.split())
    assert "expert parallelism (ep)" in text and "ep=8" in text and "hf:PATH" in text
    data = _json(cli, "plan", "mixtral-8x7b", "--spec", "h100-sxm", "-n", "64", "--fixed", "ep=8")
    assert {p["ep"] for p in data["plans"]} == {8}


def test_specs_alias_says_what_it_resolved_to(cli):
    code, out, _ = cli("specs", "h100")
    assert code == 0
    first = out.splitlines()[0]
    assert first.startswith("h100 is h100-sxm (also: ") and "h100-pcie" in first
    assert _json(cli, "specs", "h100")["resolved"] == first
    code, out, _ = cli("specs", "h100-sxm")
    assert " is h100-sxm" not in out
    header = next(line for line in out.splitlines() if "dtype" in line and "peak" not in line)
    assert header.count("TFLOP/s") == 1 and "FLOP/s" not in header.replace("TFLOP/s", "")


def test_specs_list_has_one_16_bit_column(cli):
    code, out, _ = cli("specs")
    assert code == 0
    head = out.split("┡")[0]  # the header, wrapped over lines
    assert "bf16" in head and "fp8" in head and "fp16" not in head
    v100 = next(line for line in out.splitlines() if " v100 " in line)
    assert "125.0 fp16" in v100  # no bf16 on a V100: its fp16 figure, labelled


def test_every_spec_option_says_it_takes_a_file_and_a_key_in_it(cli, tmp_path):
    """--spec takes FILE.toml#KEY wherever it is taken; its help says so alike."""
    from ceiling.hardware.spec_template import template_text

    paths = {path for path, p in _options(typer.main.get_command(app)) if "--spec" in p.opts}
    named = {f"ceiling {c}" for c in ("plan", "decode", "roofline", "profile", "bench comm")}
    assert named <= paths
    for path, param in _options(typer.main.get_command(app)):
        if path in named and "--spec" in param.opts:
            assert "FILE.toml#KEY picks one of several devices" in param.help, path
    two = tmp_path / "two.toml"
    text = template_text()
    two.write_text(text + "\n" + text.replace("[my-gpu", "[slow-gpu").replace("= 800", "= 8"))
    for key, bf16_tflops in (("my-gpu", 800), ("slow-gpu", 8)):
        data = _json(cli, "roofline", "--spec", f"{two}#{key}", "--op", "matmul:4096x4096x4096")
        assert data["peak_flops_per_s"] == bf16_tflops * 1e12, key
    code, _, err = cli("roofline", "--spec", str(two), "--op", "add:1M")
    assert code == 2 and f"pick one with {two}#my-gpu" in err
