"""The free features of a training stack — communication hidden behind compute, the
bidirectional pipeline, the expert dispatcher — searched as plan axes unless pinned, each at
its own cost, and what each one bought the best plan.

A feature is free when switching it on changes nothing the user trains (the model, its
numerics, the batch): only how the step is scheduled. Each has a price the terms count:

- tp_overlap (Megatron-Core/Transformer Engine userbuffers): the tensor-parallel collectives
  hidden behind the GEMMs that use them; their kernels take SMs from those GEMMs
  (`communication.OVERLAP_COST` of what they hide). Needs t > 1 and sequence parallelism
  (userbuffers overlap the sequence-parallel all-gather and reduce-scatter).
- ep_overlap (Megatron-Core's --overlap-moe-expert-parallel-comm, DeepSeek-V3's DualPipe):
  one micro-batch's expert all-to-alls hidden behind another's compute; the dispatcher's
  kernels hold their SM share meanwhile (`communication.hidden_cost_share`), and with fewer
  than two micro-batches nothing is hidden. With p > 1 it needs an interleaved pipeline
  (Megatron-Core requires a virtual pipeline: its schedule pairs the forward of one chunk with
  the backward of another) or DualPipe.
- dispatcher=deepep (DeepEP, Megatron-Core's flex dispatcher): a token crosses the network
  once per destination node, at most the job's node limit; its kernels hold 20 SMs.
- dualpipe (DeepSeek-V3's schedule, deepseek-ai/DualPipe): a smaller bubble for two copies of
  the stage's parameters and p + 1 micro-batches in flight; needs an even p, v = 1 and an
  even m ≥ p (`rules.check_dualpipe`).

The data-parallel reduce overlapped in buckets (`Job.overlap_dp`, Megatron's
--overlap-grad-reduce, FSDP's) is on unless the user turns it off, so it is not searched.

Which a framework offers (`OFFERED`): Megatron-Core and NeMo the overlaps and DeepEP; the
torchtitan and MaxText recipes as the planner prices them, none (torchtitan's async TP needs
torch.compile, which its recipe leaves off); DeepSpeed's none of them. The default framework
(megatron, `frameworks`) offers Megatron-Core's; `offered(None)`: every feature priced here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

FEATURES = ("tp_overlap", "ep_overlap", "dispatcher", "dualpipe")  # their `--fixed` keys
_MEGATRON = ("tp_overlap", "ep_overlap", "dispatcher")
OFFERED = {
    "megatron": _MEGATRON, "nemo": _MEGATRON, "torchtitan": (), "maxtext": (), "deepspeed": (),
}  # fmt: skip
# The value each takes when on (the others' off value is the axis default).
ON = {"tp_overlap": True, "ep_overlap": True, "dispatcher": "deepep", "dualpipe": True}
SAID = {
    "tp_overlap": "tensor-parallel communication overlapped",
    "ep_overlap": "expert all-to-all overlapped",
    "dispatcher": "DeepEP dispatch",
    "dualpipe": "DualPipe",
}


def offered(framework: str | None) -> tuple[str, ...]:
    """The free features `framework`'s stack offers (None: every one the planner prices; a
    framework not listed: Megatron-Core's)."""
    return FEATURES if framework is None else OFFERED.get(framework, _MEGATRON)


def searched(job, fixed: dict) -> tuple[str, ...]:
    """The free features the search varies for `job`: those offered and not pinned."""
    have = FEATURES if job.offered is None else job.offered
    return tuple(k for k in have if k not in fixed)


