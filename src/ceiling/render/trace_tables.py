"""Terminal tables for `ceiling trace`: the device, each rank's step split, the top ops by
time lost against their roof, and the ranks side by side."""

from __future__ import annotations

from ceiling import units as u
from ceiling.render.kernel_names import short_kernel_name
from ceiling.trace.breakdown import LAUNCH, ORDER
from ceiling.trace.results import RankResult, TraceAnalysis


def _pct(x: float | None) -> str:
    return "—" if x is None else u.format_percent(x)


def _flops(x: float | None) -> str:
    return "unknown" if x is None else u.format_flops(x)


def device_line(r: TraceAnalysis) -> str:
    d = r.device
    if d.peak_flops_per_s is None:
        return f"device: {d.name or 'unknown'} ({d.source}); no roofline"
    return (
        f"device: {d.name}, {d.peak_key} dense peak {u.format_flops_per_s(d.peak_flops_per_s)}, "
        f"memory {u.format_bandwidth(d.bandwidth_bytes_per_s)} ({d.source})"
    )


def step_rows(rank: RankResult) -> list[list[str]]:
    """Mean seconds per step in each category, with its share of the step."""
    wall = rank.step_s or 1.0
    rows = [[cat, u.format_time(rank.mean(cat)), _pct(rank.mean(cat) / wall)] for cat in ORDER]
    n = max(len(rank.steps), 1)
    comm = sum(s.comm_s for s in rank.steps) / n
    hidden = sum(s.comm_overlapped_s for s in rank.steps) / n
    if comm:
        rows.append(["  communication, all", u.format_time(comm), _pct(comm / wall)])
        rows.append(["  of it overlapped with work", u.format_time(hidden), _pct(hidden / wall)])
    reasons: dict[str, float] = {}
    for s in rank.steps:
        for k, v in s.idle_reasons.items():
            reasons[k] = reasons.get(k, 0.0) + v / n
    for k, v in reasons.items():
        if v > 0:
            rows.append([f"  idle: {k}", u.format_time(v), _pct(v / wall)])
    return rows


def summary_rows(rank: RankResult) -> list[list[str]]:
    rows = [
        ["steps analysed", str(len(rank.steps))],
        ["step time (mean)", u.format_time(rank.step_s)],
        ["model FLOPs per step", _flops(rank.model_flops_per_step)],
        ["MFU (model FLOPs / dense peak)", _pct(rank.mfu)],
        ["HFU (incl. recomputation)", _pct(rank.hfu)],
    ]
    host: dict[str, float] = {}
    for s in rank.steps:
        for k, v in s.host_seconds.items():
            host[k] = host.get(k, 0.0) + v / max(len(rank.steps), 1)
    for k, v in host.items():
        rows.append([f"host: {k}", u.format_time(v)])
    return rows


def op_rows(rank: RankResult, top: int) -> list[list[str]]:
    rows = []
    for o in rank.ops[:top]:
        rows.append(
            [
                f"{o.name.removeprefix('aten::')} ×{o.calls}",
                o.shapes[:28],
                ("" if o.flops_exact else "~") + _flops(o.flops),
                u.format_time(o.time_s),
                "—" if o.roof_time_s is None else u.format_time(o.roof_time_s),
                "—" if o.lost_s is None else u.format_time(o.lost_s),
                o.bound or "—",
            ]
        )
    return rows


def kernel_table(rank: RankResult, top: int) -> tuple[list[str], list[list[str]]]:
    """(columns, rows): the top kernels by device time, HTA's first view; the achieved rate
    only where some kernel has one (a memcpy's bytes, a one-kernel op's FLOPs)."""
    rows = []
    for k in rank.kernels[:top]:
        if k.achieved_flops_per_s:
            achieved = u.format_flops_per_s(k.achieved_flops_per_s)
        elif k.achieved_bytes_per_s:
            achieved = u.format_bandwidth(k.achieved_bytes_per_s)
        else:
            achieved = "—"
        rows.append(
            [
                f"{short_kernel_name(k.name)} ×{k.calls}",
                k.category + (f" {k.dtype}" if k.dtype else ""),
                u.format_time(k.time_s),
                _pct(k.share),
                (k.op or "—").removeprefix("aten::")[:20],
                achieved,
            ]
        )
    columns = ["kernel × calls", "category", "time", "share", "op", "achieved"]
    if all(r[-1] == "—" for r in rows):
        columns, rows = columns[:-1], [r[:-1] for r in rows]
    return columns, rows


