"""This machine's measured ceilings as results: `ceiling.bench.matmul()`, `.memory()`,
`.overhead()`, `.transfer()`, `.comm()`, and `.machine()` (all of them, saved as the
machine profile).

Each runs the same benchmark as `ceiling bench <part>` (quick budgets by default) and returns
its record; Ctrl-C (a notebook's interrupt) stops the run and keeps what finished, marked
`interrupted`. `progress(total)`: an optional context manager yielding a callback that is
told each step as it starts (the command draws its bar with it).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ceiling.api.arguments import BadArgument, checked
from ceiling.api.result import Result
from ceiling.errors import InvalidInput

ALL_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all")
# A square fp32 matmul of this size needs 12 TiB; no device holds more than a few hundred GiB.
MAX_MATMUL_DIM = 2**20


@dataclass
class BenchResult(Result):
    """A benchmark run (`report`: the measure suite's `BenchReport`: matmul, memory, overhead,
    transfer rows as measured, with the environment and the method version)."""

    report: Any
    extra: dict[str, Any] = field(default_factory=dict)
    title = "Measured ceilings"

    @property
    def interrupted(self) -> bool:
        return bool(self.report.interrupted)

    def record(self) -> dict[str, Any]:
        return {**self.report.to_json(), **self.extra}

    def heading(self) -> str:
        return f"Measured ceilings of {self.report.device_name} ({self.report.device})"


@contextlib.contextmanager
def _no_progress(_total: int | None = None):
    yield None


def matmul_dim(value: int, what: str) -> int:
    if value > MAX_MATMUL_DIM:
        shown = f"{value:,}" if value < 10**15 else f"a {len(str(value))}-digit number"
        raise BadArgument(
            what, f"asks for {shown}, beyond any device's memory (at most {MAX_MATMUL_DIM:,})"
        )
    return value


def _run(part: str, device: str | None, quick: bool, progress, **kw) -> BenchResult:
    from ceiling.measure import machine, suite

    report = suite.new_report(machine.pick_device(device), quick)
    planned = {k: v for k, v in kw.items() if k in ("dtypes", "sizes", "shapes")}
    total = suite.planned_steps(report, (part,), **planned)
    with (progress or _no_progress)(total) as step:
        try:
            with suite.watched(report):
                getattr(suite, f"bench_{part}")(
                    report, budgets=suite.QUICK if quick else suite.FULL, progress=step, **kw
                )
        except KeyboardInterrupt:
            report.interrupted = True
    return BenchResult(report)


@checked
def matmul(
    dtypes: Iterable[str] | None = None,
    sizes: Iterable[int] | None = None,
    shapes: Iterable[str | tuple[int, int, int]] | None = None,
    *,
    device: str | None = None,
    quick: bool = True,
    progress: Callable | None = None,
) -> BenchResult:
    """Matrix-multiply FLOP/s per dtype (default: every dtype native here) and square size
    or "MxNxK" shape, each result checked against float64, beside the datasheet peak."""
    from ceiling.measure.matmul import check_dtype, parse_shape

    dtype_list = [check_dtype(d) for d in dtypes] if dtypes else None
    # a tuple is read as its "MxNxK" text, so both forms are checked the same way
    shape_list = [parse_shape(s if isinstance(s, str) else "x".join(map(str, s)))
                  for s in shapes or []]  # fmt: skip
    for m_n_k in shape_list:
        matmul_dim(max(m_n_k), "shapes")
    size_list = None
    if sizes is not None:
        size_list = list(sizes)
        if not size_list:
            raise BadArgument("sizes", "must give at least one size (e.g. 1024 and 2048)")
        for n in size_list:
            if not isinstance(n, int) or n <= 0:
                raise BadArgument("sizes", f"must be positive whole numbers, got {n!r}")
            matmul_dim(n, "sizes")
    return _run(
        "matmul", device, quick, progress, dtypes=dtype_list, sizes=size_list, shapes=shape_list
    )


@checked
def memory(
    *,
    device: str | None = None,
    quick: bool = True,
    elements: int | None = None,
    progress: Callable | None = None,
) -> BenchResult:
    """STREAM copy/scale/add/triad/dot bandwidth (GB = 1e9 bytes) beside naive numpy;
    `elements` per array (default: well beyond the last-level cache)."""
    kw = {"elements": elements} if elements is not None else {}
    if elements is not None:
        if elements < 1:
            raise BadArgument("elements", f"must be ≥ 1, got {elements}")
        if device is None or device == "cpu":  # on a GPU, its own allocator refuses
            from ceiling.hardware.capacity import check_bytes, local_room

            check_bytes(3 * 8 * elements, f"3 float64 arrays × {elements:,}", local_room())
    return _run("memory", device, quick, progress, **kw)


@checked
def overhead(
    *, device: str | None = None, quick: bool = True, progress: Callable | None = None
) -> BenchResult:
    """Cost of one tiny op, a Python loop against vectorised code, the GPU-vs-CPU crossover."""
    return _run("overhead", device, quick, progress)


@checked
def transfer(
    *, device: str | None = None, quick: bool = True, progress: Callable | None = None
) -> BenchResult:
    """Host-to-device, device-to-host and device-to-device copy bandwidth (GPU only)."""
    return _run("transfer", device, quick, progress)


@checked
def machine(
    *,
    device: str | None = None,
    quick: bool = True,
    save: str | Path | None = None,
    force: bool = False,
    progress: Callable | None = None,
) -> BenchResult:
    """Every benchmark (matmul, memory, overhead, transfer) and the machine profile built
    from them, saved where roofline, decode, plan and report find it ($CEILING_PROFILE or
    ~/.cache/ceiling/profile-<host>.json) and to `save` too; `extra["profile_saved_to"]`
    lists the files. A run measured while other work shared the machine replaces no profile
    measured on an idle one unless `force`: `extra["profile_kept"]` says which and why. Each
    measurement is journalled as it finishes: a full disk or a kill keeps what finished."""
    from ceiling.hardware.profile import default_profile_path, save_profile
    from ceiling.journal import Journal
    from ceiling.measure import machine as local
    from ceiling.measure import suite
    from ceiling.records import check_writable

    dev = local.pick_device(device)
    # A path that cannot be written fails now, not after a minute of measuring.
    if save is not None:
        check_writable(save)
    try:
        check_writable(default_profile_path())
    except InvalidInput as exc:
        raise InvalidInput(f"{exc} (the default profile path; set CEILING_PROFILE)") from None
    # each measurement is on disk as it finishes: a full disk or a kill keeps what finished
    journal = Journal.beside(save if save is not None else default_profile_path())
    with (progress or _no_progress)(suite.planned_steps(suite.new_report(dev, quick))) as step:
        report = suite.run_all(
            dev, quick, step, after_each=lambda r: journal.catch_up(suite.finished_rows(r))
        )
    saved: list[str] = []
    kept: dict[str, str] = {}
    if report.matmul or report.memory:
        targets = [(default_profile_path(), True)] + ([(Path(save), False)] if save else [])
        for target, merge in targets:
            previous = _readable_profile(target)
            why = None if force else _busy_keeps(report.busy_reasons, previous, target)
            if why is not None:
                kept[str(target)] = why
                continue
            profile = suite.build_profile(report, previous if merge else None)
            try:
                saved.append(str(save_profile(profile, target)))
            except (OSError, InvalidInput) as exc:
                raise journal.not_saved(f"the profile was not saved ({_why(exc)})") from None
    journal.remove()
    extra: dict[str, Any] = {"profile_saved_to": saved}
    if kept:
        extra["profile_kept"] = kept
    return BenchResult(report, extra)


def _why(exc: Exception) -> str:
    if isinstance(exc, OSError):
        return f"{exc.filename or 'a file'}: {exc.strerror or exc}"
    return str(exc)


def _readable_profile(path: Path):
    """The profile at `path`, or None when there is none or it cannot be read (replaced)."""
    from ceiling.hardware.profile import load_profile

    if not path.exists():
        return None
    with contextlib.suppress(Exception):
        return load_profile(path)
    return None


def _busy_keeps(busy: list[str], previous, target: Path) -> str | None:
    """Why a run measured while the machine was busy does not replace the profile at
    `target` (None when it does): a busy machine's ceilings read low, and every command
    would trust them. A missing profile, or one measured busy too, is replaced."""
    from ceiling.hardware.profile import busy_reasons

    if not busy or previous is None or busy_reasons(previous.environment):
        return None
    return (
        f"measured on a busy machine ({'; '.join(busy)}): {target} keeps the profile of "
        f"{previous.created}, measured idle; measure again on an idle machine, or --force "
        "replaces it"
    )


def comm_rows(raw: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (op, bytes): the slowest rank's median time, algbw and busbw in GB/s."""
    from ceiling.model import collectives

    n = raw["ranks"]
    rows = []
    for p in raw["points"]:
        t = max(p["time_s_per_rank"])
        algbw_gbps = collectives.algbw_bytes_per_s(p["bytes"], t) / 1e9
        rows.append(
            {
                "op": p["op"],
                "bytes": p["bytes"],
                "time_s": t,
                "algbw_gbps": algbw_gbps,
                "busbw_gbps": algbw_gbps * collectives.bus_factor(p["op"], n),
                "iters": p["iters"],
                "in_place": p.get("in_place"),
                "checked": p.get("checked", False),
            }
        )
    return rows


