"""Quantities with units: parsing at the edges, formatting for display.

Inside ceiling everything is SI base units (seconds, bytes, FLOP, bytes/s, FLOP/s).
GB = 1e9 bytes and GiB = 2**30 bytes are different words and are never mixed.
"""

from __future__ import annotations

import math
import re

from ceiling.errors import InvalidInput

KB, MB, GB, TB, PB = 1e3, 1e6, 1e9, 1e12, 1e15
KiB, MiB, GiB, TiB = 2**10, 2**20, 2**30, 2**40

_SI = [(1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, "")]
_SI_PREFIX = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
_BIN_PREFIX = {"Ki": KiB, "Mi": MiB, "Gi": GiB, "Ti": TiB, "Pi": 2**50}
_TIME = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0}

_NUMBER = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"


def _si(value: float, unit: str, digits: int = 3) -> str:
    if value == 0 or not math.isfinite(value):
        return f"{value:g} {unit}"
    mag = abs(value)
    for scale, prefix in _SI:
        if mag >= scale:
            return f"{value / scale:.{digits}g} {prefix}{unit}"
    return f"{value:.{digits}g} {unit}"


def format_flops(flop: float, digits: int = 3) -> str:
    """A FLOP count: 1.1e12 -> '1.1 TFLOP' (a multiply-add counts 2)."""
    return _si(flop, "FLOP", digits)


def format_flops_per_s(rate: float, digits: int = 3) -> str:
    """A FLOP rate: 9.89e14 -> '989 TFLOP/s'."""
    return _si(rate, "FLOP/s", digits)


def format_bytes(n: float, binary: bool = False, digits: int = 3) -> str:
    """Bytes in decimal (GB = 1e9) or, with binary=True, binary (GiB = 2**30) units."""
    if not binary:
        return _si(n, "B", digits)
    mag = abs(n)
    for scale, prefix in ((2**50, "Pi"), (TiB, "Ti"), (GiB, "Gi"), (MiB, "Mi"), (KiB, "Ki")):
        if mag >= scale:
            return f"{n / scale:.{digits}g} {prefix}B"
    return f"{n:.{digits}g} B"


def format_bandwidth(bytes_per_s: float, digits: int = 3) -> str:
    """A bandwidth in decimal units: 3.35e12 -> '3.35 TB/s' (TB = 1e12 bytes)."""
    return _si(bytes_per_s, "B/s", digits)


def format_time(seconds: float, digits: int = 3) -> str:
    """A duration with the unit that keeps the mantissa readable: 4.6e-3 -> '4.6 ms'."""
    if not math.isfinite(seconds):
        return f"{seconds} s"
    mag = abs(seconds)
    if mag >= 3600:
        return f"{seconds / 3600:.{digits}g} h"
    if mag >= 60:
        return f"{seconds / 60:.{digits}g} min"
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns")):
        if mag >= scale:
            return f"{seconds / scale:.{digits}g} {unit}"
    return f"{seconds / 1e-9:.{digits}g} ns" if mag else "0 s"


def format_number(value: float, decimals: int = 0) -> str:
    """Thousands separated while a reader can take in the digits (1,234,567.8); beyond a
    quadrillion, three significant digits (3.65e+297), never hundreds of digits."""
    if math.isfinite(value) and abs(value) < 1e15:
        return f"{value:,.{decimals}f}"
    return f"{value:.3g}"


def format_percent(fraction: float, digits: int = 1) -> str:
    """A fraction in [0, 1] shown as percent."""
    return f"{fraction * 100:.{digits}f} %"


def _split(text: str, what: str) -> tuple[float, str]:
    """(number, unit) of a quantity; sizes, rates, durations and counts are never negative."""
    m = re.fullmatch(r"\s*" + _NUMBER + r"\s*([A-Za-zµ/]*)\s*", text)
    if not m:
        raise InvalidInput(f"cannot read {what} from {text!r}")
    value = float(m.group(1))
    if not math.isfinite(value):
        raise InvalidInput(f"{what} must be a finite number, got {text!r}")
    if value < 0:
        raise InvalidInput(f"{what} cannot be negative, got {text!r}")
    return value, m.group(2)


def parse_bytes(text: str | float | int) -> float:
    """'80GB' -> 8e10, '80GiB' -> 85899345920.0, '512' -> 512.0. GB and GiB differ."""
    if isinstance(text, (int, float)):
        return float(text)
    value, unit = _split(text, "a byte size")
    if unit in ("", "B"):
        return value
    if unit.endswith("B"):
        prefix = unit[:-1]
        if prefix in _BIN_PREFIX:
            return value * _BIN_PREFIX[prefix]
        if prefix in _SI_PREFIX:
            return value * _SI_PREFIX[prefix]
    raise InvalidInput(f"unknown byte unit {unit!r} in {text!r} (use B, kB, MB, GB, KiB, MiB, GiB)")


def parse_bandwidth(text: str | float | int) -> float:
    """'3.35TB/s' -> 3.35e12 bytes/s; '400Gb/s' (bits) -> 5e10 bytes/s."""
    if isinstance(text, (int, float)):
        return float(text)
    value, unit = _split(text, "a bandwidth")
    unit = unit.removesuffix("/s").removesuffix("ps")
    bits = unit.endswith("b") and not unit.endswith("B")
    base = unit[:-1] if unit and unit[-1] in "bB" else unit
    scale = _BIN_PREFIX.get(base) or _SI_PREFIX.get(base)
    if scale is None:
        raise InvalidInput(f"unknown bandwidth unit in {text!r} (use e.g. GB/s, TB/s, Gb/s)")
    return value * scale / (8.0 if bits else 1.0)


def parse_flops(text: str | float | int) -> float:
    """'989T' or '989 TFLOP/s' or '9.89e14' -> 9.89e14 FLOP/s."""
    if isinstance(text, (int, float)):
        return float(text)
    value, unit = _split(text, "a FLOP rate")
    unit = unit.removesuffix("/s").removesuffix("FLOPS").removesuffix("FLOP")
    if unit not in _SI_PREFIX:
        raise InvalidInput(f"unknown FLOP/s prefix in {text!r} (use e.g. 312T, 989 TFLOP/s)")
    return value * _SI_PREFIX[unit]


def parse_time(text: str | float | int) -> float:
    """'4.6ms' -> 0.0046 seconds; a bare number is seconds."""
    if isinstance(text, (int, float)):
        return float(text)
    value, unit = _split(text, "a duration")
    if unit == "":
        return value
    if unit not in _TIME:
        raise InvalidInput(f"unknown time unit {unit!r} in {text!r} (use ns, us, ms, s, min, h)")
    return value * _TIME[unit]


def parse_count(text: str | int) -> int:
    """'8k' -> 8000, '2048' -> 2048, '1M' -> 1000000 (a plain count with an SI prefix)."""
    if isinstance(text, int):
        return text
    value, unit = _split(str(text), "a count")
    if unit not in _SI_PREFIX:
        raise InvalidInput(f"cannot read a count from {text!r}")
    result = value * _SI_PREFIX[unit]
    if not math.isfinite(result):
        raise InvalidInput(f"{text!r} is too large for a count")
    if result != int(result):
        raise InvalidInput(f"{text!r} is not a whole number")
    return int(result)