def gpu_lines(rank: RankResult) -> list[str]:
    """How far the GPU runs behind the host, and HTA's figures on the same windows."""
    out = []
    if rank.gpu_lag_s is not None:
        lag = u.format_time(rank.gpu_lag_s)
        n = max(len(rank.steps), 1)
        waited = sum(s.idle_reasons.get(LAUNCH, 0.0) for s in rank.steps) / n
        if rank.gpu_lag_s > 1e-3 and waited > 0.05 * (rank.step_s or 1.0):
            out.append(
                f"the GPU runs {lag} behind the CPU (median launch to kernel start), yet idles "
                f"{u.format_time(waited)} a step for work not yet launched (idle: {LAUNCH}): "
                "the host falls behind in stretches (a blocking op, Python between ops), not "
                "on every launch"
            )
        elif rank.gpu_lag_s > 1e-3:
            out.append(
                f"the GPU runs {lag} behind the CPU (median launch to kernel start): the host "
                "keeps the queue full, so the run is not launch-bound"
            )
        else:
            out.append(f"median launch to kernel start: {lag} (the GPU waits on the host)")
    h = rank.hta
    if h:
        out.append(
            f"as Holistic Trace Analysis defines them, on its window (the "
            f"{u.format_time(h['kernel_time_s'])} of GPU work launched before the last step): "
            f"idle {_pct(h['idle_time'])}, compute {_pct(h['compute_time'])}, non-compute "
            f"{_pct(h['non_compute_time'])}, communication under computation "
            f"{_pct(h['comp_comm_overlap'])}; the step split above uses whole GPU steps"
        )
    return out


def cross_rows(r: TraceAnalysis) -> list[list[str]]:
    c = r.cross
    if c is None:
        return []
    rows = [
        [f"rank {k}", u.format_time(v), u.format_time(c.busy_s[k])] for k, v in c.step_s.items()
    ]
    return rows


def shown_ranks(r: TraceAnalysis) -> list[RankResult]:
    """Rank tables for the first rank, the slowest and the straggler; --json has them all."""
    keep = {r.ranks[0].rank}
    if r.cross is not None:
        keep.add(r.cross.slowest_rank)
        if r.cross.straggler is not None:
            keep.add(r.cross.straggler)
    return [x for x in r.ranks if x.rank in keep]


def render(r: TraceAnalysis, top: int = 10) -> None:
    from ceiling.render.critical_path_tables import render_path
    from ceiling.render.terminal import console, table

    out = console()
    out.print(device_line(r))
    for note in r.notes:
        out.print(f"note: {note}")
    for rank in shown_ranks(r):
        where = "GPU" if rank.on_gpu else "host (no device events)"
        out.print(table(f"Rank {rank.rank}: {rank.path}", ["", "value"], summary_rows(rank)))
        out.print(
            table(
                f"Rank {rank.rank}: mean step on the {where}",
                ["", "time", "share"],
                step_rows(rank),
            )
        )
        for line in [*rank.notes, *gpu_lines(rank)]:
            out.print(f"rank {rank.rank}: {line}")
        render_path(out, rank, top)
        if rank.kernels:
            title = f"Rank {rank.rank}: top kernels by device time"
            out.print(table(title, *kernel_table(rank, top)))
        cols = ["op × calls", "shapes", "FLOPs", "time", "roof time", "lost", "bound"]
        out.print(
            table(
                f"Rank {rank.rank}: top ops by time lost against their roof",
                cols,
                op_rows(rank, top),
            )
        )
    c = r.cross
    if c is not None:
        if len(r.ranks) > len(shown_ranks(r)):
            out.print("(tables for the other ranks: --json)")
        out.print(table("Ranks", ["rank", "step time", "busy (less waiting)"], cross_rows(r)))
        slowest = "" if c.straggler is not None else f"slowest rank: {c.slowest_rank}; "
        out.print(
            f"{slowest}step times: the longest +{u.format_percent(c.slowest_over_fastest)} over "
            f"the shortest; load imbalance (max/mean busy - 1): {u.format_percent(c.imbalance)}"
        )
        if c.straggler is not None:
            out.print(
                f"straggler: rank {c.straggler}, reaches the collectives "
                f"{u.format_time(c.straggler_delay_s)} per step after the others; "
                f"straggler cost {u.format_time(c.straggler_cost_s)} per step per rank"
            )
        rows = [
            [
                x.op,
                "—" if x.bytes is None else u.format_bytes(x.bytes),
                str(x.calls),
                u.format_time(x.transfer_s),
                "—" if x.busbw_bytes_per_s is None else u.format_bandwidth(x.busbw_bytes_per_s),
                _pct(x.of_link),
            ]
            for x in c.collectives
        ]
        if rows:
            cols = ["collective", "size", "calls", "transfer", "busbw", "of link"]
            out.print(table("Collectives (transfer: the least wait over ranks)", cols, rows))
    out.print(
        "FLOPs: multiply-add = 2, from the recorded shapes; ~ estimated; bytes: inputs and "
        "outputs once (GB = 1e9 B); lost: time above the op's roofline time"
    )
