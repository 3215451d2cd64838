"""This machine's profile as a result: the one saved (`machine_profile(path)`: the file given,
else the default one `ceiling bench` saves), or one measured now on every device here
(`measure_profile`: the CPU, and the GPU when there is one); either holds the overhead
records `ceiling bench overhead` measured (`ProfileResult.overheads`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ceiling.api.result import Result
from ceiling.errors import InvalidInput
from ceiling.hardware.profile import MachineProfile


@dataclass(frozen=True)
class Overhead:
    """One device's overhead record as the profile keeps it: a tiny op's dispatch (CPU) or
    launch (GPU), a Python loop against vectorised code over `loop_elements`, the GPU-vs-CPU
    crossovers (each op's sizes and the size from which the GPU wins, with and without the
    copies) and the run's notes."""

    device: str
    tiny_op_s: float
    loop_elements: int
    loop_s: float
    vectorized_s: float
    device_vectorized_s: float
    loop_vs_vectorized: float
    crossovers: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, record: dict[str, Any]) -> Overhead:
        return cls(
            record["device"], record["tiny_op_s"], record["loop_elements"], record["loop_s"],
            record["vectorized_s"], record["device_vectorized_s"], record["loop_vs_vectorized"],
            list(record.get("crossovers") or []), list(record.get("notes") or []),
        )  # fmt: skip


@dataclass
class ProfileResult(Result):
    """The machine profile in use, where it came from in words (`source`), the file it is
    saved in (`path`; None when measured and saved nowhere) and whether it was measured now."""

    profile: MachineProfile
    source: str
    path: Path | None = None
    measured_now: bool = False
    title = "Machine profile"

    @property
    def overheads(self) -> list[Overhead]:
        """The overhead record of each device that has one, in the profile's order."""
        return [Overhead.of(d.extra["overhead"]) for d in self.profile.devices
                if d.extra and d.extra.get("overhead")]  # fmt: skip

    def record(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "path": str(self.path) if self.path else None,
            "measured_now": self.measured_now,
            "profile": self.profile.to_json(),
            "overheads": [asdict(o) for o in self.overheads],
        }

    def heading(self) -> str:
        return f"Machine profile ({self.source})"


def machine_profile(path: str | Path | None = None) -> ProfileResult | None:
    """The machine profile at `path`, else the one saved by `ceiling bench` when there is one,
    else None. A file that does not exist or is not a profile is refused in one line."""
    from ceiling.hardware.profile import default_profile_path, load_profile

    if path is not None and not isinstance(path, str | Path):
        raise InvalidInput(f"path must be the path of a machine profile, got {path!r}")
    found = Path(path) if path is not None else default_profile_path()
    if path is None and not found.exists():
        return None
    return ProfileResult(load_profile(found), str(found), found)


def measure_profile(
    *,
    quick: bool = True,
    save: str | Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> ProfileResult:
    """Measure this machine's ceilings now (the CPU, and the GPU beside it when there is one)
    and build its profile, saved to `save` when given, and as the default profile only when
    there is none yet and the machine was idle (a busy machine's ceilings read low). Ctrl-C
    stops it with KeyboardInterrupt and saves nothing. `progress` is told each step."""
    from ceiling.hardware import profile as saved_profiles
    from ceiling.measure import machine, suite

    step = progress or (lambda _message: None)
    devices = ["cpu"]
    gpu = machine.pick_device(None)
    if gpu != "cpu":
        devices.append(gpu)
    profile, bench = None, None
    for device in devices:
        step(f"measuring the {device.upper()}'s ceilings")
        bench = suite.run_all(device, quick=quick, progress=step)
        if bench.interrupted:
            raise KeyboardInterrupt
        profile = suite.build_profile(bench, previous=profile)
    assert profile is not None and bench is not None
    saved = [saved_profiles.save_profile(profile, save)] if save is not None else []
    default = saved_profiles.default_profile_path()
    if not default.exists() and not saved_profiles.measured_busy(bench.environment):
        saved.append(saved_profiles.save_profile(profile, default))
    where = f", saved to {' and '.join(map(str, saved))}" if saved else ""
    mode = "quick" if quick else "full"
    source = f"measured now ({mode} benchmarks){where}"
    return ProfileResult(profile, source, Path(saved[0]) if saved else None, measured_now=True)


def busy_reasons(environment: dict[str, Any]) -> list[str]:
    """Why a measurement's recorded environment says other work shared the machine (its load
    window, else the load average it started at); [] when it was idle."""
    from ceiling.hardware.profile import busy_reasons as reasons

    return reasons(environment)
