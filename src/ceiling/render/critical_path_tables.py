"""Terminal tables for `ceiling trace --critical-path`: what a rank's mean step waits on, the
longest items on its critical path, and the what-if answers."""

from __future__ import annotations

from ceiling import units as u
from ceiling.render.kernel_names import short_kernel_name
from ceiling.trace.results import (
    PATH_COMM,
    PATH_COMPUTE,
    PATH_HOST,
    PATH_WAIT,
    CriticalPath,
    RankResult,
)


def path_rows(path: CriticalPath, step_s: float) -> list[list[str]]:
    """The path's seconds by category, as a share of the path."""
    rows = [["critical path", u.format_time(path.length_s), f"of a {u.format_time(step_s)} step"]]
    for cat, s in path.seconds.items():
        share = u.format_percent(s / path.length_s) if path.length_s > 0 else "—"
        rows.append([f"  {cat}", u.format_time(s), share])
        if cat == PATH_WAIT and path.peer_wait_s > 0:
            rows.append(["    for other ranks", u.format_time(path.peer_wait_s), ""])
    rest = step_s - path.length_s
    if rest > 0:  # a thread outside every recorded op weighs nothing (Python between ops)
        rows.append(["not on the path", u.format_time(rest), "host outside recorded ops"])
    return rows


def top_rows(path: CriticalPath, top: int) -> list[list[str]]:
    """The longest kernels, host ops and kinds of wait on the path."""
    rows = []
    for cat, name, s in path.top[:top]:
        kernel = cat in (PATH_COMPUTE, PATH_COMM)
        what = short_kernel_name(name, 44) if kernel else _cut(name, 44)
        rows.append([cat, what, u.format_time(s)])
    return rows


def host_wait_note(path: CriticalPath, rank: RankResult) -> str | None:
    """A caution when the path runs almost all through host ops while the GPU queue stays far
    behind the host: such a host op may be waiting on the device (a blocking call the trace
    records as the op's own time, not as a synchronisation), so the device's work, not the
    host's, may be what the step waits for."""
    host = path.seconds.get(PATH_HOST, 0.0)
    lag = rank.gpu_lag_s
    if path.length_s <= 0 or host < 0.9 * path.length_s or lag is None or lag <= 1e-3:
        return None
    return (
        f"rank {rank.rank}: {host / path.length_s:.0%} of the path is host time, yet the GPU "
        f"runs {u.format_time(lag)} behind the host: a host op on the path may be waiting on "
        "the device (a blocking call recorded as the op's own time), so shortening the GPU's "
        "work, not the host's, may be what shortens the step"
    )


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def what_if_rows(path: CriticalPath) -> list[list[str]]:
    return [
        [
            a.question,
            u.format_time(a.step_s),
            u.format_time(a.saving_s),
            u.format_percent(a.saving_s / path.length_s) if path.length_s > 0 else "—",
        ]
        for a in path.what_if
    ]


def render_path(out, rank: RankResult, top: int) -> None:
    """The rank's mean critical path over its steps, printed to the console `out`."""
    from ceiling.render.terminal import table

    path = rank.critical_path
    if path is None:
        return
    n = sum(1 for s in rank.steps if s.critical_path is not None)
    title = f"Rank {rank.rank}: critical path (mean over {n} step{'s' * (n != 1)})"
    out.print(table(title, ["", "time", "share"], path_rows(path, rank.step_s)))
    out.print(
        table(f"Rank {rank.rank}: longest on the path", ["", "what", "time"], top_rows(path, top))
    )
    if note := host_wait_note(path, rank):
        out.print(note)
    if path.what_if:
        cols = ["what if", "path after", "saving", "of the path"]
        out.print(
            table(f"Rank {rank.rank}: what-if on the critical path", cols, what_if_rows(path))
        )
