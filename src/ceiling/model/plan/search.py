"""Search every valid split of a training job over a cluster and rank the plans that fit.

The candidates are enumerated already valid — t divides the heads, the KV heads (or is a
multiple of them) and the FFN width; p·v ≤ layers (uneven stages allowed, interleaved too:
the fullest sets the pace); d·b divides the global batch;
the interleaved schedule gets m divisible by p; ZeRO-2/3 only without pipelining — so no
time is spent on plans that cannot run. All of them are then evaluated by
`step.evaluate_arrays` (the same code that evaluates a single plan), laid out as grids
(`grid`) so that each term is computed over the axes it reads only, and ranked by step time
among those that fit in memory.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace

import numpy as np

from ceiling.errors import DoesNotFit, InvalidInput, UnsupportedOnDevice, argument
from ceiling.model.plan import features, grid, recompute
from ceiling.model.plan import step as parallel
from ceiling.model.plan.axes import AXES, BY_KEY, parse_fixed, plan_at  # noqa: F401  (re-exported)
from ceiling.model.plan.communication import hidden_cost_share
from ceiling.model.plan.costs import ATTENTION_BLOCK
from ceiling.model.plan.pipeline import balanced_layout, whole_chunk_layout
from ceiling.model.plan.refusals import suggesting
from ceiling.model.plan.rules import check_context_parallel, check_fp8_params, check_stage_layout
from ceiling.model.plan.step import Job, Plan, PlanEstimate
from ceiling.model.plan.why_slower import explain_loss
from ceiling.model.scaling import karp_flatt

MAX_MICRO_BATCH = 64


def _divisors(n: int) -> list[int]:
    small = [k for k in range(1, math.isqrt(n) + 1) if n % k == 0]
    return sorted(set(small + [n // k for k in small]))


def enumerate_plans(job: Job, cluster, fixed: dict | None = None) -> dict[str, np.ndarray]:
    """Every valid plan for the cluster as arrays keyed by axis (`axes.AXES`): the searched
    axes' values that pass the rules (`rules`), the others at their pinned value or default;
    the plans of `plan_blocks` one after another."""
    blocks = plan_blocks(job, cluster, fixed)
    if not blocks:
        return {}
    rows = np.concatenate([_product(*block) for block in blocks]).astype(np.int64)
    return {
        a.key: rows[:, k].astype(bool) if a.is_switch else rows[:, k] for k, a in enumerate(AXES)
    }


def plan_blocks(job: Job, cluster, fixed: dict | None = None) -> list[list[list]]:
    """Every valid plan, as blocks: one layout (d, t, p, cp, v, stage layers, etp) and, for
    each axis in `AXES` order, the values tried with it (encoded); a block's plans are the
    product of its lists, the last axis varying fastest."""
    fixed = pinned(job, fixed)
    sh = parallel.shape_of(job.model)
    n = cluster.devices
    B = job.global_batch
    keys = features.searched(job, fixed)
    cheaper = bool(hidden_cost_share(cluster, True) <= hidden_cost_share(cluster, False))

    def allowed(key, values):
        return [x for x in values if key not in fixed or fixed[key] == x]

    ts = [
        t
        for t in _divisors(n)
        if sh.heads % t == 0
        and (sh.kv_heads % t == 0 or t % sh.kv_heads == 0)
        and sh.ffn_hidden % t == 0
    ]
    # Axes the search does not vary hold their pinned value or their default.
    held = {a.key: [a.encode(fixed.get(a.key, a.default))] for a in AXES}
    blocks = []
    layouts = [
        (t, p, cp)
        for t in allowed("t", ts)
        for p in allowed("p", [p for p in _divisors(n // t) if p <= sh.layers])
        for cp in allowed("cp", context_parallel_degrees(n // (t * p), job.seq_len))
    ]
    for t, p, cp in layouts:
        d = n // (t * p * cp)
        if ("d" in fixed and fixed["d"] != d) or B % d:
            continue
        vs = _chunk_counts(sh.layers, p, fixed)
        bs = [b for b in _divisors(B // d) if b <= MAX_MICRO_BATCH]
        zeros = allowed("zero", [0, 1, 3] if p > 1 else [0, 1, 2, 3])
        if fixed.get("shard"):  # HSDP: ZeRO inside shard groups that divide d·cp
            zeros = [z for z in zeros if z] if (d * cp) % fixed["shard"] == 0 else []
        experts = _expert_layouts(sh, t * cp * d, t, fixed)
        # Megatron-Core needs sequence parallelism for MoE layers with t > 1 (its MoE
        # README: "when using MoE with expert parallelism and tensor parallelism, sequence
        # parallelism must be used").
        moe_sp = sh.moe.routed and t > 1
        sps = allowed("sp", [True] if moe_sp else [True, False] if t > 1 else [False])
        rcs = _recompute_codes(sh.layers, p, fixed, job.attention)
        for v in allowed("v", vs):
            good_b = [b for b in allowed("micro_batch", bs) if v == 1 or (B // (d * b)) % p == 0]
            if fixed.get("dualpipe"):  # `rules.check_dualpipe`
                ok = p % 2 == 0 and v == 1
                good_b = [b for b in good_b if ok and (B // (d * b)) % 2 == 0 and B // (d * b) >= p]
            if not good_b or not zeros or not sps or not rcs or not experts:
                continue
            for (first, last), (etp, eps) in itertools.product(
                _stage_layouts(sh.layers, p, v, fixed), experts
            ):
                tried = {"d": [d], "t": [t], "p": [p], "cp": [cp], "v": [v], "micro_batch": good_b,
                         "zero": zeros, "recompute": rcs, "sp": sps, "ep": eps, "etp": [etp],
                         "first": [first], "last": [last]}  # fmt: skip
                routed = sh.moe.routed and eps != [1]
                for extra in features.variants(
                    keys, fixed, t=t, p=p, v=v, bs=good_b, sps=sps, routed=routed,
                    m_of=lambda b, d=d: B // (d * b), deepep_cheaper=cheaper,
                ):  # fmt: skip
                    block = {**tried, **extra}
                    blocks.append([block.get(a.key, held[a.key]) for a in AXES])
    return blocks


def pinned(job: Job, fixed: dict | None) -> dict:
    """The pins, with the job's own dispatcher (`Job.moe_dispatcher`, unless auto)."""
    fixed = dict(fixed or {})
    if job.moe_dispatcher != "auto":
        fixed.setdefault("dispatcher", job.moe_dispatcher)
    return fixed


