"""Device specs from the datasheets, as data.

The numbers live in `catalog.toml` next to this file, each with the document it comes
from. This module reads them once (in datasheet units: TFLOP/s, GiB, GB/s, MiB), converts
to SI base units, and answers look-ups by short name ("h100-sxm") or by the name the
driver reports ("NVIDIA H100 80GB HBM3").

Peaks are dense: NVIDIA prints 2:4-sparse figures with an asterisk; the catalog stores
half of those. A multiply-add counts as 2 FLOPs. int8 rates are operations per second.
"""

from __future__ import annotations

import difflib
import functools
import math
import re
import sys
from dataclasses import dataclass, field
from importlib import resources

from ceiling.errors import InvalidInput, MalformedFile, UnknownName, UnsupportedOnDevice

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8")
KINDS = ("gpu", "tpu", "cpu")

# Names people and libraries use for the same dtype (torch spellings included).
DTYPE_ALIASES = {
    "float64": "fp64",
    "double": "fp64",
    "f64": "fp64",
    "float32": "fp32",
    "float": "fp32",
    "f32": "fp32",
    "tensorfloat32": "tf32",
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "f16": "fp16",
    "float8": "fp8",
    "float8_e4m3fn": "fp8",
    "float8_e5m2": "fp8",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
    "e4m3": "fp8",
    "e5m2": "fp8",
    "i8": "int8",
}

_TFLOPS, _GIB, _GB, _MIB = 1e12, 2**30, 1e9, 2**20


def normalize_dtype(dtype: object) -> str:
    """'torch.bfloat16', 'bfloat16', 'BF16' -> 'bf16'. Unknown names raise InvalidInput."""
    text = str(dtype).strip().lower().removeprefix("torch.")
    text = DTYPE_ALIASES.get(text, text)
    if text not in DTYPES:
        raise InvalidInput(f"unknown dtype {dtype!r}; known: {', '.join(DTYPES)}")
    return text


@dataclass(frozen=True)
class DeviceSpec:
    """One device's ceilings in SI units: FLOP/s, bytes, bytes/s (links: one direction)."""

    key: str
    name: str
    vendor: str
    kind: str
    driver_names: tuple[str, ...]
    peak_flops_per_s: dict[str, float]
    memory_bytes: float
    memory_bandwidth_bytes_per_s: float
    link_bandwidth_bytes_per_s: float | None = None
    l2_bytes: float | None = None
    sms: int | None = None
    sources: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        where = f"device spec {self.key!r}"
        if self.kind not in KINDS:
            raise InvalidInput(f"{where}: kind must be one of {KINDS}, got {self.kind!r}")
        if not self.peak_flops_per_s:
            raise InvalidInput(f"{where}: needs at least one peak FLOP/s")
        for dtype, rate in self.peak_flops_per_s.items():
            if dtype not in DTYPES:
                raise InvalidInput(f"{where}: unknown dtype {dtype!r}; known: {DTYPES}")
            if not (math.isfinite(rate) and rate > 0):
                raise InvalidInput(f"{where}: peak {dtype} must be > 0 FLOP/s, got {rate}")
        if not (math.isfinite(self.memory_bytes) and self.memory_bytes >= 0):
            raise InvalidInput(f"{where}: memory must be >= 0 bytes, got {self.memory_bytes}")
        bw = self.memory_bandwidth_bytes_per_s
        if not (math.isfinite(bw) and bw > 0):
            raise InvalidInput(f"{where}: memory bandwidth must be > 0 B/s, got {bw}")
        for label, value in (
            ("link bandwidth", self.link_bandwidth_bytes_per_s),
            ("L2 size", self.l2_bytes),
            ("SM count", self.sms),
        ):
            if value is not None and not (math.isfinite(value) and value > 0):
                raise InvalidInput(f"{where}: {label} must be > 0 when given, got {value}")

    def peak(self, dtype: object) -> float:
        """Dense peak FLOP/s for a dtype; raises UnsupportedOnDevice if the device has none."""
        name = normalize_dtype(dtype)
        if name not in self.peak_flops_per_s:
            have = ", ".join(d for d in DTYPES if d in self.peak_flops_per_s)
            raise UnsupportedOnDevice(f"{self.name} has no {name} peak; it has: {have}")
        return self.peak_flops_per_s[name]

    @property
    def dtypes(self) -> tuple[str, ...]:
        return tuple(d for d in DTYPES if d in self.peak_flops_per_s)


