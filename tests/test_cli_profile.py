import json
import textwrap

import pytest


@pytest.fixture(scope="module")
def tiny_train(tmp_path_factory):
    """One gpt:tiny training profile, shared by the tests that read it."""
    from typer.testing import CliRunner

    from ceiling.cli.app import app

    args = ["profile", "gpt:tiny", "--train", "--json", "--steps", "2", "--batch", "2"]
    result = CliRunner().invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_profile_gpt_tiny_train_reports_mfu_and_ops(tiny_train):
    d = tiny_train
    assert d["train"] and d["tokens_per_step"] == 2 * 256
    for key in ("mfu", "hfu", "model_flops_per_step", "analytic_flops_per_step"):
        assert d[key] > 0
    assert 0 < d["mfu"] <= 1.5
    # HFU adds the fused attention backward's recomputed scores, a quarter of forward attention
    assert d["hfu"] > d["mfu"]
    assert d["recomputed_flops_per_step"] == pytest.approx(
        d["hardware_flops_per_step"] - d["model_flops_per_step"]
    )
    assert d["analytic_flops_per_step"] == pytest.approx(d["model_flops_per_step"], rel=0.10)
    assert d["attention_convention"] == "causal-half"
    # the published convention counts attention in full: the same step, more FLOPs
    full = d["model_flops_per_step_full_attention"]
    assert d["mfu_full_attention"] == pytest.approx(d["mfu"] * full / d["model_flops_per_step"])
    assert d["mfu_full_attention"] > d["mfu"]
    assert full == pytest.approx(d["analytic_flops_per_step_full_attention"], rel=0.10)
    assert d["unknown_ops"] == [] and d["mfu_is_lower_bound"] is False
    ops = {o["name"]: o for o in d["ops"]}
    for o in d["ops"]:
        assert {"name", "flops", "bytes", "time_s", "bound"} <= set(o)
        assert o["bound"] in ("compute", "memory", "overhead")  # every op has a formula
    assert ops["aten.mm"]["flops"] > 0 and ops["aten.mm"]["time_s"] > 0
    assert ops["aten._scaled_dot_product_flash_attention_for_cpu"]["flops"] > 0
    assert ops["aten._scaled_dot_product_flash_attention_for_cpu_backward"]["flops"] > 0
    roofs = d["roofs"]
    assert sum(b["seconds"] for b in roofs["waterfall"]) == pytest.approx(d["step_s"], rel=1e-12)
    assert roofs["step_bound"] in ("compute", "memory", "overhead") and roofs["per_op_s"] > 0
    assert roofs["predicted_step_s"] == pytest.approx(sum(roofs["predicted_by_bound_s"].values()))


def test_profile_counted_flops_match_the_transformer_formula(tiny_train):
    import torch

    from ceiling.workloads.gpt import build_gpt, preset_config

    cfg = preset_config("tiny")
    tokens, s = 2 * 256, 256
    model = build_gpt("tiny", device="meta")
    matmul_weights = sum(
        m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear)
    )
    # forward + backward: 6 per matmul weight per token, plus attention at half (causal),
    # its backward twice the forward (the fused kernel's recompute counts as hardware only)
    expected = tokens * (6 * matmul_weights + 0.5 * 3 * cfg.attention_flops_per_token(s))
    assert tiny_train["model_flops_per_step"] == pytest.approx(expected, rel=1e-9)


def test_profile_human_output_and_plot(cli, tmp_path):
    fig = tmp_path / "roof.png"
    code, out, err = cli("profile", "mlp", "--steps", "1", "--batch", "8", "--plot", fig)
    assert code == 0, err
    assert "MFU" in out and "Top ops by time" in out and "addmm" in out
    assert fig.exists() and fig.stat().st_size > 0
    assert "Three roofs" in out and "Waterfall (bars sum to the measured step)" in out
    assert (tmp_path / "roof-waterfall.png").stat().st_size > 0


def _one_line_error(cli, *args, match):
    code, _out, err = cli(*args)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    assert match in lines[0]


def test_missing_module_and_callable(cli, tmp_path):
    _one_line_error(cli, "profile", "no_such_module_xyz:build", match="cannot import")
    f = tmp_path / "user_model.py"
    f.write_text("x = 1\n")
    _one_line_error(cli, "profile", f"{f}:build", match="no callable 'build'")
    _one_line_error(cli, "profile", "resnet", match="unknown target")


