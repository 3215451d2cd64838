"""`ceiling.profile(model, batch)` and `ceiling.MfuMeter` on live models, as in a notebook."""

from __future__ import annotations

import json

import pytest

import ceiling

torch = pytest.importorskip("torch")


def tiny_gpt2(tmp_path):
    """A GPT-2 built from a small config (no weights read), its config saved for `hf:`."""
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(
        n_layer=2, n_embd=64, n_head=4, vocab_size=256, n_positions=64,
        bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    config.save_pretrained(tmp_path)
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(config)


def hf_batch(batch: int = 2, seq: int = 32) -> dict:
    ids = torch.randint(0, 256, (batch, seq))
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids}


@pytest.mark.slow
def test_gpt2_dict_batch_counts_the_same_flops_as_the_command(tmp_path, cli):
    model = tiny_gpt2(tmp_path)
    r = ceiling.profile(model, hf_batch(), steps=1, warmup_steps=0)
    assert isinstance(r, ceiling.api.profile.ProfileResult)
    assert r.report.train and r.report.tokens_per_step == 64
    assert r.step_s > 0 and 0 < r.mfu < 1
    assert r.model_flops_per_step > 0
    code, out, err = cli(
        "profile", f"hf:{tmp_path}", "--train", "--batch", "2", "--seq", "32",
        "--steps", "1", "--json",
    )  # fmt: skip
    assert code == 0, err
    counted = json.loads(out)
    assert r.model_flops_per_step == counted["model_flops_per_step"]
    assert r.hardware_flops_per_step == counted["hardware_flops_per_step"]
    record = r.to_dict()
    assert record["model_flops_per_step"] == r.model_flops_per_step
    assert set(record) == set(counted) - {"plot", "figures"}
    assert "<table>" in r._repr_html_()
    assert r.figure().axes


def test_meta_model_is_counted_without_running():
    layer = torch.nn.Linear(32, 16, device="meta")
    r = ceiling.profile(layer, torch.randn(4, 32, device="meta"), train=False)
    assert r.step_s is None and r.mfu is None
    assert r.model_flops_per_step == 2 * 4 * 32 * 16  # a multiply-add counted as 2


def test_profile_refuses_what_is_not_a_model():
    with pytest.raises(ceiling.CeilingError, match="profile_target"):
        ceiling.profile("gpt:tiny", None)
    with pytest.raises(ceiling.CeilingError, match=r"nn\.Module"):
        ceiling.profile(lambda x: x, torch.ones(2))
    with pytest.raises(ceiling.CeilingError, match="optimizer"):
        layer = torch.nn.Linear(2, 2)
        ceiling.profile(layer, torch.ones(1, 2), train=False, optimizer=torch.optim.SGD(
            layer.parameters(), lr=0.1))  # fmt: skip


def test_mfu_meter_counts_the_first_step_and_times_the_rest():
    from ceiling.profile.meter import count_step_flops

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(16, 64)
    expected = count_step_flops(model, (x,))
    meter = ceiling.MfuMeter(model, peak_flops_per_s=1e12, warmup_steps=2)
    for _ in range(5):
        with meter.step(x):
            model(x).float().mean().backward()
            opt.step()
            opt.zero_grad()
    r = meter.result()
    # forward 2·16·(64·128 + 128·8); backward twice that, less the first layer's input
    # gradient (x needs none)
    assert r.model_flops_per_step == expected.model == 2 * 16 * (2 * 64 * 128 + 3 * 128 * 8)
    assert r.steps_timed == 3 and r.unit == "samples"
    assert r.tokens_per_s == pytest.approx(3 * 16 / r.seconds_timed)
    assert meter.mfu == pytest.approx(r.model_flops_per_step * 3 / r.seconds_timed / 1e12)
    assert r.to_dict()["samples_per_s"] == r.tokens_per_s
    assert "MFU" in meter._repr_html_()


def test_mfu_meter_on_a_hugging_face_loop(tmp_path):
    model = tiny_gpt2(tmp_path)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    meter = ceiling.MfuMeter(model, spec="h100-sxm")
    batch = hf_batch()
    for _ in range(3):
        with meter.step(batch):
            model(**batch).loss.backward()
            opt.step()
            opt.zero_grad()
    r = meter.result()
    assert r.unit == "tokens" and r.tokens_per_counted_step == 64 and r.steps_timed == 2
    assert r.peak_flops_per_s > 1e13 and "h100" in r.peak_source.lower()
    assert 0 < r.mfu < r.hfu * 1.000001


def test_mfu_meter_without_a_model_needs_the_numbers():
    meter = ceiling.MfuMeter(model_flops_per_step=6e9, peak_flops_per_s=1e12, warmup_steps=1)
    with meter.step(tokens=1000):
        pass
    assert meter.mfu is None  # the first step is warm-up
    with meter.step(tokens=1000):
        pass
    assert meter.result().steps_timed == 1 and meter.mfu > 0
    with pytest.raises(ceiling.CeilingError, match="batch"), meter.step():
        pass


def test_a_batch_the_model_cannot_take_is_one_line():
    with pytest.raises(ceiling.CeilingError) as info:
        ceiling.profile(torch.nn.Linear(4, 2), torch.ones(3, 5), steps=1)
    assert "\n" not in str(info.value) and "Linear" in str(info.value)


def test_decode_measured_here():
    r = ceiling.decode("gpt:tiny", batch=[1], measure=True, device="cpu")
    assert isinstance(r, ceiling.api.decode_measured.MeasuredDecodeResult)
    (row,) = r.to_dict()["rows"]
    assert row["batch"] == 1 and row["measured_tokens_per_s"] > 0
    assert row["tokens_per_s"] == row["measured_tokens_per_s"] <= row["best_tokens_per_s"]
    assert r.to_dict()["measured"] is True and r.why_low()
    assert r.figure().axes
    with pytest.raises(ceiling.CeilingError, match="drop spec \\(or pass machine_profile\\)"):
        ceiling.decode("gpt:tiny", spec="h100-sxm", measure=True)
    with pytest.raises(ceiling.CeilingError, match="measure"):
        ceiling.decode("gpt:tiny", spec="h100-sxm", device="cpu")
