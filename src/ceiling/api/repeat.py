"""Are repeated results bitwise identical? As a result: `ceiling.repeat("matmul", runs=3)`."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ceiling.api.arguments import BadArgument, checked
from ceiling.api.result import Result
from ceiling.measure.deadline import DEFAULT_TIMEOUT_S


@dataclass(frozen=True)
class RepeatResult(Result):
    """Each (deterministic algorithms, thread count) group of runs (`raw`: distinct results,
    whether they match the first, the largest absolute and relative deviation) and the
    findings in plain words (`verdict`)."""

    raw: dict[str, Any]
    verdict: list[str]
    title = "Repeatability"

    @property
    def groups(self) -> list[dict[str, Any]]:
        return self.raw["groups"]

    @property
    def identical(self) -> bool:
        """Every run of every group gave the first run's bits."""
        return all(g["matches_first_result"] for g in self.groups)

    def record(self) -> dict[str, Any]:
        return {**self.raw, "verdict": self.verdict}

    def heading(self) -> str:
        same = "bitwise identical" if self.identical else "not bitwise identical"
        return f"{self.raw['target']}: {self.raw['runs']} runs per setting, {same}"


@checked
def repeat(
    target: str,
    *,
    runs: int = 10,
    threads: Iterable[int] = (1, 2),
    deterministic_check: bool = True,
    timeout_s: float | None = DEFAULT_TIMEOUT_S,
    on_run: Callable[[], None] | None = None,
) -> RepeatResult:
    """Rerun `target` (gpt[:tiny|small], reduction, matmul or MODULE:CALLABLE returning
    numbers) `runs` times at each thread count and compare every output with the first;
    `deterministic_check` also reruns under torch.use_deterministic_algorithms(True).
    `on_run()` is called after each run; the runs stop after `timeout_s` seconds."""
    from ceiling.measure import repeat as rep

    counts = sorted(set(threads))
    if not counts or counts[0] < 1:
        raise BadArgument("threads", f"must be whole numbers ≥ 1, got {list(threads)!r}")
    raw = rep.run_repeat(
        target,
        runs,
        counts,
        check_deterministic=deterministic_check,
        on_run=on_run,
        timeout_s=timeout_s,
    )
    return RepeatResult(raw, rep.verdict(raw))
