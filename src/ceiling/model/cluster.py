"""A training cluster: nodes of devices, the links inside and between nodes, achieved rates.

Device peaks come from the hardware catalog (or a measured profile); node sizes, scale-out
bandwidth, collective and kernel efficiencies come from `clusters.toml`, one entry per
device with the source of every figure. Bandwidths are per device and one direction.
"""

from __future__ import annotations

import functools
import math
import sys
from dataclasses import dataclass, field

from ceiling.errors import InvalidInput, MalformedFile
from ceiling.vocabulary import normalize_dtype

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

_GB, _US = 1e9, 1e-6


@dataclass(frozen=True)
class ClusterSpec:
    """`nodes` × `devices_per_node` devices of one kind and the network joining them."""

    device: object  # ceiling.hardware.catalog.DeviceSpec
    nodes: int
    devices_per_node: int
    intra_node_bandwidth_bytes_per_s: float
    inter_node_bandwidth_bytes_per_s: float
    intra_node_latency_s: float
    inter_node_latency_s: float
    intra_collective_efficiency: float
    inter_collective_efficiency: float
    matmul_efficiency: float
    memory_efficiency: float
    step_jitter: float = 0.0  # relative standard deviation of one device's step time
    attention_efficiency: float = 0.5  # achieved/peak of fused (flash) attention kernels
    # The attention efficiency was measured (a trace of the user's run): it replaces the
    # kernels' published curves (`model.plan.attention_kernels`).
    attention_measured: bool = False
    fp8_matmul_efficiency: float | None = None  # measured achieved/FP8 peak (a profile's)
    # FP8 GEMMs' share of the FP8 peak over 16-bit GEMMs' share of theirs (published, per
    # device in clusters.toml); None: none published, FP8 GEMMs take the 16-bit share.
    fp8_matmul_ratio: float | None = None
    dtype: str = "bf16"
    efficiency_source: str = "catalog default"
    sources: dict[str, str] = field(default_factory=dict)
    device_source: str = ""  # which device rule picked it: "datasheet spec KEY", "measured ..."

    def __post_init__(self) -> None:
        for name in ("nodes", "devices_per_node"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise InvalidInput(f"{name} must be a positive integer, got {v!r}")
        for name in (
            "intra_node_bandwidth_bytes_per_s",
            "inter_node_bandwidth_bytes_per_s",
        ):
            v = getattr(self, name)
            if not (math.isfinite(v) and v > 0):
                raise InvalidInput(f"{name} must be > 0, got {v!r}")
        for name in ("intra_node_latency_s", "inter_node_latency_s"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise InvalidInput(f"{name} must be ≥ 0, got {v!r}")
        for name in (
            "intra_collective_efficiency",
            "inter_collective_efficiency",
            "matmul_efficiency",
            "memory_efficiency",
            "attention_efficiency",
        ):
            v = getattr(self, name)
            if not (0 < v <= 1):
                raise InvalidInput(f"{name} must be in (0, 1], got {v!r}")
        fp8 = self.fp8_matmul_efficiency
        if fp8 is not None and not 0 < fp8 <= 1:
            raise InvalidInput(f"fp8_matmul_efficiency must be in (0, 1], got {fp8!r}")
        ratio = self.fp8_matmul_ratio
        if ratio is not None and not (math.isfinite(ratio) and ratio > 0):
            raise InvalidInput(f"fp8_matmul_ratio must be > 0, got {ratio!r}")
        if not 0 <= self.step_jitter < 1:
            raise InvalidInput(f"step_jitter must be in [0, 1), got {self.step_jitter!r}")
        object.__setattr__(self, "dtype", normalize_dtype(self.dtype))
        self.device.peak(self.dtype)  # raises UnsupportedOnDevice naming what it has

    def to_json(self) -> dict:
        return {
            "device": self.device.key,
            "devices": self.devices,
            "nodes": self.nodes,
            "devices_per_node": self.devices_per_node,
            "dtype": self.dtype,
            "peak_flops_per_s": self.peak_flops_per_s,
            "memory_bytes": self.memory_bytes,
            "intra_node_bandwidth_bytes_per_s": self.intra_node_bandwidth_bytes_per_s,
            "inter_node_bandwidth_bytes_per_s": self.inter_node_bandwidth_bytes_per_s,
            "matmul_efficiency": self.matmul_efficiency,
            "memory_efficiency": self.memory_efficiency,
            "attention_efficiency": self.attention_efficiency,
            "fp8_matmul_efficiency": self.fp8_matmul_efficiency,
            "fp8_matmul_ratio": self.fp8_matmul_ratio,
            "efficiency_source": self.efficiency_source,
            "device_source": self.device_source,
            "sources": self.sources,
        }

    @property
    def devices(self) -> int:
        return self.nodes * self.devices_per_node

    @property
    def peak_flops_per_s(self) -> float:
        """Dense datasheet peak in the training dtype: the denominator of MFU."""
        return self.device.peak(self.dtype)

    @property
    def matmul_flops_per_s(self) -> float:
        return self.peak_flops_per_s * self.matmul_efficiency

    @property
    def fp8_efficiency(self) -> float:
        """Achieved share of the dense FP8 peak for large FP8 GEMMs: a profile's measured
        figure, else the 16-bit share times the device's published FP8/16-bit ratio, else the
        16-bit share."""
        if self.fp8_matmul_efficiency is not None:
            return self.fp8_matmul_efficiency
        return min(1.0, self.matmul_efficiency * (self.fp8_matmul_ratio or 1.0))

    @property
    def fp8_efficiency_source(self) -> str:
        """Where `fp8_efficiency` comes from, in words."""
        if self.fp8_matmul_efficiency is not None:
            return "measured FP8 matmul rate of the profile"
        if self.fp8_matmul_ratio is not None:
            return (
                f"the 16-bit share × {self.fp8_matmul_ratio:.3g}, the published FP8/16-bit "
                f"GEMM ratio for {self.device.key}"
            )
        return f"the 16-bit share: no FP8 GEMM figure published for {self.device.key}"

    @property
    def memory_bytes_per_s(self) -> float:
        return self.device.memory_bandwidth_bytes_per_s * self.memory_efficiency

    @property
    def memory_bytes(self) -> float:
        return self.device.memory_bytes

    def link(self, spans_nodes: bool) -> tuple[float, float]:
        """(achieved bus bandwidth, per-step latency) of a collective inside or across nodes."""
        if spans_nodes:
            bw = self.inter_node_bandwidth_bytes_per_s * self.inter_collective_efficiency
            return bw, self.inter_node_latency_s
        bw = self.intra_node_bandwidth_bytes_per_s * self.intra_collective_efficiency
        return bw, self.intra_node_latency_s


@functools.cache
def _defaults() -> dict[str, dict]:
    from importlib.resources import files

    text = files("ceiling.model").joinpath("clusters.toml").read_text(encoding="utf-8")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise MalformedFile(f"cluster defaults: {exc}") from exc


def node_defaults(device_key: str) -> dict:
    """The clusters.toml entry for a device key, or the generic default entry."""
    from ceiling.model import fitted

    data = _defaults()
    out = dict(data.get(device_key, data["default"]))
    name = f"plan.matmul_efficiency.{device_key}"
    if name in fitted.DECLARED:
        out["matmul_efficiency"] = fitted.value(name, out["matmul_efficiency"])
    return out


def _node_figures(device) -> tuple[dict, dict]:
    """clusters.toml's node and network figures for a device, with a user's device file's own
    `cluster` table over them; and that own table."""
    d = node_defaults(device.key)
    own = dict(getattr(device, "cluster_defaults", None) or {})
    d.update(own)
    if own.get("sources"):
        d["sources"] = {**d.get("sources", {}), **own["sources"]}
    return d, own


def group_link(device, ranks: int, dtype: str) -> tuple[float, float]:
    """(achieved bus bandwidth, per-step latency) of a collective over `ranks` devices packed
    into as few nodes as possible: the planner's figures, for callers without a cluster
    (decode's tensor parallelism)."""
    per_node = int(_node_figures(device)[0]["devices_per_node"])
    spans = ranks > per_node
    return make_cluster(device, per_node if spans else ranks, dtype=dtype).link(spans)


def _rack_share(devices: int, rack: int, tray: int) -> int:
    """GPUs a job takes in each rack-scale NVLink domain when it does not fill whole racks:
    the most whole trays per rack that split the job evenly (the rack's size when none do,
    and the caller refuses)."""
    for share in range(rack - rack % tray, 0, -tray):
        if devices % share == 0:
            return share
    return rack


def make_cluster(
    device,
    devices: int,
    devices_per_node: int | None = None,
    *,
    intra_node_bandwidth_bytes_per_s: float | None = None,
    inter_node_bandwidth_bytes_per_s: float | None = None,
    matmul_efficiency: float | None = None,
    memory_efficiency: float | None = None,
    dtype: str = "bf16",
    efficiency_source: str | None = None,
    device_source: str | None = None,
) -> ClusterSpec:
    """A cluster of `devices` devices with defaults from the catalog and clusters.toml.

    Fewer devices than a node holds make one partial node; more must fill whole nodes.
    """
    if not isinstance(devices, int) or isinstance(devices, bool) or devices < 1:
        raise InvalidInput(f"device count must be a positive integer, got {devices!r}")
    d, own = _node_figures(device)
    base = _defaults()["default"]
    nodes, per_node, racks = _placement(d, devices, devices_per_node)
    intra = intra_node_bandwidth_bytes_per_s
    if intra is None:
        link = getattr(device, "link_bandwidth_bytes_per_s", None)
        intra = link if link else float(base["intra_node_fallback_gb_per_s"]) * _GB
    inter = inter_node_bandwidth_bytes_per_s
    if inter is None:
        inter = float(d["inter_node_gb_per_s"]) * _GB
    sources = dict(d.get("sources", {}))
    if racks:
        sources["placement"] = racks
    if device.sources.get("link_bandwidth_bytes_per_s"):
        sources["intra_node_link"] = device.sources["link_bandwidth_bytes_per_s"]
    if efficiency_source is None:
        efficiency_source = _efficiency_source(device, own, matmul_efficiency)
    return ClusterSpec(
        device=device,
        nodes=nodes,
        devices_per_node=per_node,
        intra_node_bandwidth_bytes_per_s=float(intra),
        inter_node_bandwidth_bytes_per_s=float(inter),
        intra_node_latency_s=float(d["intra_node_latency_us"]) * _US,
        inter_node_latency_s=float(d["inter_node_latency_us"]) * _US,
        intra_collective_efficiency=float(d["intra_collective_efficiency"]),
        inter_collective_efficiency=float(d["inter_collective_efficiency"]),
        matmul_efficiency=float(
            matmul_efficiency if matmul_efficiency is not None else d["matmul_efficiency"]
        ),
        memory_efficiency=float(
            memory_efficiency if memory_efficiency is not None else d["memory_efficiency"]
        ),
        step_jitter=float(d.get("step_jitter", base["step_jitter"])),
        attention_efficiency=float(d.get("attention_efficiency", base["attention_efficiency"])),
        fp8_matmul_ratio=float(d["fp8_matmul_ratio"]) if "fp8_matmul_ratio" in d else None,
        dtype=dtype,
        efficiency_source=efficiency_source,
        sources=sources,
        device_source=device_source or f"datasheet spec {device.key}",
    )


def _placement(d: dict, devices: int, devices_per_node: int | None) -> tuple[int, int, str | None]:
    """(nodes, devices per node, how a rack-scale domain was shared or None) for `devices`
    devices on nodes of the given size, else clusters.toml's (`d`)."""
    per_node = devices_per_node if devices_per_node is not None else int(d["devices_per_node"])
    if not isinstance(per_node, int) or per_node < 1:
        raise InvalidInput(f"devices per node must be a positive integer, got {per_node!r}")
    tray = int(d.get("tray", 0)) if devices_per_node is None else 0
    racks = None
    if devices > per_node and devices % per_node and tray:
        rack, per_node = per_node, _rack_share(devices, per_node, tray)
        if per_node != rack:
            racks = (
                f"{devices} devices do not fill whole {rack}-device NVLink domains: placed "
                f"as {devices // per_node} of {per_node} ({per_node // tray} trays of {tray})"
            )
    if devices <= per_node:
        nodes, per_node = 1, devices
    elif devices % per_node:
        raise InvalidInput(
            f"{devices} devices do not fill whole {per_node}-device nodes: "
            f"{devices} % {per_node} = {devices % per_node}"
        )
    else:
        nodes = devices // per_node
    return nodes, per_node, racks


def _efficiency_source(device, own: dict, matmul_efficiency: float | None) -> str:
    """Where the matmul efficiency came from: given, the device file, or clusters.toml."""
    return (
        "given"
        if matmul_efficiency is not None
        else f"{getattr(device, 'origin', 'device file')} ({device.key}.cluster)"
        if own.get("matmul_efficiency") is not None
        else f"clusters.toml default for {device.key}"
        if device.key in _defaults()
        else "clusters.toml generic default"
    )


def fp8_efficiency_from_profile(measured, datasheet) -> float | None:
    """A measured profile's FP8 matmul rate over the datasheet's FP8 peak (None when either
    is missing): the share FP8 GEMMs reach, which need not be the 16-bit one's."""
    rate = measured.peak_flops_per_s.get("fp8")
    peak = datasheet.peak_flops_per_s.get("fp8")
    return min(1.0, rate / peak) if rate and peak else None


def efficiencies_from_profile(measured, datasheet, dtype: str = "bf16") -> tuple[float, float]:
    """(matmul, memory) efficiency of a measured device relative to its datasheet spec.

    `measured` is a profile's MeasuredDevice: its best matmul FLOP/s and streaming bandwidth
    are what training kernels can reach at most, so they replace the catalog fractions.
    """
    rate = measured.peak_flops_per_s.get(dtype)
    if rate is None:
        raise InvalidInput(
            f"the profile of {measured.name} has no {dtype} matmul measurement; "
            f"it has {', '.join(sorted(measured.peak_flops_per_s)) or 'none'}"
        )
    mm = min(1.0, rate / datasheet.peak(dtype))
    bw = measured.bandwidth_bytes_per_s
    mem = min(1.0, bw / datasheet.memory_bandwidth_bytes_per_s) if bw else None
    if mem is None:
        mem = float(node_defaults(datasheet.key)["memory_efficiency"])
    return mm, mem
