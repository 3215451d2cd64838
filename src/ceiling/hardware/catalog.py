"""Device specs from the datasheets, as data.

The numbers live in `catalog.toml` next to this file, each with the document it comes
from. This module reads them once (in datasheet units: TFLOP/s, GiB, GB/s, MiB), converts
to SI base units, and answers look-ups by short name ("h100-sxm"), by the name the
driver reports ("NVIDIA H100 80GB HBM3") or by a user's own file ("my-gpu.toml", same
schema). `CEILING_CATALOG` names directories (os.pathsep-separated) whose *.toml entries
join the catalog, so a GPU it lists is recognised by its driver name everywhere.

Peaks are dense: NVIDIA prints 2:4-sparse figures with an asterisk; the catalog stores
half of those. A multiply-add counts as 2 FLOPs. int8 rates are operations per second.
"""

from __future__ import annotations

import difflib
import functools
import math
import os
import re
import sys
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from ceiling.errors import InvalidInput, MalformedFile, UnknownName, UnsupportedOnDevice
from ceiling.files import name_is_usable, read_toml
from ceiling.hardware.spec_schema import check_table
from ceiling.vocabulary import DTYPES, normalize_dtype

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

KINDS = ("gpu", "tpu", "accelerator", "cpu")
CATALOG_ENV = "CEILING_CATALOG"

_TFLOPS, _GIB, _GB, _MIB = 1e12, 2**30, 1e9, 2**20


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
    # what the driver reports (CUDA compute capability / HIP major.minor; AMD's LLVM target)
    compute_capability: str | None = None
    gcn_arch: str | None = None
    pcie_bandwidth_bytes_per_s: float | None = None
    # Node and network defaults for the planner, in clusters.toml's keys and units; empty
    # means the shipped defaults for this key apply.
    cluster_defaults: dict = field(default_factory=dict)
    origin: str = "built-in catalog"

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
            ("PCIe bandwidth", self.pcie_bandwidth_bytes_per_s),
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
    "pcie": ("pcie_bandwidth_bytes_per_s",),
    "l2": ("l2_bytes",),
    "sms": ("sms",),
    "arch": ("compute_capability", "gcn_arch"),
}


def _optional(t: dict, name: str, unit: float) -> float | None:
    value = t.get(name)
    return None if value is None else float(value) * unit


def _spec_from_table(key: str, t: dict, where: str | None = None) -> DeviceSpec:
    where = where or f"catalog entry [{key}]"
    check_table(where, t)
    raw_sources = dict(t["sources"])
    try:
        spec = DeviceSpec(
            key=key,
            name=t["name"],
            vendor=t["vendor"],
            kind=t["kind"],
            driver_names=tuple(t.get("driver_names", ())),
            peak_flops_per_s={d: float(v) * _TFLOPS for d, v in t["dense_tflops"].items()},
            memory_bytes=float(t["memory_gib"]) * _GIB,
            memory_bandwidth_bytes_per_s=float(t["memory_bandwidth_gb_per_s"]) * _GB,
            link_bandwidth_bytes_per_s=_optional(t, "link_gb_per_s_one_way", _GB),
            pcie_bandwidth_bytes_per_s=_optional(t, "pcie_gb_per_s_one_way", _GB),
            l2_bytes=_optional(t, "l2_mib", _MIB),
            sms=t.get("sms"),
            compute_capability=t.get("compute_capability"),
            gcn_arch=t.get("gcn_arch"),
            cluster_defaults=dict(t.get("cluster", {})),
        )
    except InvalidInput as exc:  # the spec's own range checks, said for this file
        raise MalformedFile(f"{where}: {exc}".replace(f"device spec {key!r}: ", "")) from None
    # Every number must say where it comes from.
    sources = {"datasheet": raw_sources.pop("datasheet", "")}
    if not sources["datasheet"]:
        raise MalformedFile(f"{where}: missing field 'sources.datasheet' (the document)")
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


def _specs_from_file(path: Path) -> list[tuple[DeviceSpec, dict]]:
    """Every entry of a user's TOML file, validated; errors name the file and the field."""
    data = read_toml(path, "spec file")
    if not data:
        raise MalformedFile(f"spec file {path}: no [device] table in it")
    out = []
    for key, table in data.items():
        spec = _spec_from_table(key, table, where=f"{path} [{key}]")
        object.__setattr__(spec, "origin", str(path))
        out.append((spec, table))
    return out


