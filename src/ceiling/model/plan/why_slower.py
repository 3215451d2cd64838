"""Why a plan is slower than the best: the part of its step that grew the most, in one
phrase (each plan row's `why_slower`)."""

from __future__ import annotations

from ceiling.model.plan.step import PlanEstimate

_OTHER_REASONS = {
    "cp_comm_s": lambda pl, share: (
        f"context-parallel K/V ring {share:.0%} of step (cp={pl.cp}"
        + (", not overlapped)" if not pl.cp_overlap else ")")
    ),
    "attention_s": lambda pl, share: f"attention kernels {share:.0%} of step",
    "fp8_matmul_s": lambda pl, share: f"FP8 GEMMs {share:.0%} of step",
    "fp8_cast_s": lambda pl, share: f"FP8 casts {share:.0%} of step",
    "eager_kernels_s": lambda pl, share: f"unfused eager kernels {share:.0%} of step",
    "host_s": lambda pl, share: f"host-bound layers {share:.0%} of step",
}


def _recompute_rank(policy: str) -> float:
    """How much a recompute policy re-runs, for ordering: none, a list of ops (about
    selective), selective, some layers in full (layers:N), full."""
    ranks = {"none": 0.0, "selective": 1.0, "full": 2.0}
    if policy in ranks:
        return ranks[policy]
    return 1.5 if policy.startswith("layers:") else 1.0


def explain_loss(x: PlanEstimate, best: PlanEstimate) -> str:
    """One phrase: the part of the step that grew the most compared with the best plan."""
    slower = x.step_time_s / best.step_time_s - 1.0
    deltas = {k: x.time[k] - best.time.get(k, 0.0) for k in x.time}
    key = max(deltas, key=deltas.get)
    share = x.time[key] / x.step_time_s
    pl = x.plan
    if key == "tp_comm_s":
        where = "TP across nodes" if pl.t > _node(x) else f"TP t={pl.t}"
        reason = f"{where}: {share:.0%} of step in tensor-parallel communication"
    elif key == "bubble_s":
        reason = (
            f"pipeline bubble {share:.0%} of step (p={pl.p}, m={x.micro_batches}"
            + (f", v={pl.v}" if pl.v > 1 else "")
            + ")"
        )
    elif key == "matmul_s":
        if _recompute_rank(pl.recompute) > _recompute_rank(best.plan.recompute):
            reason = f"recompute={pl.recompute} repeats work: matmuls {share:.0%} of step"
        elif pl.p > 1:
            uneven = any(n.startswith("uneven stages") for n in x.notes)
            reason = (
                (
                    "uneven stages: the fullest sets the pace and"
                    if uneven
                    else "pipeline imbalance:"
                )
                + f" the last of p={pl.p} stages also computes the output layer "
                f"(matmuls {share:.0%} of step)"
            )
        else:
            reason = f"more matmul time per device: {share:.0%} of step"
    elif key == "elementwise_s":
        why = "" if pl.sequence_parallel or pl.t == 1 else " (no sequence parallelism)"
        reason = f"memory-bound kernels {share:.0%} of step{why}"
    elif key == "dp_exposed_s":
        reason = f"data-parallel traffic not hidden: {share:.0%} of step" + (
            " (ZeRO-3 gathers)" if pl.zero == 3 else ""
        )
    elif key == "ep_comm_s":
        reason = f"expert all-to-all {share:.0%} of step (ep={pl.ep})"
    elif key == "p2p_s":
        reason = f"pipeline sends {share:.0%} of step"
    elif key in _OTHER_REASONS:
        reason = _OTHER_REASONS[key](pl, share)
    else:
        reason = f"optimizer update {share:.0%} of step"
    return f"{slower:+.0%} step time; {reason}"


def _node(x: PlanEstimate) -> int:
    # The node size is not on the result; a tensor group that spans nodes is flagged by its
    # own note (other groups, such as a context-parallel ring, have theirs).
    spans = any(n.startswith("tensor parallelism") and "spans nodes" in n for n in x.notes)
    return 0 if spans else 10**9
