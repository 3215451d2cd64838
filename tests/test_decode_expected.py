"""Expected decode speed against published runs (gpt-fast, batch 1): within ±20 %, while the
ceiling stays above every published figure."""

import pytest

from ceiling.hardware.resolve import resolve_device
from ceiling.model.decode import DecodeSetup, decode_ceiling
from ceiling.model.decode_expected import (
    SCALE_ZERO_BYTES,
    EngineCosts,
    costs_for,
    expected_rows,
)
from ceiling.model.transformer import get_model

# validation-public.md, "Expected decode"
PUBLISHED = [
    ("llama-2-70b", "a100-80gb", DecodeSetup(tp=2), 21.32),
    ("llama-2-7b", "a100-80gb", DecodeSetup(weights_dtype="int4"), 196.80),
    ("llama-2-7b", "mi250x", DecodeSetup(), 76.33),
]


def _one(model, device, setup):
    cfg, spec = get_model(model), resolve_device(device, None)
    ceiling = decode_ceiling(cfg, spec, [1], setup)
    (row,) = expected_rows(ceiling, cfg.layers, costs_for(spec))
    return ceiling.rows[0], row


@pytest.mark.parametrize(("model", "device", "setup", "published"), PUBLISHED)
def test_expected_decode_matches_published_runs(model, device, setup, published):
    ceiling, expected = _one(model, device, setup)
    assert expected.tokens_per_s == pytest.approx(published, rel=0.20)
    assert ceiling.tokens_per_s > published > 0
    assert expected.tokens_per_s < ceiling.tokens_per_s


def test_expected_terms_add_up_with_fake_numbers():
    class Row:  # one decode row: 1 GB moved, 1 ms of FLOPs, 0.5 ms of all-reduce
        batch, weight_bytes, bytes_per_step, fits = 2, 8e8, 1e9, True
        compute_time_s, comm_time_s, tokens_per_s = 1e-3, 5e-4, 400.0

    class Dtypes:
        weights = "int4"

    class Ceiling:
        rows, dtypes, bandwidth_bytes_per_s = [Row()], Dtypes(), 1e12

    costs = EngineCosts(
        bandwidth_share=0.5,
        per_kernel_s=1e-6,
        kernels_per_layer=10,
        kernels_outside_layers=4,
        group_size=32,
        vector_peak_flops_per_s=1e13,
    )
    (r,) = expected_rows(Ceiling(), layers=2, costs=costs)
    quantised = 8e8 / 0.5  # int4: half a byte per weight
    assert r.quant_bytes == quantised * SCALE_ZERO_BYTES / 32
    assert r.memory_s == pytest.approx((1e9 + r.quant_bytes) / 5e11)
    assert r.dequant_s == pytest.approx(quantised * 4 / 1e13)
    assert (r.kernels, r.launch_s) == (24, pytest.approx(24e-6))
    assert r.step_s == pytest.approx(r.memory_s + r.dequant_s + 24e-6 + 5e-4)
    assert r.tokens_per_s == pytest.approx(2 / r.step_s) and r.limited_by == "memory"


def test_decoder_matmuls_at_measured_rates_set_the_compute_time():
    from ceiling.model.decode_expected import compute_with_rates, decoder_matmuls

    cfg = get_model("gpt:small")
    ceiling = decode_ceiling(cfg, resolve_device("a100-80gb", None), [4])
    shapes = decoder_matmuls(cfg, 4)
    assert ((4, cfg.vocab, cfg.hidden), 1) in shapes and len(shapes) == 6
    rates = {shape: 1e12 for shape, _ in shapes}  # every matmul at 1 TFLOP/s
    matmul_flops = sum(2.0 * m * n * k * count for (m, n, k), count in shapes)
    rest = ceiling.rows[0].flops_per_step - matmul_flops
    assert 0 <= rest < 0.1 * matmul_flops  # attention over a one-token cache, no more
    (got,) = compute_with_rates(cfg, ceiling, rates).values()
    assert got == pytest.approx(matmul_flops / 1e12 + rest / ceiling.peak_flops_per_s)
