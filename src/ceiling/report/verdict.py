"""The verdict that opens the page: the findings that matter most, computed from the sections.

Each finding is one sentence with its number and what to do, and names the JSON key its
number comes from (`<section>.<key>[.<sub-key>...]` under that section's key_figures).
Findings on the user's own work rank before those on the machine or a demo; within each,
the one with the most time at stake comes first; a finding about a built-in demo says so.
Nothing is drawn from a section that measured while other work shared the machine: the
verdict opens instead with the machine having been busy and what to run again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from ceiling import units as u

FINDINGS = 3
OVER_PREDICTED = 0.1  # negative waterfall bars beyond this share of the step are said so
TRACE_ADVICE = {
    "memory-bound": "fuse elementwise ops and norms (torch.compile)",
    "communication (exposed)": "overlap communication with compute or shrink it (fewer "
    "tensor-parallel ranks, bucketed all-reduce)",
    "memcpy/memset": "keep tensors on the device; pin host memory and copy asynchronously",
    "bound unknown": "look at the ops with no FLOP formula in the trace table",
}
# Idle device time by the host's reason for it (trace/breakdown.py's idle reasons)
IDLE_ADVICE = {
    "waiting on data": "the host waited on data: more DataLoader workers, pinned memory, "
    "prefetching",
    "synchronisation": "the host synchronised with the device: remove .item(), .cpu() and "
    "prints from the step",
    "launch-bound": "the host launched too slowly: CUDA graphs or torch.compile, less Python "
    "per step",
    "other": "the host was busy elsewhere: see the host time line in the trace section",
}


@dataclass(frozen=True)
class Finding:
    text: str
    section: str
    key: str  # path under the section's key_figures
    value: float
    stake: float  # share of time or throughput at stake, for ranking
    users: bool  # about the user's own work, not a demo
    demo: bool = False  # about a built-in demo: said so in its text

    def to_json(self) -> dict[str, Any]:
        about = "your work" if self.users else "a built-in demo" if self.demo else "this machine"
        return {
            "text": self.text,
            "json_key": f"{self.section}.{self.key}",
            "value": self.value,
            "about": about,
            "demo": self.demo,
        }


DEMO_MARK = "Demo: "


def lookup(key_figures: dict, path: str) -> Any:
    """The value at a dotted path in a section's key figures (list items by index)."""
    v: Any = key_figures
    for part in path.split("."):
        v = v[int(part)] if isinstance(v, list) else v[part]
    return v


def findings(sections: list) -> list[Finding]:
    """The FINDINGS that matter most, from SectionResult objects that ran; a busy machine's
    measuring sections give none, and the machine having been busy comes first."""
    ran = [s for s in sections if s.status == "ok"]
    busy = [s for s in ran if s.busy_reasons]
    figures = {s.key: s.output.key_figures for s in ran if s not in busy}
    found = []
    for fn in RULES:
        try:
            f = fn(figures)
        except (KeyError, TypeError, ValueError, ZeroDivisionError, IndexError):
            f = None  # a section without that figure has nothing to say here
        if f is not None:
            found.append(f)
    found.sort(key=lambda f: (not f.users, -f.stake))
    found = [replace(f, text=DEMO_MARK + f.text) if f.demo else f for f in found]
    if busy:
        return [_busy(busy), *found[: FINDINGS - 1]]
    return found[:FINDINGS]


def _busy(sections: list) -> Finding:
    """The machine was busy while these sections measured: no verdict from their figures.
    Its number is the figure its first reason quotes (the load, other work's share, this
    process's CPU time), from the first section whose own run was busy."""
    from ceiling.api.machine_load import evidence

    timed = [s for s in sections if s.load and s.load["busy"]]
    first = (timed or sections)[0]
    key, value = "measured_busy", 1.0
    if timed:
        field, value = evidence(first.load)
        key = f"load.{field}"
    return Finding(
        f"The machine was busy while this report measured ({first.busy_reasons[0]}), so the "
        "sections marked busy read low and no verdict is drawn from them: run `ceiling report` "
        "again on an idle machine.",
        first.key,
        key,
        value,
        1.0,
        False,  # about this machine; it opens the verdict whatever the ranking
    )


