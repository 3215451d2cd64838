"""Quantities at the edges: GB and GiB never mixed, SI base units inside, bad text refused."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ceiling import units
from ceiling.errors import InvalidInput


def test_gb_and_gib_are_different_words():
    assert units.parse_bytes("80GB") == 80e9
    assert units.parse_bytes("80 GiB") == 80 * 2**30
    assert units.parse_bytes("512") == 512.0
    assert units.format_bytes(2**30, binary=True) == "1 GiB"
    assert units.format_bytes(1e9) == "1 GB"
    # 80 GiB is 85.9 GB: the two are never printed as the same number
    assert units.format_bytes(80 * 2**30) == "85.9 GB"


def test_rates_and_times():
    assert units.parse_bandwidth("3.35TB/s") == pytest.approx(3.35e12)
    assert units.parse_bandwidth("400Gb/s") == pytest.approx(5e10)  # bits
    assert units.parse_bandwidth("1 GiB/s") == 2**30
    assert units.parse_flops("989 TFLOP/s") == pytest.approx(9.89e14)
    assert units.parse_flops("312T") == pytest.approx(3.12e14)
    assert units.parse_time("4.6ms") == pytest.approx(4.6e-3)
    assert units.parse_time("1.5 min") == 90.0
    assert units.parse_count("8k") == 8000 and units.parse_count("1e8") == 100_000_000
    assert units.format_flops_per_s(9.89e14) == "989 TFLOP/s"
    assert units.format_bandwidth(3.35e12) == "3.35 TB/s"
    assert units.format_time(4.6e-3) == "4.6 ms"
    assert units.format_time(90) == "1.5 min"
    assert units.format_percent(0.123) == "12.3 %"


@pytest.mark.parametrize(
    ("parse", "text"),
    [
        (units.parse_bytes, "-5GB"),
        (units.parse_bytes, "1e400"),
        (units.parse_bytes, "nan"),
        (units.parse_bytes, "5 parsecs"),
        (units.parse_bandwidth, "-1GB/s"),
        (units.parse_bandwidth, "3 furlongs/s"),
        (units.parse_flops, "-1T"),
        (units.parse_time, "-1s"),
        (units.parse_time, "3 fortnights"),
        (units.parse_count, "1.5"),
        (units.parse_count, "1e400"),
        (units.parse_count, "-3"),
        (units.parse_count, ""),
    ],
)
def test_bad_quantities_are_one_clear_error(parse, text):
    with pytest.raises(InvalidInput):
        parse(text)


@given(st.floats(min_value=1, max_value=1e17, allow_nan=False))
def test_decimal_bytes_round_trip_within_display_precision(n):
    shown = units.format_bytes(n, digits=6)
    assert units.parse_bytes(shown.replace(" ", "")) == pytest.approx(n, rel=1e-5)


@given(st.floats(min_value=1, max_value=2**55, allow_nan=False))
def test_binary_bytes_round_trip_within_display_precision(n):
    shown = units.format_bytes(n, binary=True, digits=6)
    assert units.parse_bytes(shown) == pytest.approx(n, rel=1e-5)