def test_callable_that_raises(cli, tmp_path):
    f = tmp_path / "broken.py"
    f.write_text("def build():\n    raise ValueError('weights file missing')\n")
    _one_line_error(cli, "profile", f"{f}:build", match="ValueError: weights file missing")


def test_model_that_does_not_fit(cli, tmp_path):
    f = tmp_path / "huge.py"
    f.write_text(
        textwrap.dedent(
            """
            import torch
            def build():
                with torch.device("meta"):
                    model = torch.nn.Linear(1_000_000, 1_000_000)   # 10^12 parameters
                return {"model": model, "batch": torch.randn(2, 1_000_000, device="meta")}
            """
        )
    )
    _one_line_error(cli, "profile", f"{f}:build", "--train", match="GiB free")


def test_user_callable_runs(cli, tmp_path):
    f = tmp_path / "mine.py"
    f.write_text(
        textwrap.dedent(
            """
            import torch
            def build():
                model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU())
                return {"model": model, "batch": torch.randn(16, 32)}
            """
        )
    )
    code, out, err = cli("profile", f"{f}:build", "--train", "--json", "--steps", "1")
    assert code == 0, err
    d = json.loads(out)
    # forward 2·16·32·64, weight gradient the same; the input needs no gradient
    assert d["model_flops_per_step"] == 2 * (2 * 16 * 32 * 64)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (("--dtype", "tf32"), "GPU tensor-core"),
        (("--dtype", "fp8"), "no fp8 peak"),
        (("--dtype", "int8"), "cannot be used for a model"),
        (("--spec", "no-such-gpu"), "no-such-gpu"),
    ],
)
def test_dtype_or_device_the_machine_cannot_run(cli, args, match):
    _one_line_error(cli, "profile", "mlp", *args, match=match)


def test_cuda_requested_without_a_gpu(cli):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    _one_line_error(cli, "profile", "mlp", "--device", "cuda", match="no CUDA device")


@pytest.mark.gpu
def test_profile_on_cuda_uses_the_dtype_peak_and_counts_fused_attention(cli):
    code, out, err = cli(
        "profile", "gpt:tiny", "--train", "--device", "cuda", "--dtype", "bf16", "--json",
        "--steps", "3",
    )  # fmt: skip
    assert code == 0, err
    d = json.loads(out)
    assert d["ceiling"]["peak_dtype"] == "bf16" and d["ceiling"]["kind"] == "gpu"
    assert 0 < d["mfu"] < 1 and d["hfu"] > d["mfu"]
    attention = [o for o in d["ops"] if o["category"] == "attention"]
    assert attention and all(o["flops"] > 0 and o["time_s"] > 0 for o in attention)
    assert d["analytic_flops_per_step"] == pytest.approx(d["model_flops_per_step"], rel=0.10)