def is_spec_file(name: str) -> bool:
    """'my-gpu.toml' or 'devices.toml#my-gpu' name a file rather than a catalog entry."""
    return name.split("#", 1)[0].strip().lower().endswith(".toml")


def load_spec_file(name: str | Path) -> DeviceSpec:
    """The device a user's TOML file defines; 'file.toml#key' picks one of several."""
    text = str(name)
    file_part, _, key = text.partition("#")
    path = Path(file_part).expanduser()
    if name_is_usable(path) and not path.exists():
        raise InvalidInput(f"spec file {path} does not exist (--spec takes a name or a .toml)")
    entries = {s.key: s for s, _ in _specs_from_file(path)}
    if key:
        if key not in entries:
            raise UnknownName(f"spec file {path} has no [{key}]; it has: {', '.join(entries)}")
        return entries[key]
    if len(entries) > 1:
        raise InvalidInput(
            f"spec file {path} defines {len(entries)} devices ({', '.join(entries)}); "
            f"pick one with {path}#{next(iter(entries))}"
        )
    return next(iter(entries.values()))


@dataclass(frozen=True)
class _Catalog:
    specs: dict[str, DeviceSpec]
    index: dict[str, str]  # canonical name, alias or driver name -> key


def extra_catalog_files(env_value: str | None = None) -> list[Path]:
    """The *.toml files of the directories CEILING_CATALOG names, in a stable order."""
    value = os.environ.get(CATALOG_ENV, "") if env_value is None else env_value
    files: list[Path] = []
    for part in value.split(os.pathsep):
        if not part.strip():
            continue
        folder = Path(part.strip()).expanduser()
        if not folder.is_dir():
            raise InvalidInput(f"{CATALOG_ENV}: {folder} is not a directory")
        files.extend(sorted(folder.glob("*.toml")))
    return files


def _catalog() -> _Catalog:
    return _load_catalog(os.environ.get(CATALOG_ENV, ""))


@functools.cache
def _load_catalog(env_value: str) -> _Catalog:
    text = resources.files("ceiling.hardware").joinpath("catalog.toml").read_text("utf-8")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise MalformedFile(f"hardware catalog: {exc}") from exc
    entries = [(_spec_from_table(key, table), table) for key, table in data.items()]
    for path in extra_catalog_files(env_value):
        entries.extend(_specs_from_file(path))
    specs: dict[str, DeviceSpec] = {}
    index: dict[str, str] = {}
    for spec, table in entries:
        if spec.key in specs:
            raise MalformedFile(
                f"{spec.origin}: device key [{spec.key}] is already defined in "
                f"{specs[spec.key].origin}; choose another key"
            )
        specs[spec.key] = spec
        names = [spec.key, *table.get("aliases", ()), *spec.driver_names]
        for n in names:
            for form in (_canonical(n), _compact(n)):
                if index.setdefault(form, spec.key) != spec.key:
                    raise MalformedFile(
                        f"{spec.origin} [{spec.key}]: name {n!r} already names "
                        f"[{index[form]}] ({specs[index[form]].origin})"
                    )
    return _Catalog(specs, index)


def all_specs() -> list[DeviceSpec]:
    """Every catalog entry, in file order."""
    return list(_catalog().specs.values())


def match_driver_name(name: str) -> DeviceSpec | None:
    """The entry for a name as the driver reports it ('NVIDIA A100-SXM4-80GB'), or None."""
    cat = _catalog()
    # drivers before 2021 named GeForce and Quadro boards without the maker: 'GeForce RTX 3090'
    names = (name, f"NVIDIA {name}") if name.lower().startswith(("geforce", "quadro")) else (name,)
    for form in (f(n) for n in names for f in (_canonical, _compact)):
        if form in cat.index:
            return cat.specs[cat.index[form]]
    return None


def get_spec(name: str) -> DeviceSpec:
    """Look up by short name, alias, driver name (any case) or a user's .toml file.

    Every command's --spec comes here. UnknownName lists close names."""
    if is_spec_file(name):
        return load_spec_file(name)
    spec = match_driver_name(name)
    if spec is not None:
        return spec
    keys = list(_catalog().specs)
    close = difflib.get_close_matches(_canonical(name), keys, n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise UnknownName(
        f"unknown device {name!r}; {hint}`ceiling specs` lists all {len(keys)} known devices "
        "(your own: a .toml file, see `ceiling specs --template`)"
    )
