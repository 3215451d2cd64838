"""A catalog device from what a driver reports about it (a trace's `deviceProperties`).

Driver names drift ("Tesla V100-SXM2-16GB", "NVIDIA A100-PG509-200", and ROCm releases that
call an MI250 "AMD Radeon Graphics"), while the architecture and the SM (compute-unit) count
do not: a name the catalog knows decides; otherwise the entry of the same vendor,
architecture (compute capability, or AMD's gfx target) and SM count whose memory is closest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ceiling.hardware.catalog import DeviceSpec, all_specs, match_driver_name

_GIB = 2**30
_AMD_WORDS = ("amd", "radeon")


@dataclass(frozen=True)
class Identified:
    spec: DeviceSpec
    how: str  # how the entry was found, for the output's source line


def _whole(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def identify(props: dict) -> Identified | None:
    """The catalog entry for one `deviceProperties` entry, or None when nothing fits."""
    name = str(props.get("name") or "")
    if name and (spec := match_driver_name(name)) is not None:
        return Identified(spec, f"driver name {name!r}")
    major, minor = _whole(props.get("computeMajor")), _whole(props.get("computeMinor"))
    gcn = str(props.get("gcnArchName") or "").split(":")[0] or None
    amd = (
        bool(gcn)
        or props.get("warpSize") == 64
        or any(w in name.lower() for w in ("amd", "radeon"))
    )
    cc = f"{major}.{minor}" if major is not None and minor is not None else None
    sms = _whole(props.get("numSms")) or _whole(props.get("multiProcessorCount"))
    memory = props.get("totalGlobalMem")
    memory = float(memory) if isinstance(memory, (int, float)) and memory > 0 else None

    def same_arch(s: DeviceSpec) -> bool:
        if (s.vendor == "AMD") != amd:
            return False
        if gcn and s.gcn_arch:
            return s.gcn_arch == gcn
        return cc is not None and s.compute_capability == cc

    candidates = [s for s in all_specs() if same_arch(s) and s.sms is not None and s.sms == sms]
    if not candidates:
        return None

    def distance(s: DeviceSpec) -> float:
        return abs(math.log(s.memory_bytes / memory)) if memory and s.memory_bytes else 0.0

    spec = min(candidates, key=distance)
    facts = [f"gfx target {gcn}" if gcn else f"compute capability {cc}", f"{sms} SMs"]
    if memory:
        facts.append(f"{memory / _GIB:.1f} GiB")
    return Identified(spec, f"{name or 'unnamed device'}: {', '.join(facts)}")