def latency_bandwidth(rows: list[dict[str, Any]]) -> dict[str, Any]:
    from ceiling.model import collectives

    out = {}
    for op in dict.fromkeys(r["op"] for r in rows):
        mine = [r for r in rows if r["op"] == op]
        if len(mine) < 2:
            continue
        fit = collectives.fit_latency_bandwidth(
            [r["bytes"] for r in mine], [r["time_s"] for r in mine]
        )
        out[op] = {
            "latency_s": fit.latency_s,
            "bandwidth_gbps": (
                fit.bandwidth_bytes_per_s / 1e9 if fit.bandwidth_bytes_per_s else None
            ),
            "r2": fit.r2,
        }
    return out


def _link(raw: dict[str, Any], rows: list[dict[str, Any]], named):
    """(link, note, ring-bound lines); adds each row's busbw share of the link."""
    from ceiling.hardware.resolve import by_driver_name
    from ceiling.model import comm_link

    on_gpu = str(raw["device"]).startswith("cuda")
    spec = named or (by_driver_name(raw.get("device_name", "")) if on_gpu else None)
    spans = raw.get("ranks_per_node", raw["ranks"]) < raw["ranks"]
    link = comm_link.collective_link(spec, spans_nodes=spans) if (on_gpu or named) else None
    note = None
    if link is None:
        note = (
            "no catalog link for CPU ranks under gloo (they share one machine's memory): "
            "busbw_share_of_link is null"
            if not on_gpu and named is None
            else f"{raw.get('device_name') or 'this device'} has no catalog entry with a "
            "link, so busbw is not set against one (pass --spec NAME or FILE.toml)"
        )
    else:
        note = f"busbw against the {link.kind} of {link.device_key}, one way: {link.source}"
    return link, note, comm_link.share_rows(rows, link)


