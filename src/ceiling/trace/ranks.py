"""Across ranks: who is slow, by how much, and what the collectives achieve.

Ranks meet at each collective: the one that arrives last waits least in it. So the time
each rank spends in the k-th collective tells, without comparing clocks of different
machines, how much later than the others each rank arrived: lag = d_max - d_rank. The
straggler is the rank with the least wait; its delay is the others' median wait less its
own (per step, the median over steps); the straggler cost is the mean wait less the least,
the time an average rank loses waiting. A collective's transfer time is the least wait over
ranks (the last arrival's). The slowest rank is the straggler where collectives tell one;
only without any is it the rank with the longest step.
"""

from __future__ import annotations

from collections import defaultdict
from statistics import median

from ceiling.model.collectives import bus_factor
from ceiling.trace.results import PATH_COMM, PATH_WAIT, CollectiveRow, CrossRank, RankResult

BUS_OPS = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "all_to_all",
    "broadcast",
    "reduce",
    "send_recv",
)


def _matched(ranks: list[RankResult]) -> list[list]:
    """The k-th in-step collective of every rank, for k up to the fewest any rank has."""
    lists = [[c for c in r.collectives if c.step >= 0] for r in ranks]
    n = min(len(x) for x in lists)
    return [[x[k] for x in lists] for k in range(n)]


def split_peer_waits(ranks: list[RankResult], matched: list[list]) -> None:
    """On each rank's critical paths, a collective's time beyond its transfer (the least any
    rank spent in it) was spent waiting for a later rank: moved from communication to idle
    waits, and counted in `peer_wait_s`."""
    for r, lists in zip(ranks, zip(*matched, strict=False) if matched else [], strict=False):
        position = {id(c): k for k, c in enumerate(lists)}
        for step in r.steps:
            path = step.critical_path
            if path is None:
                continue
            for i, on_path in path.collectives:
                k = position.get(id(r.collectives[i]))
                if k is None:
                    continue
                transfer = min(c.dur_s for c in matched[k])
                waited = min(on_path, max(r.collectives[i].dur_s - transfer, 0.0))
                path.seconds[PATH_COMM] -= waited
                path.seconds[PATH_WAIT] += waited
                path.peer_wait_s += waited


def cross_rank(ranks: list[RankResult], link_bytes_per_s: float | None) -> CrossRank | None:
    if len(ranks) < 2:
        return None
    ids = [r.rank for r in ranks]
    step_s = {r.rank: r.step_s for r in ranks}
    slowest = max(ids, key=lambda i: step_s[i])
    fastest = min(step_s.values())
    matched = _matched(ranks)
    split_peer_waits(ranks, matched)
    n_steps = max(min(len(r.steps) for r in ranks), 1)
    # per rank and step: time spent in collectives waiting for later ranks
    per_step = {i: defaultdict(float) for i in ids}
    least = {i: 0 for i in ids}
    for group in matched:
        durs = [c.dur_s for c in group]
        lo = min(durs)
        least[ids[durs.index(lo)]] += 1
        for i, d in zip(ids, durs, strict=True):
            per_step[i][group[0].step] += d - lo
    wait = {i: sum(per_step[i].values()) / n_steps for i in ids}  # mean per step
    busy = {i: step_s[i] - wait[i] for i in ids}
    mean_busy = sum(busy.values()) / len(busy)
    straggler = delay = cost = None
    if matched:
        straggler = min(ids, key=lambda i: (wait[i], -least[i]))
        # the delay: a median over steps, so that one disturbed step does not set it
        steps = sorted({g[0].step for g in matched})
        typical = {i: median(per_step[i][k] for k in steps) for i in ids}
        delay = median(typical[i] for i in ids if i != straggler) - typical[straggler]
        cost = sum(wait.values()) / len(wait) - wait[straggler]
    return CrossRank(
        step_s=step_s,
        # one answer to "which rank is slowest": the straggler where the ranks meet in
        # collectives (step times of ranks that wait for each other are alike), else by time
        slowest_rank=slowest if straggler is None else straggler,
        slowest_over_fastest=step_s[slowest] / fastest - 1.0 if fastest > 0 else 0.0,
        busy_s=busy,
        imbalance=max(busy.values()) / mean_busy - 1.0 if mean_busy > 0 else 0.0,
        straggler=straggler,
        straggler_delay_s=delay,
        straggler_cost_s=cost,
        collectives=_collective_rows(matched, len(ranks), link_bytes_per_s),
    )


def _collective_rows(matched, world: int, link: float | None) -> list[CollectiveRow]:
    groups: dict[tuple, list[float]] = defaultdict(list)
    for group in matched:
        c0 = group[0]
        groups[(c0.op, c0.bytes)].append(min(c.dur_s for c in group))
    rows = []
    for (op, nbytes), transfers in groups.items():
        t = median(transfers)
        busbw = None
        if nbytes and t > 0 and op in BUS_OPS:
            busbw = nbytes / t * bus_factor(op, world)
        rows.append(
            CollectiveRow(
                op,
                nbytes,
                len(transfers),
                t,
                busbw,
                busbw / link if busbw is not None and link else None,
            )
        )
    rows.sort(key=lambda r: -r.transfer_s * r.calls)
    return rows