def _trace(figs) -> Finding | None:
    t = figs["trace"]
    worst = t["largest_loss"]
    return Finding(
        f"Your trace's step ({u.format_time(t['step_s'])}) spends "
        f"{u.format_percent(worst['share'])} on {worst['name']}: {_trace_advice(worst)}.",
        "trace",
        "largest_loss.share",
        worst["share"],
        worst["share"],
        True,
    )


def _trace_advice(loss: dict) -> str:
    """What to do about the step's largest loss; for idle time, by what the trace shows the
    host doing meanwhile (never loader advice when it spent no time loading data)."""
    if loss["name"] != "idle":
        return TRACE_ADVICE.get(loss["name"], "see the trace section")
    reasons = {k: v for k, v in (loss.get("idle_reasons_s") or {}).items() if v > 0}
    if not reasons:
        return "the trace does not show what the host did meanwhile: see its host time line"
    top = max(reasons, key=lambda k: reasons[k])
    return IDLE_ADVICE.get(top, IDLE_ADVICE["other"])


# What to do about ops that run below their roofs, by the kind of op that holds most time.
BELOW_ROOF_ADVICE = {
    "matmul": "see what this machine's matmul reaches at these sizes (`ceiling bench "
    "matmul`), check the thread count, and grow the matrices (batch, hidden size)",
    "attention": "use a fused attention kernel (scaled_dot_product_attention) and longer "
    "sequences per call",
}
FUSE_ADVICE = "fuse them (torch.compile) or give each op more elements (a larger batch)"
UNEXPLAINED = "unexplained"  # the waterfall's last bar: time no roof or floor accounts for


def _below_roof(m: dict) -> str:
    """What to do about a step whose largest loss is ops below their roofs: name the kind
    of op that holds most of the step and its remedy (a busy machine gives no finding)."""
    cats = [c for c in m.get("categories", []) if c.get("time_s")]
    if not cats:
        return "look at the op table for the ops farthest below their roofs"
    top = max(cats, key=lambda c: c["time_s"])
    share = top["time_s"] / sum(c["time_s"] for c in cats)
    advice = BELOW_ROOF_ADVICE.get(top["name"], FUSE_ADVICE)
    return f"start with the {top['name']} ops ({u.format_percent(share)} of the op time): {advice}"


def _mfu(figs) -> Finding | None:
    m = figs["mfu"]
    loss = m["largest_loss"]
    over = -sum(min(b["share"], 0.0) for b in m["waterfall"])
    said = f"the roofs over-predict the step by {u.format_percent(over)}"
    if loss["share"] > 1:  # no part of a step is more than all of it: name it, no share
        what = f"its largest part is {loss['name']}, but {said}"
    elif loss["name"].startswith(UNEXPLAINED):
        what = (
            f"{u.format_percent(loss['share'])} of its step is ops running slower than their "
            "roofs predict"
        )
    else:
        what = f"its step loses {u.format_percent(loss['share'])} to {loss['name']}" + (
            f", though {said}" if over > OVER_PREDICTED else ""
        )
    todo = loss["recover"]
    if loss["name"].startswith(UNEXPLAINED):
        todo = _below_roof(m)
    return Finding(
        f"{m['model']} trains here at {u.format_percent(m['mfu'])} MFU; {what}: {todo}.",
        "mfu",
        "largest_loss.share",
        loss["share"],
        min(loss["share"], 1.0),
        not m["demo"],
        bool(m["demo"]),
    )


def _decode(figs) -> Finding | None:
    d = figs["decode"]["headline"]
    return Finding(
        f"{d['model']} should decode at about {d['expected_tokens_per_s']:,.0f} tokens/s on "
        f"{d['device']} at batch 1; {_serving(d['serving'], d['expected_tokens_per_s'])}.",
        "decode",
        "headline.expected_tokens_per_s",
        d["expected_tokens_per_s"],
        1 - d["expected_tokens_per_s"] / d["ceiling_tokens_per_s"],
        not d["demo"],
        bool(d["demo"]),
    )


