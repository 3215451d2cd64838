"""The collectives of one rank: NCCL kernels on a GPU trace, gloo calls on a host trace,
each with its message size (the nccl-tests convention) and the step it belongs to."""

from __future__ import annotations

from math import prod

from ceiling.trace.events import KERNEL, collective_op, is_comm_kernel, is_host_collective
from ceiling.trace.op_cost import element_size
from ceiling.trace.results import Collective
from ceiling.vocabulary import element_bytes


def message_bytes(op: str, args: dict) -> float | None:
    """The nccl-tests size: the gathered output for all-gather, else the input buffer."""
    n_in, n_out = args.get("In msg nelems"), args.get("Out msg nelems")
    n = n_out if op == "all_gather" and n_out else n_in
    size = element_bytes(args.get("dtype", ""))
    if isinstance(n, (int, float)) and n > 0 and size:
        return float(n) * size
    dims, types = args.get("Input Dims"), args.get("Input type")
    if isinstance(dims, list) and isinstance(types, list):
        total = 0
        for d, t in zip(dims, types, strict=False):
            es = element_size(t)
            if es and isinstance(d, list) and all(isinstance(x, int) for x in d):
                total += prod(d) * es
        return float(total) if total else None
    return None


def collectives(trace, idx, records, steps_ix) -> tuple[list[Collective], dict[int, int]]:
    """The rank's collectives in time order, and for a GPU trace the index of each
    communication kernel's (by `id` of its event). `idx` links kernels to launches and
    counted ops; `steps_ix` places them in steps."""
    if not trace.on_gpu:
        found = [
            (
                e,
                Collective(
                    op := collective_op(e.name) or "other",
                    e.start_s,
                    e.dur_s,
                    message_bytes(op, e.args),
                    steps_ix.of(e.start_s),
                ),
            )
            for e in trace.annotations
            if is_host_collective(e)
        ]
        return sorted((c for _, c in found), key=lambda c: c.start_s), {}
    # the sizes PyTorch records on the launching op (`record_param_comms`), by External id
    sized = {e.args.get("External id"): e.args for e in trace.cpu_ops if "In msg nelems" in e.args}
    found = []
    for e in trace.device_events:
        if e.cat != KERNEL or not is_comm_kernel(e.name):
            continue
        op = collective_op(str(e.args.get("Collective name", ""))) or collective_op(e.name)
        args = e.args
        if "In msg nelems" not in args:
            args = sized.get(args.get("External id"))
            if args is None:
                i = idx.record(e)
                args = records[i].event.args if i is not None else e.args
        step = steps_ix.of(idx.launched_at(e))
        c = Collective(op or "other", e.start_s, e.dur_s, message_bytes(op or "", args), step)
        found.append((e, c))
    found.sort(key=lambda x: x[1].start_s)
    return [c for _, c in found], {id(e): k for k, (e, _) in enumerate(found)}