def _telemetry(raw: dict[str, Any]) -> dict[str, Any] | None:
    """Rank 0's device clocks over the sweep, burst vs sustained (None when unreadable)."""
    from ceiling.hardware.telemetry import summarize

    readings = [p["telemetry"] for p in raw["points"] if p.get("telemetry")]
    if not raw.get("telemetry_source") or not readings:
        return None
    return {"source": raw["telemetry_source"], **summarize(readings)}


@dataclass
class CommResult(Result):
    """Collectives over ranks: per (op, bytes) time, algbw and busbw (`rows`), the α–β fit
    per op (`latency_bandwidth`) and the link busbw is set against."""

    raw: dict[str, Any]
    rows: list[dict[str, Any]]
    latency_bandwidth: dict[str, Any]
    link: Any
    link_note: str
    ring_notes: list[str]
    telemetry: dict[str, Any] | None
    environment: dict[str, Any]
    title = "Collectives"

    def record(self) -> dict[str, Any]:
        from ceiling.model import comm_link

        raw = self.raw
        return {
            "method_version": raw["method_version"],
            "ranks": raw["ranks"],
            "device": raw["device"],
            "backend": raw["backend_engine"],
            "launcher": raw["launcher"],
            "dtype": raw["dtype"],
            "torch": raw["torch"],
            "environment": self.environment,
            "bytes_note": "bytes of the largest per-rank buffer (nccl-tests' size); "
            "GB/s = 1e9 bytes/s",
            "rows": self.rows,
            "latency_bandwidth": self.latency_bandwidth,
            "link": self.link.json() if self.link else None,
            "link_note": self.link_note,
            "busbw_share_of_link": comm_link.best_shares(self.rows),
            "ring_bound_notes": self.ring_notes,
            "telemetry": self.telemetry,
        }

    def heading(self) -> str:
        return f"Collectives over {self.raw['ranks']} ranks ({self.raw['backend_engine']})"