def _expert_layouts(sh, ranks: int, t: int, fixed: dict) -> list[tuple[int, list[int]]]:
    """(etp, the ep values to try with it) for a stage of `ranks` = t·cp·d devices: etp 1
    (MoE parallel folding) or t (the attention's tensor parallelism, Megatron-Core's default
    expert_tensor_parallel_size: the axis's 0), ep any divisor of the experts with ep·etp
    dividing the ranks (`rules.check_experts`); [(0, [1])] for a dense model, [] when the
    pins allow none. Returns the axis values (0 for etp = t)."""
    moe = sh.moe
    if not moe.routed:
        ok = fixed.get("ep", 1) == 1 and fixed.get("etp", 0) == 0
        return [(0, [1])] if ok else []
    out = []
    for code in sorted({0, 1 if t > 1 else 0, fixed.get("etp", 0)}):
        etp = code or t
        if fixed.get("etp", code) != code or moe.moe_ffn % etp or ranks % etp:
            continue
        eps = [e for e in _divisors(ranks // etp) if moe.experts % e == 0]
        eps = [e for e in eps if fixed.get("ep", e) == e]
        if eps:
            out.append((code, eps))
    return out


def _product(*columns) -> np.ndarray:
    """The Cartesian product of value lists, one row per combination, the last column
    varying fastest (itertools.product's order), built by numpy."""
    lists = [np.asarray(c, dtype=np.int64) for c in columns]
    index = np.indices([len(c) for c in lists]).reshape(len(lists), -1)
    return np.stack([c[i] for c, i in zip(lists, index, strict=True)], axis=1)


MAX_CONTEXT_PARALLEL = 32


def context_parallel_degrees(ranks: int, seq_len: int) -> list[int]:
    """Context-parallel degrees for `ranks` devices left after t and p: divisors of it that
    split the sequence into 2·cp equal chunks (Megatron's causal load balancing), each at
    least one attention block long (shorter chunks leave the ring steps nothing to hide
    behind and the attention kernel's blocks mostly empty)."""
    most = min(MAX_CONTEXT_PARALLEL, seq_len // (2 * ATTENTION_BLOCK))
    return [c for c in _divisors(ranks) if c <= most and seq_len % (2 * c) == 0] or [1]


def _chunk_counts(layers: int, p: int, fixed: dict) -> list[int]:
    """Chunks per device (v) worth trying on p stages: 1, those that cut the layers into
    p·v equal chunks, and those that cut the middle stages of the balanced (or pinned)
    uneven layout into equal chunks, its ends then a layer lighter in one chunk (any count
    that leaves every chunk a layer, when v is pinned)."""
    if p == 1:
        return [1]
    even = {v for v in range(2, layers // p + 1) if layers % (p * v) == 0}
    pinned = "first" in fixed or "last" in fixed
    first, last = (
        (fixed.get("first", 0), fixed.get("last", 0)) if pinned else balanced_layout(layers, p)
    )
    if not first or not last:
        return [1, *sorted(even)]
    mid = math.ceil((layers - first - last) / (p - 2)) if p > 2 else max(first, last)
    ends = int(fixed.get("ends", False))  # the embedding and the loss fill a chunk each
    room = range(2, min(first + ends, last + ends, mid) + 1)
    lighter = set(room) if "v" in fixed else {v for v in room if mid % v == 0}
    return [1, *sorted(even | lighter)]


def _stage_layouts(layers: int, p: int, v: int, fixed: dict) -> list[tuple[int, int]]:
    """(first, last) stage layouts to try with v chunks per device: the even split (equal
    chunks only when v > 1) and the balanced rule (`pipeline.balanced_layout`; with
    v > 1 its middle stages in equal chunks, the ends a layer lighter in one chunk:
    `pipeline.chunk_layers`), or the pinned layout or rule."""
    if "first" in fixed or "last" in fixed:
        pinned = fixed.get("first", 0), fixed.get("last", 0)
        try:
            check_stage_layout(layers, *pinned, p, v, fixed.get("ends", False))
        except InvalidInput:
            return []
        return [pinned] if p > 1 else []
    balanced = balanced_layout(layers, p)
    first, last = balanced
    rest = layers - first - last
    even_middle = p == 2 or rest % (p - 2) == 0
    middle_ok = even_middle and (p == 2 or "v" in fixed or (rest // (p - 2)) % v == 0)
    ends = fixed.get("ends", False)
    usable = balanced != (0, 0) and min(first, last) + ends >= v and middle_ok
    even = [(0, 0)] if (v == 1 or layers % (p * v) == 0) and not ends else []
    if fixed.get("stages") == "balanced":
        return [balanced] if usable else even if balanced == (0, 0) else []
    if not even and not usable and not ends:
        return whole_chunk_layout(layers, p, v)
    return even + ([balanced] if usable else [])


# Layers-per-stage shares the search tries for recompute=layers:N.
RECOMPUTE_LAYER_SHARES = (0.25, 0.5, 0.75)
# Per-op policies the search tries (`recompute`): MaxText's save_qkv_proj, torchtitan's.
RECOMPUTE_OPS = ("ops:q+k+v", "ops:alternate")


def _recompute_codes(layers: int, p: int, fixed: dict, attention: str) -> list[int]:
    """Recompute policies to try for p stages, as codes: none, selective, full, N layers of
    each stage for a few N, two per-op policies; or the pinned one. With FlashAttention there
    are no scores to drop: selective keeps what none keeps and only adds work, so it is left
    out unless pinned."""
    if "recompute" in fixed:
        return [recompute.encode(fixed["recompute"])]
    per_stage = math.ceil(layers / p)
    ns = sorted({max(1, round(share * per_stage)) for share in RECOMPUTE_LAYER_SHARES})
    modes = [m for m in recompute.MODES if not (m == "selective" and attention == "flash")]
    values = [*modes, *(f"layers:{n}" for n in ns if n < per_stage), *RECOMPUTE_OPS]
    return [recompute.encode(x) for x in values]


@dataclass(frozen=True)
class SearchResult:
    plans: tuple[PlanEstimate, ...]  # ranked, fastest first, one per (d, t, p, cp) layout
    why: tuple[str, ...]  # for each plan, why it loses to the first ("" for the best)
    evaluated: int  # valid plans evaluated
    fitting: int  # of those, how many fit in memory


def _check_attention_kernel(job: Job, device) -> None:
    """FlashAttention-3 is written for Hopper's tensor cores (sm_90) and runs on nothing else:
    a device known to be another is refused, not priced as if it ran there."""
    cc = getattr(device, "compute_capability", None)
    if job.attention_kernel == "fa3" and cc is not None and cc != "9.0":
        raise UnsupportedOnDevice(
            f"{argument('attention_kernel')} fa3: FlashAttention-3 runs on Hopper GPUs "
            f"(compute capability 9.0) only, and {device.name} is {cc}; use fa2, cudnn or auto"
        )


def _fit_advice(job: Job, cluster, plan: Plan, usable: float) -> str:
    """What would make a plan fit: more devices at least as many as the model's state needs
    sharded over all of them, where these are fewer; else the usual levers."""
    per_param = plan.state_bytes_per_param
    state = per_param * job.model.params_total
    floor = math.ceil(state / usable) if usable > 0 else 0
    if floor <= cluster.devices:
        return "use more devices, a smaller micro-batch or global batch, or a bigger device"
    return (
        f"the weights, gradients and optimizer state alone ({job.model.params_total / 1e9:,.1f}B "
        f"parameters × {per_param} bytes = {state / 2**30:,.0f} GiB) need at least {floor} "
        f"such devices sharded over all of them (ZeRO-3), before any activation: use more "
        "devices or a device with more memory"
    )


def _headroom_hint(need: float, memory: float, headroom: float) -> str:
    """The smaller headroom (whole percent) with which the smallest plan would fit, where one
    would: the planning margin is a choice, and a run that is known to fit may go without."""
    if memory <= 0:  # a device whose memory is not known (a profile that did not read it)
        return ""
    free = int((1.0 - need / memory) * 100) / 100  # whole percent, rounded down
    if headroom <= 0 or free < 0:
        return ""
    return f"; it fits with {argument('headroom')} {free:g} ({free:.0%} of the device kept free)"


def search(job: Job, cluster, fixed: dict | None = None, top: int = 5) -> SearchResult:
    """Rank the plans that fit, fastest first; DoesNotFit explains when none does.

    Every valid plan is evaluated (`grid`: the blocks of `plan_blocks` as grids, each term
    over the axes it reads); the ranking is that of evaluating them one after another in
    `enumerate_plans`'s order: by step time, the first of equals first, one plan per
    (d, t, p, cp) layout."""
    if top < 1:
        raise InvalidInput(f"{argument('top')} must be ≥ 1, got {top}")
    _check_attention_kernel(job, cluster.device)
    fixed = pinned(job, fixed)
    with suggesting(job, cluster.devices, fixed, lambda pins: valid_pins(job, cluster, pins)):
        _check_fixed_alone(job, cluster, fixed)
        blocks = plan_blocks(job, cluster, fixed)
        if not blocks:
            raise InvalidInput(_no_valid_plan_message(job, cluster, fixed))
    s = grid.summarise(job, cluster, blocks)
    n = int(s.plans.sum())
    if not s.fitting.any():
        k = int(np.argmin(s.least_memory))  # the first block of the smallest: its first cell
        plan, r = _evaluated(job, cluster, [grid.cell_values(blocks[k], s.least_memory_cell[k])])
        need, usable = float(r["memory_bytes"][0]), float(r["usable_bytes"][0])
        raise DoesNotFit(
            f"no plan fits: the smallest of {n} valid plans ({plan[0].describe()}) needs "
            f"{need / 2**30:.1f} GiB per device but {usable / 2**30:.1f} GiB are usable "
            f"({cluster.memory_bytes / 2**30:.0f} GiB less {job.headroom:.0%} headroom); "
            + _fit_advice(job, cluster, plan[0], usable)
            + _headroom_hint(need, cluster.memory_bytes, job.headroom)
        )
    # Blocks by their fastest fitting plan, the earlier block first among equals: the order
    # of the plans themselves, as each block's best is its first of equals.
    order = np.flatnonzero(np.isfinite(s.best_step_s))
    order = order[np.argsort(s.best_step_s[order], kind="stable")]
    chosen, seen = [], set()
    at = {a.key: k for k, a in enumerate(AXES)}
    for k in order:
        layout = tuple(blocks[k][at[key]][0] for key in ("d", "t", "p", "cp"))
        if layout in seen:
            continue
        seen.add(layout)
        chosen.append(grid.cell_values(blocks[k], s.best_cell[k]))
        if len(chosen) == top:
            break
    plans, r = _evaluated(job, cluster, chosen)
    results = []
    for i, plan in enumerate(plans):
        notes = parallel.check_plan(job, cluster, plan)
        results.append(parallel.result_from_arrays(job, plan, r, i, notes))
    results[0] = _with_features(job, cluster, results[0], features.searched(job, fixed))
    why = tuple("" if k == 0 else explain_loss(x, results[0]) for k, x in enumerate(results))
    return SearchResult(tuple(results), why, evaluated=n, fitting=int(s.fitting.sum()))


def valid_pins(job: Job, cluster, fixed: dict) -> bool:
    """Whether pins give valid plans: the refusal rules pass and a plan is left to search."""
    try:
        _check_fixed_alone(job, cluster, fixed)
        return bool(plan_blocks(job, cluster, fixed))
    except InvalidInput:
        return False


def _with_features(job: Job, cluster, best: PlanEstimate, keys) -> PlanEstimate:
    """The best plan with the free features it switched on and what each bought
    (`features.bought`), said in a note."""
    bought = features.bought(
        best.plan, keys, lambda plan: parallel.evaluate_plan(job, cluster, plan)
    )
    if not bought:
        return best
    note = features.said(bought)
    return replace(best, features=bought, notes=(*best.notes, note))


def _evaluated(job: Job, cluster, rows: list[list]) -> tuple[list[Plan], dict]:
    """Plans given by their encoded values (`AXES` order) and their evaluation."""
    cand = {
        a.key: np.array([row[k] for row in rows], dtype=bool if a.is_switch else np.int64)
        for k, a in enumerate(AXES)
    }
    return [plan_at(cand, i) for i in range(len(rows))], parallel.evaluate_arrays(
        job, cluster, cand
    )


def _check_fixed_alone(job: Job, cluster, fixed: dict) -> None:
    """Pinned values that can never work get the arithmetic, not just 'no plan'."""
    sh = parallel.shape_of(job.model)
    n = cluster.devices
    t, p, d = fixed.get("t"), fixed.get("p"), fixed.get("d")
    if t is not None and sh.heads % t:
        raise InvalidInput(
            f"tensor parallelism must divide the attention heads: heads({sh.heads}) % t({t}) = "
            f"{sh.heads % t}"
        )
    if p is not None and p > sh.layers:
        raise InvalidInput(f"every pipeline stage needs a layer: p({p}) > layers({sh.layers})")
    check_context_parallel(job.seq_len, fixed.get("cp", 1))
    check_fp8_params(
        fixed.get("fp8", "off"), fixed.get("fp8_params", False), fixed.get("fp8_acts", False)
    )
    _check_fixed_stages(sh.layers, fixed)
    if t is not None and p is not None and d is not None:
        given = {BY_KEY[k].field: x for k, x in fixed.items() if k in BY_KEY}
        if "micro_batch" not in fixed:  # v needs m divisible by p, which a b may give
            given.pop("v", None)
        if given.get("ends_in_split") and "first" not in fixed and "last" not in fixed:
            # the embedding and the loss counted: the layout searched is the balanced one
            first, last = balanced_layout(sh.layers, p)
            given.update(first_stage_layers=first, last_stage_layers=last)
        parallel.check_plan(job, cluster, Plan(**given))
    pinned = [x for x in (d, t, p, fixed.get("cp")) if x is not None]
    prod = int(np.prod(pinned)) if pinned else 1
    if n % prod:
        raise InvalidInput(
            f"the pinned degrees multiply to {prod}, which does not divide the {n} devices"
        )


def _check_fixed_stages(layers: int, fixed: dict) -> None:
    """A pinned stage list must add up to the model's layers; pinned first/last must leave
    the middle stages their layers (`rules.check_stage_layout`)."""
    for key in ("first", "last"):
        if fixed.get(key, 0) > layers:
            raise InvalidInput(
                f"{argument('fixed')} {key}={fixed[key]} is more than the model's {layers} layers"
            )
    total = fixed.get("stage_total")
    if total is not None and total != layers:
        raise InvalidInput(
            f"{argument('fixed')} stages add up to {total} layers but the model has {layers}"
        )
    if ("first" in fixed or "last" in fixed) and "p" in fixed:
        first, last = fixed.get("first", 0), fixed.get("last", 0)
        check_stage_layout(
            layers, first, last, fixed["p"], fixed.get("v", 1), fixed.get("ends", False)
        )


def _no_valid_plan_message(job: Job, cluster, fixed: dict) -> str:
    sh = parallel.shape_of(job.model)
    n, B = cluster.devices, job.global_batch
    pins = ", ".join(f"{k}={v}" for k, v in fixed.items()) or "none"
    head = f"no valid plan for {n} devices (pinned: {pins})"
    ts = [
        t
        for t in _divisors(n)
        if sh.heads % t == 0
        and (sh.kv_heads % t == 0 or t % sh.kv_heads == 0)
        and sh.ffn_hidden % t == 0
        and fixed.get("t", t) == t
    ]
    if not ts:
        return (
            f"{head}: no tensor-parallel degree t divides both the {n} devices and "
            f"heads({sh.heads}), kv_heads({sh.kv_heads}) and ffn_hidden({sh.ffn_hidden})"
        )
    ds = sorted(
        {
            n // (t * p)
            for t in ts
            for p in _divisors(n // t)
            if p <= sh.layers
            and fixed.get("p", p) == p
            and fixed.get("d", n // (t * p)) == n // (t * p)
        }
    )
    if ds and not any(B % d == 0 for d in ds):
        shown = ", ".join(map(str, ds[:8])) + (", ..." if len(ds) > 8 else "")
        return (
            f"{head}: the data-parallel degree d = devices/(t·p) would be one of {shown}, and "
            f"none divides the global batch of {B} sequences; choose a device count or global "
            f"batch with a common factor"
        )
    v = fixed.get("v", 1)
    if v > 1 and "p" in fixed and sh.layers % (fixed["p"] * v):
        p = fixed["p"]
        return (
            f"{head}: the interleaved schedule needs equal chunks, layers({sh.layers}) % "
            f"(p({p}) × v({v}) = {p * v}) = {sh.layers % (p * v)}, or an uneven layout that "
            f"leaves every chunk a layer (stages=F,M,…,M,L with F, M, L ≥ v"
            + ("" if fixed.get("stages") == "balanced" else ", or stages=balanced where it does")
            + ")"
        )
    pinned = _pinned_option_rule(job, fixed, n)
    if pinned:
        return f"{head}: {pinned}"
    return (
        f"{head}: d·t·p must equal the device count, t divide heads({sh.heads}) and "
        f"ffn_hidden({sh.ffn_hidden}), p·v ≤ layers({sh.layers}) (a layer in every chunk), "
        f"d·micro_batch divide global_batch({B}), m divisible by p when v > 1"
    )


def _pinned_option_rule(job: Job, fixed: dict, devices: int) -> str:
    """The rule of a pinned option that no layout can keep, where one can be named from the
    pins alone."""
    experts, p = job.model.experts, fixed.get("p")
    ep, etp = fixed.get("ep", 1), fixed.get("etp", 0)
    if ep > 1 and experts <= 1:
        return f"ep={ep} spreads routed experts, and {job.model.name} is dense (no experts)"
    if ep > 1 and experts % ep:
        return f"ep must divide the routed experts ({experts}), got ep={ep}"
    if fixed.get("dualpipe") and p is not None and (p < 2 or p % 2 or fixed.get("v", 1) > 1):
        return (
            f"dualpipe feeds the pipeline from both ends: it needs an even p ≥ 2 and v = 1, "
            f"got p={p}, v={fixed.get('v', 1)}"
        )
    if fixed.get("ends") and p is not None and p < 2:
        return "ends=on counts the embedding and the loss as pipeline chunks: it needs p ≥ 2"
    stages = [p] if p is not None else _divisors(devices)
    if (ep > 1 or etp > 1) and all((devices // q) % (ep * max(etp, 1)) for q in stages):
        return (
            f"the expert layers lay ep·etp ({ep}·{etp or 't'}) over the t·cp·d ranks of a "
            f"stage, and ep·etp divides no stage's ranks (devices/p) here"
        )
    if fixed.get("shard") and devices % fixed["shard"]:
        return f"shard={fixed['shard']} must divide d·cp, the data-parallel ranks it shards over"
    return ""


@dataclass(frozen=True)
class ScalingRow:
    devices: int
    best: PlanEstimate | None
    speedup: float | None
    efficiency: float | None
    serial_fraction: float | None = None  # Karp–Flatt: (1/S - 1/n) / (1 - 1/n), n = N/N0

    def to_json(self) -> dict:
        return {
            "devices": self.devices,
            "best": self.best.to_json() if self.best else None,
            "speedup": self.speedup,
            "efficiency": self.efficiency,
            "serial_fraction": self.serial_fraction,
        }


def scaling(job: Job, make_cluster_for, device_counts: list[int], fixed: dict | None = None):
    """The best plan at each device count; speedup, efficiency and the Karp–Flatt serial
    fraction against the first count that fits. A fraction that grows with N is overhead
    that grows with N (communication, bubble), not a fixed serial part."""
    rows, base = [], None
    for n in device_counts:
        try:
            res = search(job, make_cluster_for(n), fixed, top=1).plans[0]
        except (DoesNotFit, InvalidInput):
            rows.append(ScalingRow(n, None, None, None))
            continue
        if base is None:
            base = (n, res.step_time_s)
        speed = base[1] / res.step_time_s
        ratio = n / base[0]
        rows.append(ScalingRow(n, res, speed, speed / ratio, karp_flatt(speed, ratio)))
    return rows
