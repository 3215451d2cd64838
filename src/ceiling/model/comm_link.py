"""Which link a collective runs over, and busbw as a share of it.

nccl-tests' busbw is defined so that a ring algorithm can reach, at most, the one-way
bandwidth of the slowest link it crosses: inside a node the device-to-device fabric
(NVLink, Infinity Fabric, Gaudi's RoCE ports) or, without one, PCIe; across nodes the
scale-out NIC's share per device. A busbw above that bound is not a ring: switches that
reduce in the network (NVLink SHARP / NVLS on NVSwitch, SHARP on InfiniBand) deliver it,
or the link figure is not this machine's.
"""

from __future__ import annotations

from dataclasses import dataclass

from ceiling.model.cluster import node_defaults

_GB = 1e9
_FABRIC = {
    "NVIDIA": "NVLink",
    "AMD": "Infinity Fabric",
    "Google": "ICI",
    "Intel": "RoCE scale-up ports",
}
# busbw may exceed the bound by this much before it is called out (timing noise).
RING_BOUND_SLACK = 0.02


@dataclass(frozen=True)
class CommLink:
    """The link whose one-way bandwidth bounds a ring collective's busbw."""

    kind: str  # "NVLink", "PCIe", "scale-out network", ...
    bytes_per_s_one_way: float
    device_key: str
    source: str

    def share(self, busbw_bytes_per_s: float) -> float:
        """busbw / one-way link bandwidth; above 1 is beyond any ring over this link."""
        return busbw_bytes_per_s / self.bytes_per_s_one_way

    def json(self) -> dict:
        return {
            "kind": self.kind,
            "bytes_per_s_one_way": self.bytes_per_s_one_way,
            "device": self.device_key,
            "source": self.source,
        }


def collective_link(spec, *, spans_nodes: bool) -> CommLink | None:
    """The bounding link for ranks on devices like `spec` (a catalog DeviceSpec); None for
    no spec (a CPU under gloo, an unknown GPU) or a device that lists no link."""
    if spec is None:
        return None
    if spans_nodes:
        d = {**node_defaults(spec.key), **(getattr(spec, "cluster_defaults", None) or {})}
        sources = d.get("sources", {})
        return CommLink(
            kind="scale-out network",
            bytes_per_s_one_way=float(d["inter_node_gb_per_s"]) * _GB,
            device_key=spec.key,
            source=sources.get("network", "cluster defaults (model/clusters.toml)"),
        )
    if spec.link_bandwidth_bytes_per_s:
        return CommLink(
            kind=_FABRIC.get(spec.vendor, "device link"),
            bytes_per_s_one_way=spec.link_bandwidth_bytes_per_s,
            device_key=spec.key,
            source=spec.sources.get("link_bandwidth_bytes_per_s", ""),
        )
    if spec.pcie_bandwidth_bytes_per_s:
        return CommLink(
            kind="PCIe",
            bytes_per_s_one_way=spec.pcie_bandwidth_bytes_per_s,
            device_key=spec.key,
            source=spec.sources.get("pcie_bandwidth_bytes_per_s", ""),
        )
    return None


def above_ring_bound(share: float | None) -> bool:
    return share is not None and share > 1 + RING_BOUND_SLACK


def share_rows(rows: list[dict], link: CommLink | None) -> list[str]:
    """Add `busbw_share_of_link` to each row (None without a link); lines for the rows
    whose busbw is above what a ring over the link can reach."""
    notes = []
    for r in rows:
        share = link.share(r["busbw_gbps"] * _GB) if link is not None else None
        r["busbw_share_of_link"] = share
        r["above_ring_bound"] = above_ring_bound(share)
        if r["above_ring_bound"]:
            notes.append(
                f"{r['op']} at {r['bytes']} bytes: busbw {r['busbw_gbps']:.3g} GB/s is "
                f"{share:.0%} of the {link.kind}'s {link.bytes_per_s_one_way / _GB:.3g} GB/s "
                "one way, above the ring bound: the reduction ran in the network (NVLink "
                "SHARP / NVLS, InfiniBand SHARP) or the link figure is not this machine's"
            )
    return notes


def best_shares(rows: list[dict]) -> dict[str, float] | None:
    """Per op, the highest busbw share of the link over the sweep (None without a link)."""
    out: dict[str, float] = {}
    for r in rows:
        share = r.get("busbw_share_of_link")
        if share is not None:
            out[r["op"]] = max(out.get(r["op"], 0.0), share)
    return out or None
