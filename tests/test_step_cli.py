import json


def test_slow_data_demo_names_the_loader_and_more_workers_help(cli, tmp_path):
    # 8 samples × 25 ms = 200 ms of loading per batch with 0 workers, 50 ms with 4: a gap
    # of 150 ms per step against a step of ~2 ms. One torch thread, so that the sleeping
    # workers waking up do not stall the step's parallel regions on a small machine; the
    # workers' start-up falls in the warm-up (a whole first round of batches).
    fig = tmp_path / "steps.svg"
    code, out, err = cli(
        "step", "mlp", "--data-delay-ms", "25", "--batch", "8", "--threads", "1",
        "--workers", "0,4", "--steps", "4", "--json", "--plot", fig,
    )  # fmt: skip
    assert code == 0, err
    d = json.loads(out)
    zero, four = d["rows"]
    assert (zero["workers"], four["workers"]) == (0, 4)
    assert zero["bottleneck"] == "data loader" and d["bottleneck"] == "data loader"
    assert zero["data_share"] > 0.5
    assert d["slow_data"] and d["data_delay_s_per_sample"] == 0.025 and d["threads"] == 1
    # the loader alone: one batch per 200 ms with no workers (the loop's own wait)
    assert 1 / zero["loader_batches_per_s"] >= 0.200
    assert four["data_s"] < zero["data_s"]
    assert four["step_s"] < zero["step_s"]
    assert fig.exists() and d["plot"] == str(fig)
    assert d["verdict"][0].startswith("with 0 workers the data loader is the bottleneck")
    for r in d["rows"]:
        assert (
            r["step_s"] == r["data_s"] + r["host_s"] + r["compute_s"]
            or abs(r["step_s"] - (r["data_s"] + r["host_s"] + r["compute_s"])) < 1e-9
        )
    # the fastest worker count's waterfall, from the dense peak, sums to its step
    fastest = min(d["rows"], key=lambda r: r["step_s"])
    bars = {b["name"]: b["seconds"] for b in d["roofs"]["waterfall"]}
    assert d["waterfall_workers"] == fastest["workers"] == 4
    assert abs(sum(bars.values()) - fastest["step_s"]) < 1e-9
    assert bars["waiting for data"] == fastest["data_s"]


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


def test_user_target_with_a_dataloader(cli, tmp_path):
    f = tmp_path / "withloader.py"
    f.write_text(
        "import torch\n"
        "def build():\n"
        "    data = torch.utils.data.TensorDataset(torch.randn(256, 8), torch.randn(256, 2))\n"
        "    return {'model': torch.nn.Linear(8, 2),\n"
        "            'dataloader': torch.utils.data.DataLoader(data, batch_size=16),\n"
        "            'forward': lambda model, batch: model(batch[0]),\n"
        "            'loss_fn': lambda out, batch: torch.nn.functional.mse_loss(out, batch[1])}\n"
    )
    code, out, err = cli("step", f"{f}:build", "--workers", "0", "--steps", "2", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["samples_per_step"] == 16 and [r["workers"] for r in d["rows"]] == [0]
    code, _, err = cli("step", f"{f}:build", "--slow-data")
    assert code == 2 and "built-in datasets" in err and len(err.strip().splitlines()) == 1