@pytest.mark.gpu
def test_tf32_switches_the_peak(cli):
    code, out, err = cli("profile", "mlp", "--device", "cuda", "--dtype", "tf32", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["tf32"] and d["ceiling"]["peak_dtype"] == "tf32"


def test_a_saved_profile_gives_the_roof_and_a_second_mfu(cli, tmp_path):
    from ceiling.hardware.profile import MachineProfile, MeasuredDevice, save_profile

    measured = MeasuredDevice(
        name="test cpu",
        kind="cpu",
        peak_flops_per_s={"fp32": 50e9},
        bandwidth_bytes_per_s=10e9,
    )
    path = save_profile(MachineProfile(1, "2026-01-01T00:00:00Z", "h", {}, [measured]),
                        tmp_path / "p.json")  # fmt: skip
    code, out, err = cli("profile", "mlp", "--profile", path, "--json", "--steps", "1")
    assert code == 0, err
    d = json.loads(out)
    c = d["ceiling"]
    assert c["measured_peak_flops_per_s"] == 50e9 == c["roofline_peak_flops_per_s"]
    assert c["bandwidth_bytes_per_s"] == 10e9
    assert d["mfu_of_achievable"] == pytest.approx(d["mfu"] * c["peak_flops_per_s"] / 50e9)
    # ops sit under the memory roof the step's working set reads from (DRAM, or the cache)
    ridge = 50e9 / d["roofs"]["memory_roof_bytes_per_s"]
    for o in d["ops"]:
        if o["intensity_flop_per_byte"] is not None and o["bound"] != "overhead":
            assert o["bound"] == ("memory" if o["intensity_flop_per_byte"] < ridge else "compute")


def test_model_that_fails_while_running(cli, tmp_path):
    f = tmp_path / "mismatch.py"
    f.write_text(
        "import torch\n"
        "def build():\n"
        "    return {'model': torch.nn.Linear(8, 4), 'batch': torch.randn(2, 5)}\n"
    )
    _one_line_error(cli, "profile", f"{f}:build", "--train", match="failed while running")


def test_meta_device_counts_without_running(cli, tiny_train):
    code, out, err = cli(
        "profile", "gpt:tiny", "--train", "--device", "meta", "--batch", "2", "--json",
        "--spec", "h100-sxm", "--dtype", "bf16",
    )  # fmt: skip
    assert code == 0, err
    d = json.loads(out)
    assert d["mfu"] is None and d["step_s"] is None
    assert all(o["time_s"] is None for o in d["ops"])
    from ceiling.hardware.catalog import get_spec

    assert d["ceiling"]["peak_dtype"] == "bf16"
    assert d["ceiling"]["peak_flops_per_s"] == get_spec("h100-sxm").peak("bf16")
    # the same counts as the real CPU run (fused CPU attention is chosen on fake CPU tensors)
    assert d["model_flops_per_step"] == tiny_train["model_flops_per_step"]


def test_spec_of_another_device_is_stated(cli):
    code, out, err = cli("profile", "mlp", "--spec", "h100-sxm", "--json", "--steps", "1")
    assert code == 0, err
    d = json.loads(out)
    assert "the step ran on this cpu" in d["ceiling"]["source"]
    assert d["mfu"] < 0.01  # a CPU step against an H100's peak


def test_catalog_model_on_meta_counts_without_running(cli):
    code, out, err = cli(
        "profile", "gpt2", "--train", "--device", "meta", "--batch", "1", "--seq", "64", "--json"
    )  # fmt: skip
    assert code == 0, err
    d = json.loads(out)
    from ceiling.model.transformer import get_model

    cfg = get_model("gpt2")
    # the built decoder's counted FLOPs are the catalog's 6N + 12·l·a·d·s, attention at half
    expected = 64 * (
        cfg.flops_per_token(64, training=True) - 1.5 * cfg.attention_flops_per_token(64)
    )
    assert d["model_flops_per_step"] == pytest.approx(expected, rel=1e-12)
    assert d["analytic_flops_per_step"] == pytest.approx(expected, rel=1e-12)
    assert d["mfu"] is None and d["roofline_step_s"] > 0 and d["recorded_step_s"] is None


def test_catalog_model_too_large_to_run_points_at_meta(cli):
    import psutil

    # 6.74e9 parameters × 4 B × 4 (weights, gradients, Adam) ≈ 100 GiB
    if psutil.virtual_memory().available < 90 * 2**30:
        _one_line_error(cli, "profile", "llama-2-7b", "--train", match="--device meta")
    _one_line_error(cli, "profile", "mixtral-8x7b", "--device", "meta", match="mixture-of-experts")
    _one_line_error(cli, "profile", "llama-9", match="catalog model")


def test_help_states_the_callable_contract(cli):
    code, out, _ = cli("profile", "--help")
    assert code == 0
    text = " ".join(out.split())
    for part in ("module:callable", "'model': nn.Module", "'batch'", "loss_fn", "--device meta"):
        assert part in text


def test_tf32_on_meta_counts_against_the_specs_tf32_peak(cli):
    code, out, err = cli(
        "profile", "mlp", "--device", "meta", "--dtype", "tf32", "--spec", "h100-sxm", "--json"
    )  # fmt: skip
    assert code == 0, err
    d = json.loads(out)
    from ceiling.hardware.catalog import get_spec

    assert d["tf32"] and d["ceiling"]["peak_dtype"] == "tf32"
    assert d["ceiling"]["peak_flops_per_s"] == get_spec("h100-sxm").peak("tf32")


def test_noisy_step_times_are_said():
    from ceiling.profile.run import _noise_hint

    assert _noise_hint([0.1, 0.1, 0.1]) == []
    assert _noise_hint([0.1, 0.4]) == []  # too few to tell
    (text,) = _noise_hint([0.1, 0.2, 0.3, 0.4])
    assert text.startswith("step times vary from 100 to 400 ms")
    assert "MFU is uncertain" in text
