import json

import pytest

NARAYANAN_39B = (
    "custom:layers=48,hidden=8192,heads=64,vocab=51200,max_seq=2048,norm=layernorm,bias=true,"
    "learned_positions=true"
)
BASE = ["plan", "gpt3-175b", "--spec", "a100-80gb", "--global-batch", "1536", "--seq", "2048"]


def test_plan_json_has_the_ranked_plans(cli):
    code, out, err = cli(*BASE, "--gpus", "1024", "--json")
    assert code == 0, err
    data = json.loads(out)
    plans = data["plans"]
    assert len(plans) == 5
    for key in (
        "d",
        "t",
        "p",
        "micro_batch",
        "zero",
        "recompute",
        "memory_bytes_per_device",
        "fits",
        "step_time_s",
        "mfu",
        "hw_tflops_per_device",
    ):
        assert key in plans[0]
    assert plans[0]["t"] <= data["cluster"]["devices_per_node"]
    assert plans[0]["d"] * plans[0]["t"] * plans[0]["p"] * plans[0]["cp"] == 1024
    assert [p["step_time_s"] for p in plans] == sorted(p["step_time_s"] for p in plans)
    assert data["assumptions"]["matmul_efficiency"] == data["cluster"]["matmul_efficiency"]


def test_plan_table_names_the_best_and_why_others_lose(cli):
    code, out, _ = cli(*BASE, "--gpus", "1024", "--top", "3", "--tokens", "300e9")
    assert code == 0
    assert "valid plans fit" in out and "#2 vs #1:" in out and "best step" in out
    assert "tokens in" in out and "matmul efficiency 0.72" in out


def test_fixed_narayanan_row_predicts_reported_tflops(cli):
    code, out, err = cli(
        "plan",
        NARAYANAN_39B,
        "--spec",
        "a100-80gb",
        "--gpus",
        "512",
        "--global-batch",
        "1536",
        "--seq",
        "2048",
        "--fixed",
        "d=32,t=8,p=2,recompute=full,tp_overlap=off",  # 2021: no TP overlap
        "--attention",  # Megatron-LM's 2021 kernels
        "unfused",
        "--json",
    )
    assert code == 0, err
    best = json.loads(out)["plans"][0]
    assert (best["d"], best["t"], best["p"], best["recompute"]) == (32, 8, 2, "full")
    assert abs(best["hw_tflops_per_device"] / 138 - 1) < 0.15


def test_scaling_view(cli):
    code, out, _ = cli(*BASE, "--gpus", "1024", "--scaling", "3", "--json")
    assert code == 0
    rows = json.loads(out)["scaling"]
    assert [r["devices"] for r in rows] == [1024, 2048, 4096, 8192]
    assert rows[0]["speedup"] == 1.0 and rows[-1]["speedup"] > rows[1]["speedup"]


def test_bad_input_is_one_line_and_exit_2(cli):
    cases = [
        (["--gpus", "1024", "--fixed", "d=8,t=8,p=8"], "512 devices but the cluster has 1024"),
        (["--gpus", "1024", "--fixed", "t=7"], "heads(96) % t(7) = 5"),
        (["--gpus", "8"], "no plan fits"),
        (["--gpus", "1001"], "1001 % 8 = 1"),
        (["--gpus", "0"], "--gpus"),
        (["--gpus", "64", "--fixed", "bogus=1"], "unknown key"),
        (["--gpus", "64", "--attention", "magic"], "--attention"),
    ]
    for extra, msg in cases:
        code, out, err = cli(*BASE, *extra)
        assert code == 2, (extra, out, err)
        assert err.count("\n") == 1 and err.startswith("error: "), err
        assert msg in err, (msg, err)
    code, _, err = cli("plan", "gpt-9", "--spec", "a100-80gb", "--gpus", "8")
    assert code == 2 and "unknown model" in err
    code, _, err = cli("plan", "gpt3-175b", "--spec", "a100-80gb", "--profile", "x.json", "-n", "8")
    assert code == 2 and "not both" in err


