import pytest

from ceiling.errors import InvalidInput
from ceiling.model import mfu as m


def test_palm_540b_mfu_reproduces_published_46_2_percent():
    # PaLM 540B: l=118, 48 heads × 256 head dim, s=2048, N=540.35e9, 6144 TPU v4 at 275 TFLOP/s
    per_token = m.training_flops_per_token(540.35e9, 118, 2048, 48 * 256)
    value = m.mfu(238.3e3, per_token, 275e12, devices=6144)
    assert value * 100 == pytest.approx(46.2, abs=0.5)
    assert value == pytest.approx(0.46229, abs=2e-4)


def test_mpt_7b_mfu_reproduces_published_64_23_percent():
    per_token = m.training_flops_per_token(6_658_859_008, 32, 2048, 4096)
    value = m.mfu(37_130, per_token, 312e12, devices=8)
    assert value * 100 == pytest.approx(64.23, abs=0.5)
    assert value == pytest.approx(0.64226, abs=2e-4)


def test_attention_term_and_causal_half():
    assert m.attention_training_flops_per_token(2, 10, 8) == 12 * 2 * 10 * 8
    assert m.attention_training_flops_per_token(2, 10, 8, "causal-half") == 6 * 2 * 10 * 8
    with pytest.raises(InvalidInput, match="convention"):
        m.attention_training_flops_per_token(2, 10, 8, "quarter")


def test_step_utilisation_equals_throughput_form():
    # 1e12 FLOPs per step in 0.5 s on 2 devices of 1e12 → 100 %
    assert m.step_utilisation(1e12, 0.5, 1e12, devices=2) == pytest.approx(1.0)
    assert m.step_utilisation(1e12, 1.0, 4e12) == pytest.approx(0.25)


def test_peak_key_respects_tf32_only_on_gpus():
    assert m.peak_key("fp32", True, "gpu") == "tf32"
    assert m.peak_key("fp32", False, "gpu") == "fp32"
    assert m.peak_key("fp32", True, "cpu") == "fp32"
    assert m.peak_key("bf16", True, "gpu") == "bf16"


def test_meter_skips_warmup_and_recompute_only_raises_hfu():
    meter = m.MfuAccumulator(
        model_flops_per_token=6e9,
        peak_flops_per_s=1e15,
        hardware_flops_per_token=8e9,
        skip_first=1,
    )
    meter.step(10.0, 1)  # warm-up, ignored
    meter.step(1.0, 50_000)
    meter.step(1.0, 50_000)
    assert meter.tokens_per_s == 50_000
    assert meter.mfu == pytest.approx(0.3)
    assert meter.hfu == pytest.approx(0.4)


def test_bad_inputs_are_invalid_input():
    with pytest.raises(InvalidInput, match="peak"):
        m.mfu(1.0, 1.0, 0.0)
    with pytest.raises(InvalidInput, match="cannot be below"):
        m.MfuAccumulator(
            model_flops_per_token=2.0, peak_flops_per_s=1.0, hardware_flops_per_token=1.0
        )
    with pytest.raises(InvalidInput, match="step time"):
        m.step_utilisation(1.0, 0.0, 1.0)


def test_tf32_follows_either_torch_setting_and_is_restored():
    import torch

    from ceiling.profile.ceiling import conv_tf32_enabled, tf32_enabled, tf32_on

    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    matmul = torch.backends.cuda.matmul
    before = matmul.fp32_precision
    try:
        assert not tf32_enabled(cuda)  # torch's default: IEEE fp32 matmuls
        matmul.fp32_precision = "tf32"  # the per-backend setting (the global read then fails)
        assert tf32_enabled(cuda) and not tf32_enabled(cpu)
        matmul.fp32_precision = "ieee"
        with tf32_on():
            assert tf32_enabled(cuda) and conv_tf32_enabled(cuda)
        assert matmul.fp32_precision == "ieee" and not tf32_enabled(cuda)
    finally:
        matmul.fp32_precision = before


def test_fp32_peak_follows_the_op_kind_that_carries_the_flops():
    from ceiling.profile.ceiling import fp32_runs_tf32

    # a CNN under cuDNN's default (TF32 convolutions) with IEEE matmuls: the TF32 peak
    assert fp32_runs_tf32(matmul_tf32=False, conv_tf32=True, conv_share=0.9)
    # a transformer: its matmuls decide
    assert not fp32_runs_tf32(matmul_tf32=False, conv_tf32=True, conv_share=0.0)
    assert fp32_runs_tf32(matmul_tf32=True, conv_tf32=False, conv_share=0.1)
