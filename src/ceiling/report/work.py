"""The user's work the report speaks of, and the built-in demos it falls back to.

Every section asks this object, never its own constant, which model, device and cluster to
use; each answer says whether it is the user's or a demo, so the page can label demos.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ceiling.errors import InvalidInput, argument

# the built-in demos, used where the user gave nothing
DEMO_TRAIN_MODEL = "gpt:tiny"
DEMO_DECODE_MODEL = "llama-3-8b"
DEMO_PLAN_MODEL = "llama-3-70b"
DEMO_DEVICE = "h100-sxm"
DEMO_GPUS = 256


@dataclass(frozen=True)
class Choice:
    """One thing a section uses: its value and whether the user gave it."""

    value: object
    demo: bool
    why: str | None = None  # why a demo stands in although the user gave something

    def label(self, what: str) -> str:
        """`value`, or `value (demo; --flag for yours)` when it is a built-in demo."""
        return f"{self.value} (demo; {what} for yours)" if self.demo else str(self.value)


def subject(parts: list[tuple[Choice, str, str]]) -> tuple[str, bool]:
    """The line that says what a section speaks of, and whether it is all demo.

    `parts`: (choice, its flag, how to say it) in reading order, e.g.
    (model, "--model", "llama-3-70b"), (gpus, "--gpus", "on 256 ×")."""
    text = " ".join(say for _, _, say in parts)
    demos = [flag for choice, flag, _ in parts if choice.demo and not choice.why]
    whys = "".join(f"; {c.why}" for c, _, _ in parts if c.demo and c.why)
    if all(c.demo for c, _, _ in parts):
        hint = f"{', '.join(demos)} for yours" if demos else ""
        return f"Demo: {text} ({(hint + whys).removeprefix('; ')}).", True
    if demos or whys:
        said = f"demo {', '.join(demos)}{whys}".replace("demo ; ", "demo: ")
        return f"Yours: {text} ({said}).", False
    return f"Yours: {text}.", False


def transformer(name: str):
    """The transformer config `ceiling models NAME` shows (a catalog name, custom:..., hf:PATH);
    an unknown name refused as that command refuses it."""
    from ceiling.api.models import models

    (config,) = models([name]).models.values()
    return config


@dataclass(frozen=True)
class ReportOptions:
    """What `ceiling report` is asked: the mode, this machine's profile, the user's work."""

    quick: bool = True
    profile: Path | None = None  # this machine, measured before (and the cluster's device)
    trace: Path | None = None
    model: str | None = None  # catalog name, custom:..., hf:PATH or module:callable
    spec: str | None = None  # the target cluster's device
    gpus: int | None = None
    seq: int | None = None
    global_batch: int | None = None
    only: tuple[str, ...] = field(default_factory=tuple)
    save_profile_to: Path | None = None

    def __post_init__(self) -> None:
        from ceiling.api.device import check_one_device

        check_one_device(self.spec, self.profile)  # the one device rule of every command
        for name in ("gpus", "seq", "global_batch"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise InvalidInput(f"{argument(name)} must be ≥ 1, got {v}")

    @property
    def is_callable_model(self) -> bool:
        """A `module:callable` (or file.py:fn) model: no transformer shape to plan or decode."""
        m = (self.model or "").strip()
        low = m.lower()
        return ":" in m and not low.startswith(("hf:", "custom:", "gpt:"))

    def model_name(self) -> str | None:
        """The user's model as every section names it: a transformer's name (`hf:llama8`, not
        the path given), else the text given (a module:callable)."""
        if not self.model:
            return None
        if self.is_callable_model:
            return self.model
        return transformer(self.model).name

    def train_model(self) -> Choice:
        return Choice(self.model, False) if self.model else Choice(DEMO_TRAIN_MODEL, True)

    def shape_model(self, demo: str):
        """(TransformerConfig, Choice) of the user's model, else of `demo`."""
        if self.model and not self.is_callable_model:
            return transformer(self.model), Choice(self.model, False)
        why = "a module:callable model has no transformer shape" if self.model else None
        return transformer(demo), Choice(demo, True, why)

    def cluster_device(self):
        """(Machine, Choice): --spec, else the --profile's catalog GPU, else the demo."""
        from ceiling.api.device import device

        if self.spec is not None:
            r = device(self.spec, None)
            return r, Choice(r.spec.name, False)
        if self.profile is not None:
            from ceiling.api.device import profile_gpu

            r = profile_gpu(self.profile)
            if r is not None:
                return r, Choice(r.spec.name, False)
        r = device(DEMO_DEVICE, None)
        return r, Choice(r.spec.name, True)

    def cluster_gpus(self) -> Choice:
        return Choice(self.gpus, False) if self.gpus else Choice(DEMO_GPUS, True)

    @property
    def any_work(self) -> bool:
        return any(v is not None for v in (self.model, self.trace, self.spec, self.gpus))
