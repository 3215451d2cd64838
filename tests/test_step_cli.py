import json


def test_slow_data_demo_names_the_loader_and_more_workers_help(cli, tmp_path):
    # 64 samples × 4 ms = 256 ms of loading per batch with 0 workers, 64 ms with 4;
    # the model's step on a batch of 64 is a few ms
    fig = tmp_path / "steps.svg"
    code, out, err = cli(
        "step", "mlp", "--slow-data", "--workers", "0,4", "--steps", "4", "--json", "--plot", fig
    )  # fmt: skip
    assert code == 0, err
    d = json.loads(out)
    zero, four = d["rows"]
    assert (zero["workers"], four["workers"]) == (0, 4)
    assert zero["bottleneck"] == "data loader" and d["bottleneck"] == "data loader"
    assert zero["data_share"] > 0.5
    assert four["step_s"] < zero["step_s"]
    assert fig.exists() and d["plot"] == str(fig)
    assert d["verdict"][0].startswith("with 0 workers the data loader is the bottleneck")
    for r in d["rows"]:
        assert (
            r["step_s"] == r["data_s"] + r["host_s"] + r["compute_s"]
            or abs(r["step_s"] - (r["data_s"] + r["host_s"] + r["compute_s"])) < 1e-9
        )


def test_step_bad_input(cli, tmp_path):
    code, _, err = cli("step", "mlp", "--workers", "0,-2")
    assert code == 2 and err.startswith("error:") and "≥ 0" in err
    code, _, err = cli("step", "mlp", "--device", "meta")
    assert code == 2 and "real loop" in err
    f = tmp_path / "noloader.py"
    f.write_text(
        "import torch\n"
        "def build():\n"
        "    return {'model': torch.nn.Linear(4, 4), 'batch': torch.randn(2, 4)}\n"
    )
    code, _, err = cli("step", f"{f}:build")
    assert code == 2 and "DataLoader" in err and len(err.strip().splitlines()) == 1