def test_a_measured_profile_sets_the_efficiency(cli, tmp_path):
    from ceiling.hardware.profile import MachineProfile, MeasuredDevice, save_profile

    device = MeasuredDevice(
        name="NVIDIA H100 80GB HBM3",
        kind="cuda",
        peak_flops_per_s={"bf16": 700e12},
        bandwidth_bytes_per_s=2.9e12,
    )
    path = tmp_path / "profile.json"
    save_profile(MachineProfile(1, "2026-01-01T00:00:00Z", "node0", {}, [device]), path)
    code, out, err = cli("plan", "llama-2-7b", "--profile", path, "--gpus", "16", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["cluster"]["device"] == "h100-sxm"
    assert data["cluster"]["matmul_efficiency"] == pytest.approx(700 / 989.5)
    assert "measured" in data["cluster"]["efficiency_source"]
    code, _, err = cli("plan", "llama-2-7b", "--profile", tmp_path / "none.json", "-n", "8")
    assert code == 2 and "ceiling bench" in err


def test_sequence_longer_than_the_model_is_refused(cli):
    code, out, err = cli("plan", "gpt2", "--spec", "a100-80gb", "--gpus", "8", "--seq", "4096")
    assert code == 2 and out == ""
    assert err.strip() == (
        "error: --seq 4096 > gpt2's 1024 positions; plan a longer context with "
        "custom:...,max_seq=4096"
    )


def test_attention_is_one_default_for_every_model_and_dropout_the_models_config(cli):
    args = ["plan", "mpt-7b", "--spec", "a100-80gb", "--gpus", "8", "--global-batch", "256"]
    args += ["--seq", "2048", "--top", "1", "--json"]
    code, out, err = cli(*args)
    assert code == 0, err
    default = json.loads(out)
    # the attention kernel is the one default; MPT-7B's config has no dropout
    assert default["assumptions"]["attention"] == "flash"
    assert default["assumptions"]["attention_from"].startswith("the default for every model")
    assert default["assumptions"]["dropout"] is False
    assert default["assumptions"]["dropout_from"] == "the model's config"
    code, out, _ = cli(*args, "--attention", "flash", "--no-dropout")
    explicit = json.loads(out)
    assert explicit["assumptions"]["attention_from"] == "given"
    assert explicit["assumptions"]["dropout_from"] == "given"
    assert explicit["plans"][0]["mfu"] == default["plans"][0]["mfu"]
    code, out, _ = cli(*args, "--attention", "unfused", "--dropout")
    megatron = json.loads(out)
    # s×s scores through memory and dropout masks cost time: the same job runs slower
    assert megatron["plans"][0]["step_time_s"] > default["plans"][0]["step_time_s"]
    # a model of Megatron-LM's time takes the same default kernel; its dropout is its own
    code, out, _ = cli("plan", "gpt3-175b", "--spec", "a100-80gb", "--gpus", "1024", "--json")
    gpt3 = json.loads(out)["assumptions"]
    assert (gpt3["attention"], gpt3["dropout"]) == ("flash", True)


def test_an_uneven_even_share_is_shown_as_the_split_that_holds_the_layers():
    from types import SimpleNamespace

    from ceiling.cli.plan import _stages

    def result(p, first, mid, last):
        return SimpleNamespace(plan=SimpleNamespace(p=p), stages={"layers": [first, mid, last]})

    # 61 layers on 4 stages, each priced at the fullest stage's 16: held as 16,15,15,15
    assert _stages(result(4, 16, 16, 16), 61) == "16,15×3"
    assert _stages(result(32, 2, 2, 2), 61) == "2×29,1×3"
    assert _stages(result(16, 7, 8, 7), 126) == "7,8…8,7"  # pinned stages that add up
    assert _stages(result(3, 5, 6, 5)) == "5,6,5"


def test_plan_figure_stacks_each_ranked_plans_step(cli, tmp_path):
    """One bar per ranked plan, best on top, its stacked parts summing to the plan's step;
    `--plot` writes it and the JSON is the API's unchanged."""
    import json

    import ceiling
    from ceiling.render.plan_plot import stacked_parts

    r = ceiling.plan("llama-3-8b", 64, spec="h100-sxm", top=3)
    fig = r.figure()
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels[0].startswith("#1 ") and len(labels) == len(r.plans) == 3
    for p in r.plans:
        assert sum(s for _, s, _ in stacked_parts(p.time)) == pytest.approx(p.step_time_s)
    widths = {}
    for bar in ax.patches:  # the bars of a plan end where its step does
        y = round(bar.get_y() + bar.get_height() / 2)
        widths[y] = max(widths.get(y, 0.0), bar.get_x() + bar.get_width())
    assert [widths[k] for k in range(3)] == pytest.approx([p.step_time_s for p in r.plans])
    path = tmp_path / "plan.png"
    code, out, err = cli("plan", "llama-3-8b", "-n", 64, "--spec", "h100-sxm", "-k", 3,
                         "--plot", path, "--json")  # fmt: skip
    assert code == 0, err
    assert path.stat().st_size > 0
    assert json.loads(out) == r.to_dict()
