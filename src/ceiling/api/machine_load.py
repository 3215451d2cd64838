"""Whether other work shared this machine while something was measured: a watch over a block
(`watch()`, its `record` after the block) and what a record says (`busy_reasons`,
`evidence`), for whoever measures beside the library's own benchmarks."""

from __future__ import annotations

from typing import Any

from ceiling.hardware.load import LoadWatch


def watch() -> LoadWatch:
    """`with watch() as w: ...` then `w.record`: the machine's load over the block."""
    return LoadWatch()


def busy_reasons(load: dict[str, Any] | None) -> list[str]:
    """Why a load record (`LoadRecord.to_json`) counts as busy, one phrase each; [] for none."""
    from ceiling.hardware.load import record_busy

    return record_busy(load)


def evidence(load: dict[str, Any]) -> tuple[str, float] | None:
    """The field and figure a busy load record's first reason quotes (None when idle)."""
    from ceiling.hardware.load import LoadRecord

    return LoadRecord.from_json(load).evidence()
