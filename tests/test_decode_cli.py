"""`ceiling decode` and `ceiling models` end to end (analytic; no torch needed)."""

import json

import pytest


def test_llama2_7b_a100_json(cli):
    code, out, err = cli(
        "decode", "llama-2-7b", "--spec", "a100-80gb", "--batch", "1", "--context", "0", "--json"
    )
    assert code == 0, err
    data = json.loads(out)
    (row,) = data["rows"]
    assert row["batch"] == 1
    assert row["tokens_per_s"] == pytest.approx(151, rel=0.02)
    assert row["bound"] == "memory"
    assert row["step_time_s"] == pytest.approx(1 / row["tokens_per_s"])
    assert data["kv_bytes_per_token"] == 2 * 32 * 4096 * 2
    assert 140 <= data["crossover_batch"] <= 170  # A100 ridge 153 FLOP/byte


def test_h100_crossover(cli):
    code, out, _ = cli("decode", "llama-3-8b", "--spec", "h100-sxm", "--json")
    assert code == 0
    data = json.loads(out)
    assert 250 <= data["crossover_batch"] <= 350
    assert [r["batch"] for r in data["rows"]] == [1, 8, 64, 256]


def test_table_and_plot(cli, tmp_path):
    fig = tmp_path / "decode.png"
    code, out, err = cli(
        "decode", "llama-3-70b", "--spec", "h100-sxm", "--tp", "8", "--context", "2048",
        "--weights", "int8", "--kv-dtype", "fp8", "--plot", fig,
    )  # fmt: skip
    assert code == 0, err
    assert "memory" in out and "tok/s" in out and "int8 weights are dequantised" in out
    assert fig.stat().st_size > 10_000


def test_custom_model(cli):
    code, out, err = cli(
        "decode",
        "custom:layers=32,hidden=4096,heads=32,ffn_hidden=11008,ffn_kind=swiglu,vocab=32000",
        "--spec", "a100-80gb", "--batch", "1", "--context", "0", "--json",
    )  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["rows"][0]["tokens_per_s"] == pytest.approx(151, rel=0.02)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["llama-2-7b", "--spec", "a100-80gb", "--context", "5000"], "4095"),
        (["llama-2-7b", "--spec", "a100-80gb", "--context", "4000", "--batch", "100"], "fits"),
        (["llama-2-7b", "--spec", "a100-80gb", "--tp", "3"], "32 % 3"),
        (["llama-9", "--spec", "a100-80gb"], "unknown model"),
        (["llama-2-7b", "--spec", "a100-80gb", "--batch", "0"], "batch"),
        (["llama-2-7b", "--spec", "nosuchgpu"], "unknown device"),
        (["llama-2-7b", "--spec", "a100-80gb", "--weights", "int3"], "weights dtype"),
        (["llama-3-70b", "--spec", "a100-80gb"], "--tp"),
        (["custom:layers=2,hidden=100,heads=3", "--spec", "a100-80gb"], "heads"),
        (["gpt:small", "--measure", "--spec", "a100-80gb"], "--measure"),
        (["gpt:small", "--measure", "--kv-dtype", "fp8"], "--kv-dtype"),
        (["llama-2-7b", "--spec", "a100-80gb", "--plot", "x.pdf"], ".png"),
    ],
)
def test_bad_input_is_one_line_exit_2(cli, args, match):
    code, out, err = cli("decode", *args)
    assert code == 2
    assert err.startswith("error: ") and err.count("\n") == 1
    assert match in err
    assert out == ""


def test_no_device_no_profile(cli, monkeypatch, tmp_path):
    monkeypatch.setenv("CEILING_PROFILE", str(tmp_path / "none.json"))
    code, _, err = cli("decode", "llama-2-7b")
    assert code == 2 and "--spec" in err


def test_models_listing(cli):
    code, out, _ = cli("models", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["mixtral-8x7b"]["params_active"] == pytest.approx(12.9e9, rel=0.01)
    assert all(entry["source"] for entry in data.values())
    code, out, _ = cli("models")
    assert code == 0 and "opt-13b" in out


def test_time_to_first_token_column_only_for_a_real_prompt(cli):
    code, out, _ = cli(
        "decode", "llama-3-8b", "--spec", "h100-sxm", "--batch", "1", "--context", "0"
    )
    assert code == 0 and "TTFT" not in out and "--prompt N" in out
    code, out, _ = cli(
        "decode", "llama-3-8b", "--spec", "h100-sxm", "--batch", "1", "--prompt", "2048"
    )
    assert code == 0 and "TTFT" in out and "2048-token prompt" in " ".join(out.split())


def test_a_sweep_past_the_memory_marks_the_row_that_does_not_fit(cli):
    # Llama-3-8B bf16 on an 80 GB H100 (85.9 GB = 80 GiB): weights 16.06 GB, KV cache
    # 2·32·8·128·2 B = 131,072 B per token, 4,097 tokens per sequence at context 4,096:
    # (85.9e9 − 16.06e9) / (4,097 · 131,072) = 130 sequences fit; batch 256 needs 153.5 GB.
    args = ["decode", "llama-3-8b", "--spec", "h100-sxm", "--batch", "1,8,64,256"]
    code, out, err = cli(*args, "--context", "4096")
    assert code == 0, err
    lines = [line for line in out.splitlines() if line.strip().startswith("256 ")]
    assert len(lines) == 1 and "does not fit" in lines[0]
    flat = " ".join(out.split())
    assert "largest batch that fits is 130" in flat and "153.5 GB" in flat
    data = json.loads(cli(*args, "--context", "4096", "--json")[1])
    assert [r["fits"] for r in data["rows"]] == [True, True, True, False]
    assert data["max_batch"] == 130
    # one batch asked for, and it does not fit: refused with the arithmetic
    code, _, err = cli("decode", "llama-3-8b", "--spec", "h100-sxm", "--batch", "256")
    assert code == 2 and "153.5 GB" in err and "130" in err


def test_the_default_context_is_stated_and_realistic(cli):
    code, out, err = cli("decode", "llama-3-8b", "--spec", "h100-sxm")
    assert code == 0, err
    assert "Decode ceiling at context 4,096 (the default" in " ".join(out.split())
    data = json.loads(cli("decode", "llama-3-8b", "--spec", "h100-sxm", "--json")[1])
    assert data["context"] == 4096 and data["prompt_tokens"] == 4096
    assert data["kv_bytes_per_sequence"] == 131_072 * 4097
    assert {r["batch"]: r["fits"] for r in data["rows"]}[256] is False
    # a model that holds fewer positions is priced at its maximum (GPT-2: 1,024)
    small = json.loads(cli("decode", "gpt2", "--spec", "h100-sxm", "--json")[1])
    assert small["context"] == 1023