def variants(keys, fixed: dict, *, t, p, v, bs, sps, routed, m_of, deepep_cheaper) -> list[dict]:
    """The values of the searched features (`keys`) to try with one layout, as sub-blocks:
    {axis key: values} to lay over the block's own lists (encoded: switches as bools, the
    dispatcher as its index).

    A feature that cannot run there stays off: tp_overlap needs t > 1 and sequence
    parallelism (the block split by sp), ep_overlap and DeepEP routed experts, ep_overlap
    with p > 1 an interleaved pipeline or DualPipe, DualPipe an even p, v = 1 and micro-batch
    counts it can run (even, ≥ p). Where it can run, a value that is never faster is not
    tried (dominated): ep_overlap hides time at a share of it and holds no memory, so off
    never wins; DeepEP sends no more bytes than NCCL (one copy per node, not per expert)
    and launches fewer kernels, so NCCL wins only where DeepEP's SMs cost more than NCCL's
    (`deepep_cheaper` false); tp_overlap likewise: beside hidden expert all-to-alls the
    compute it hides behind is room they lose, each second of it costing them 1 - 0.15 (DeepEP)
    against the 1 - OVERLAP_COST = 0.8 it saves, so on is at most 0.05 of its hidden time
    from the better choice, and taken. DualPipe trades memory for its bubble: both tried."""
    duals = [False]
    if "dualpipe" in keys and p >= 2 and p % 2 == 0 and v == 1:
        duals.append(True)
    out = []
    for dual in duals:
        extra: dict = {}
        if dual:
            good = [b for b in bs if m_of(b) % 2 == 0 and m_of(b) >= p]
            if not good:
                continue
            extra.update(dualpipe=[True], micro_batch=good)
        if routed and "ep_overlap" in keys and (p == 1 or v > 1 or dual or fixed.get("dualpipe")):
            extra["ep_overlap"] = [True]
        if routed and "dispatcher" in keys:
            extra["dispatcher"] = [1] if deepep_cheaper else [0, 1]
        if "tp_overlap" in keys and t > 1 and True in sps:
            out.append({**extra, "sp": [True], "tp_overlap": [True]})
            if False in sps:
                out.append({**extra, "sp": [False]})
        else:
            out.append(extra)
    return out


def as_published(pins: dict) -> dict:
    """Pins for a published run entered as it ran: each free feature it does not name held
    off (the default), so a validation prices the layout that ran, not one the search
    improved with features the run did not use."""
    return {k: pins[k] if k in pins else _OFF[k] for k in FEATURES}


def bought(plan, keys, evaluate: Callable) -> dict[str, dict]:
    """For each searched feature (`keys`) the plan has on: its step and memory with it
    switched off (`evaluate(plan)` -> PlanEstimate), and the seconds a step it saves."""
    with_all = evaluate(plan)
    out = {}
    for key in keys:
        field = _FIELD[key]
        if getattr(plan, field) != ON[key]:
            continue
        off = replace(plan, **{field: False if key != "dispatcher" else "alltoall"})
        if key == "dualpipe" and plan.p > 1 and plan.v == 1:
            off = replace(off, ep_overlap=False)  # 1F1B hides no all-to-all
        without = evaluate(off)
        out[key] = {
            "step_without_s": without.step_time_s,
            "saved_s": without.step_time_s - with_all.step_time_s,
            "memory_added_bytes": with_all.memory_bytes_per_device
            - without.memory_bytes_per_device,
        }
    return out


def said(features: dict[str, dict]) -> str:
    """'features on: expert all-to-all overlapped (-12.3 s a step, 28 %), ...' ('' for none)."""
    if not features:
        return ""
    parts = []
    for key, f in features.items():
        memory = f["memory_added_bytes"] / 2**30
        cost = f", for {memory:.1f} GiB more a device" if memory >= 0.05 else ""
        saved, without = f["saved_s"], f["step_without_s"]
        parts.append(
            f"{SAID[key]} (saves {saved:.3g} s of the {without:.3g} s step without it{cost})"
        )
    return "features switched on: " + "; ".join(parts)


_FIELD = {"tp_overlap": "tp_overlap", "ep_overlap": "ep_overlap", "dispatcher": "dispatcher"}
_FIELD["dualpipe"] = "dualpipe"
_OFF = {"tp_overlap": False, "ep_overlap": False, "dispatcher": "alltoall", "dualpipe": False}