def _canonical(name: str) -> str:
    """Case, spaces, underscores and dashes do not matter: 'H100 SXM' == 'h100-sxm'."""
    return re.sub(r"[\s_\-]+", "-", name.strip().lower())


def _compact(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


# Which source line covers which DeviceSpec field.
_SOURCE_FIELDS = {
    "peaks": ("peak_flops_per_s",),
    "memory": ("memory_bytes", "memory_bandwidth_bytes_per_s"),
    "link": ("link_bandwidth_bytes_per_s",),
    "l2": ("l2_bytes",),
    "sms": ("sms",),
}


def _spec_from_table(key: str, t: dict) -> DeviceSpec:
    where = f"catalog entry [{key}]"
    try:
        peaks = {d: float(v) * _TFLOPS for d, v in t["dense_tflops"].items()}
        memory = float(t["memory_gib"]) * _GIB
        link = t.get("link_gb_per_s_one_way")
        l2 = t.get("l2_mib")
        raw_sources = dict(t["sources"])
        spec = DeviceSpec(
            key=key,
            name=t["name"],
            vendor=t["vendor"],
            kind=t["kind"],
            driver_names=tuple(t.get("driver_names", ())),
            peak_flops_per_s=peaks,
            memory_bytes=memory,
            memory_bandwidth_bytes_per_s=float(t["memory_bandwidth_gb_per_s"]) * _GB,
            link_bandwidth_bytes_per_s=None if link is None else float(link) * _GB,
            l2_bytes=None if l2 is None else float(l2) * _MIB,
            sms=t.get("sms"),
            sources={},
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise MalformedFile(f"{where}: missing or bad field {exc}") from exc
    # Every number must say where it comes from.
    sources = {"datasheet": raw_sources.pop("datasheet", "")}
    if not sources["datasheet"]:
        raise MalformedFile(f"{where}: no 'datasheet' source")
    for group, fields in _SOURCE_FIELDS.items():
        text = raw_sources.pop(group, None)
        for f in fields:
            if getattr(spec, f) is None:
                continue
            if not text:
                raise MalformedFile(f"{where}: {f} has no source (sources.{group})")
            sources[f] = text
    sources.update(raw_sources)  # free-form notes
    object.__setattr__(spec, "sources", sources)
    return spec


@dataclass(frozen=True)
class _Catalog:
    specs: dict[str, DeviceSpec]
    index: dict[str, str]  # canonical name, alias or driver name -> key


@functools.cache
def _catalog() -> _Catalog:
    text = resources.files("ceiling.hardware").joinpath("catalog.toml").read_text("utf-8")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise MalformedFile(f"hardware catalog: {exc}") from exc
    specs: dict[str, DeviceSpec] = {}
    index: dict[str, str] = {}
    for key, table in data.items():
        spec = _spec_from_table(key, table)
        specs[key] = spec
        names = [key, *table.get("aliases", ()), *spec.driver_names]
        for n in names:
            for form in (_canonical(n), _compact(n)):
                if index.setdefault(form, key) != key:
                    raise MalformedFile(f"hardware catalog: name {n!r} is used twice")
    return _Catalog(specs, index)


def all_specs() -> list[DeviceSpec]:
    """Every catalog entry, in file order."""
    return list(_catalog().specs.values())


def match_driver_name(name: str) -> DeviceSpec | None:
    """The entry for a name as the driver reports it ('NVIDIA A100-SXM4-80GB'), or None."""
    cat = _catalog()
    for form in (_canonical(name), _compact(name)):
        if form in cat.index:
            return cat.specs[cat.index[form]]
    return None


def get_spec(name: str) -> DeviceSpec:
    """Look up by short name, alias or driver name (any case); UnknownName lists close ones."""
    spec = match_driver_name(name)
    if spec is not None:
        return spec
    keys = list(_catalog().specs)
    close = difflib.get_close_matches(_canonical(name), keys, n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise UnknownName(
        f"unknown device {name!r}; {hint}`ceiling specs` lists all {len(keys)} known devices"
    )