def _serving(s: dict, batch1_tokens_per_s: float) -> str:
    """The batch to serve at the stated context, from the decode model's numbers: the KV
    caches that fit beside the weights or the compute-bound crossover, whichever binds."""
    at = f"at {s['context']:,} tokens of context"
    cap = s["max_batch"]
    if cap is not None and cap < 2:
        fits = "not one sequence's" if cap < 1 else "only one sequence's"
        return (
            f"{at} {fits} KV cache fits beside the weights: quantise the weights or the cache "
            "(int8), or split the model over more GPUs"
        )
    if s["batch"] is None:
        return f"{at} it stays memory-bound at any batch (its memory size is not stated)"
    if s["batch"] < 2:
        return f"{at} it is compute-bound from batch 1: a larger batch only adds latency"
    b, total = s["batch"], s["tokens_per_s"]
    speed = (
        f"about {total:,.0f} tokens/s in all ({total / batch1_tokens_per_s:,.0f}×) but "
        f"{s['tokens_per_s_per_sequence']:,.0f} tokens/s each, so batch up to {b}"
    )
    if s["bound_by"] == "compute":
        return f"{at} it turns compute-bound at batch {b}: {speed}; more only adds latency"
    return (
        f"{at} the KV caches of {b} sequences fit beside the weights, still memory-bound: "
        f"{speed} if that latency is acceptable"
    )


# The share of their worth below which added GPUs are said to pay too little.
MARGINAL_PAYS = 0.8


def _planner(figs) -> Finding | None:
    from ceiling.report.sections.planner import layout

    p = figs["planner"]
    best = p["best_plan"]
    first, prev, last = p["scaling"][0], p["scaling"][-2], p["scaling"][-1]
    # what the GPUs added last give, as a share of what as many GPUs gave at the start
    added = (last["speedup"] - prev["speedup"]) / ((last["gpus"] - prev["gpus"]) / first["gpus"])
    advice = ": grow the global batch before the cluster" if added < MARGINAL_PAYS else ""
    return Finding(
        f"The best split of {p['model']} on {p['gpus']} × {p['device']} ({layout(best)}) "
        f"reaches {u.format_percent(best['mfu'])} MFU; the step from {prev['gpus']} to "
        f"{last['gpus']} GPUs gives {u.format_percent(added)} of what the added GPUs would "
        f"alone{advice}.",
        "planner",
        "best_plan.mfu",
        best["mfu"],
        1 - added,
        not p["demo"],
        bool(p["demo"]),
    )


def _machine(figs) -> Finding | None:
    m = figs["machine"]["best_matmul"]
    share = m["share_of_reference"]
    if share > 1:
        what = "the peak assumes a lower clock than the cores run at: trust the measurement"
    elif share < 0.6:
        what = "check the thread count and the BLAS library (MKL, OpenBLAS) in use"
    else:
        what = "that is near the practical limit: gains must come from the workload"
    return Finding(
        f"Matmuls reach {u.format_percent(share)} of this {m['kind']}'s "
        f"{m['reference']} {m['dtype']} peak ({u.format_flops_per_s(m['flops_per_s'])}); "
        f"{what}.",
        "machine",
        "best_matmul.share_of_reference",
        share,
        abs(1 - share) / 2,
        False,
    )


# Below this share of the best BLAS's rate, the framework's matmul is a finding.
FRAMEWORK_GAP = 0.9


def _framework(figs) -> Finding | None:
    """torch's CPU matmul against the best BLAS on the same cores (numpy's), when clearly
    below it on a machine measured idle."""
    m = figs["machine"]
    # only a gap the interleaved rounds show beyond their spread ("framework gap")
    clear = {d: g for d, g in m["framework_gap"].items() if g.get("verdict") == "framework gap"}
    if not clear:
        return None
    dtype, gap = min(clear.items(), key=lambda kv: kv[1]["ratio"])
    if gap["ratio"] >= FRAMEWORK_GAP:
        return None
    return Finding(
        f"torch's {dtype} matmul reaches {gap['ratio']:.2f}× of {gap['library']} (numpy) on "
        f"the same cores: the framework, not the machine, leaves "
        f"{u.format_percent(1 - gap['ratio'])} unused; check torch.get_num_threads() and the "
        "BLAS torch was built with (torch.__config__.show()), or run that math through numpy.",
        "machine",
        f"framework_gap.{dtype}.ratio",
        gap["ratio"],
        1 - gap["ratio"],
        False,
    )


RULES: list[Callable[[dict], Finding | None]] = [
    _trace,
    _mfu,
    _decode,
    _planner,
    _machine,
    _framework,
]
