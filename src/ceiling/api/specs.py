"""Datasheet specs as a result: `ceiling.specs("h100-sxm")`, or `ceiling.specs()` for all."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ceiling.api.arguments import checked
from ceiling.api.result import Result
from ceiling.units import GB, GiB


def spec_json(spec) -> dict:
    """A catalog entry for scripts: SI units, plus the datasheet units people quote."""
    return {
        "key": spec.key,
        "name": spec.name,
        "vendor": spec.vendor,
        "kind": spec.kind,
        "driver_names": list(spec.driver_names),
        "peak_flops_per_s": dict(spec.peak_flops_per_s),
        "peaks_are": "dense (2:4-sparse figures halved); a multiply-add counts 2 FLOPs",
        "memory_bytes": spec.memory_bytes,
        "memory_gib": spec.memory_bytes / GiB,
        "memory_gb": spec.memory_bytes / GB,
        "memory_bandwidth_bytes_per_s": spec.memory_bandwidth_bytes_per_s,
        "link_bandwidth_bytes_per_s_one_way": spec.link_bandwidth_bytes_per_s,
        "pcie_bandwidth_bytes_per_s_one_way": spec.pcie_bandwidth_bytes_per_s,
        "l2_bytes": spec.l2_bytes,
        "sms": spec.sms,
        "source": spec.sources.get("datasheet", ""),
        "sources": dict(spec.sources),
        "origin": spec.origin,
        "cluster_defaults": dict(spec.cluster_defaults) or None,
    }


def resolved_note(name: str, spec) -> str | None:
    """'h100 is h100-sxm (also: h100-pcie, h100-nvl)' when a name was not the entry's key."""
    from ceiling.hardware.catalog import all_specs, is_spec_file

    asked = "-".join(name.strip().lower().replace("_", " ").replace("-", " ").split())
    if is_spec_file(name) or asked == spec.key:
        return None
    others = [s.key for s in all_specs() if s.key != spec.key and s.key.startswith(asked)]
    also = f" (also: {', '.join(others)})" if others else ""
    return f"{name} is {spec.key}{also}"


@dataclass(frozen=True)
class SpecsResult(Result):
    """The catalog's datasheet entries: every one (`name` None), or the one `name` resolves
    to, with `resolved` saying so when the name was not its key."""

    devices: list[Any]  # hardware.catalog.DeviceSpec
    name: str | None
    resolved: str | None
    title = "Device catalog (datasheet figures)"

    @property
    def spec(self):
        """The one entry asked for (None when listing the catalog)."""
        return self.devices[0] if self.name is not None else None

    def record(self) -> dict[str, Any]:
        if self.name is None:
            return {"devices": [spec_json(s) for s in self.devices]}
        return {**spec_json(self.spec), **({"resolved": self.resolved} if self.resolved else {})}

    def heading(self) -> str:
        if self.name is None:
            return f"{self.title}: {len(self.devices)} devices"
        return f"{self.spec.name} ({self.spec.key}): datasheet"

    def toml(self) -> str:
        """The entry as a commented TOML file to edit (a blank template when listing)."""
        from ceiling.hardware.spec_template import spec_to_toml, template_text

        return spec_to_toml(self.spec) if self.name is not None else template_text()


@checked
def specs(name: str | None = None) -> SpecsResult:
    """Datasheet specs: dense peaks per dtype, memory, bandwidth, links, each with its source,
    of the device `name` (short name, driver name or your own FILE.toml), or of every entry."""
    from ceiling.hardware.catalog import all_specs, get_spec

    if name is None:
        return SpecsResult(all_specs(), None, None)
    spec = get_spec(name)
    return SpecsResult([spec], name, resolved_note(name, spec))