def device_kind(device: str) -> str:
    """'cuda' or 'cpu': where the workers will run, for the default sweep."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


@checked
def comm(
    workers: int = 2,
    ops: Iterable[str] | None = None,
    sizes: Iterable[int] | None = None,
    *,
    iters: int | None = None,
    device: str = "auto",
    spec: str | None = None,
    timeout_s: float = 300.0,
    stall_timeout_s: float = 30.0,
    on_progress: Callable[[str], None] | None = None,
) -> CommResult | None:
    """All-reduce, all-gather, reduce-scatter, broadcast and all-to-all (default: all five)
    over `workers` local ranks (or the torchrun job) at message `sizes` in bytes (default:
    4 KiB up to 16 MiB on CPUs, 1 GiB on GPUs); busbw set against the link of `spec` (or the
    GPU's catalog entry). None on ranks other than 0 under torchrun."""
    from ceiling.measure import comm as comm_bench
    from ceiling.measure.scale import environment

    if device not in ("auto", "cpu", "cuda"):
        raise InvalidInput(f"device must be auto, cpu or cuda, got {device!r}")
    op_list = [o.replace("-", "_") for o in (list(ops) if ops is not None else ALL_COLLECTIVES)]
    if not op_list:
        raise BadArgument("ops", "must name at least one collective")
    named = None
    if spec is not None:  # a bad name fails now, not after the sweep
        from ceiling.hardware.catalog import get_spec

        named = get_spec(spec)
    if sizes is None:
        top = comm_bench.DEFAULT_MAX_BYTES[device_kind(device)]
        sizes = comm_bench.default_sizes(4 * 2**10, int(top))
    for name, seconds in (("timeout_s", timeout_s), ("stall_timeout_s", stall_timeout_s)):
        if not 0 < seconds < float("inf"):
            raise BadArgument(name, f"must be a positive number, got {seconds:g}")
    raw = comm_bench.run_comm_benchmark(
        workers, op_list, list(sizes), iters=iters, device=device, timeout_s=timeout_s,
        stall_s=stall_timeout_s, on_progress=on_progress or (lambda _m: None),
    )  # fmt: skip
    if raw is None:  # not rank 0 under torchrun
        return None
    rows = comm_rows(raw)
    link, link_note, ring_notes = _link(raw, rows, named)
    return CommResult(
        raw, rows, latency_bandwidth(rows), link, link_note, ring_notes, _telemetry(raw),
        environment(),
    )  # fmt: skip
