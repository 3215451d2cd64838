"""`ceiling bench comm`: collective bandwidth (algbw, busbw) between torch.distributed workers."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from ceiling.cli.bench import bench_app
from ceiling.cli.output import LIST_HELP, JsonOption, comma_list, console, emit_json, table
from ceiling.errors import InvalidInput
from ceiling.model import comm_link

ALL_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all")


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


@bench_app.command("comm")
def bench_comm(
    workers: Annotated[
        int, typer.Option("--workers", "-w", help="Ranks to spawn here (ignored under torchrun).")
    ] = 2,
    ops: Annotated[
        list[str] | None,
        typer.Option(
            help=f"Collectives, {LIST_HELP}: all_reduce, all_gather, reduce_scatter, "
            "broadcast, all_to_all (default: all five)."
        ),
    ] = None,
    min_bytes: Annotated[str, typer.Option(help="Smallest message (e.g. 4KiB).")] = "4KiB",
    max_bytes: Annotated[
        str | None,
        typer.Option(
            help="Largest message (default: 1GiB on GPUs, where links saturate; 16MiB on CPUs)."
        ),
    ] = None,
    iters: Annotated[
        int | None, typer.Option(help="Timed calls per point (default: by size, 3–50).")
    ] = None,
    quick: Annotated[bool, typer.Option(help="Three sizes: 4 KiB, 256 KiB, 4 MiB.")] = False,
    device: Annotated[str, typer.Option(help="auto, cpu or cuda.")] = "auto",
    timeout: Annotated[float, typer.Option(help="Stop every worker after this many s.")] = 300.0,
    stall_timeout: Annotated[
        float,
        typer.Option(
            help="Stop every worker when none has made progress for this many s (a hung "
            "worker is named); local runs."
        ),
    ] = 30.0,
    spec: Annotated[
        str | None,
        typer.Option(
            "--spec",
            metavar="NAME",
            help="The device whose link bounds busbw (catalog name or FILE.toml; default: "
            "the GPU's own entry, found by its driver name).",
        ),
    ] = None,
    json_out: JsonOption = False,
) -> None:
    """All-reduce, all-gather, reduce-scatter, broadcast and all-to-all over message sizes.

    algbw = bytes / time; busbw = algbw × 2(n−1)/n for all-reduce, × (n−1)/n for
    all-gather, reduce-scatter and all-to-all, × 1 for broadcast (nccl-tests' factors).
    busbw is set against the one-way bandwidth of the link it crosses (catalog: NVLink or
    Infinity Fabric inside a node, else PCIe; the scale-out NIC per device when the ranks
    span nodes); above 1 is beyond any ring (in-network reduction, NVLS/SHARP). Runs across
    machines under `torchrun`.
    """
    from ceiling.measure import comm
    from ceiling.measure.scale import environment
    from ceiling.units import format_bytes, format_time, parse_bytes

    if device not in ("auto", "cpu", "cuda"):
        raise InvalidInput(f"device must be auto, cpu or cuda, got {device!r}")
    given = comma_list(ops) if ops is not None else list(ALL_COLLECTIVES)
    op_list = [o.replace("-", "_") for o in given]
    if not op_list:
        raise InvalidInput("give at least one collective with --ops")
    named = None
    if spec is not None:  # a bad name fails now, not after the sweep
        from ceiling.hardware.catalog import get_spec

        named = get_spec(spec)
    # read even with --quick, so that a bad value is refused rather than ignored
    low = int(parse_bytes(min_bytes))
    top = comm.DEFAULT_MAX_BYTES[_kind(device)] if max_bytes is None else parse_bytes(max_bytes)
    if quick:
        sizes = [4 * 2**10, 256 * 2**10, 4 * 2**20]
    else:
        sizes = comm.default_sizes(low, int(top))
    if not 0 < stall_timeout < float("inf"):
        raise InvalidInput(f"--stall-timeout must be a positive number, got {stall_timeout:g}")
    raw = _run(comm, workers, op_list, sizes, iters, device, (timeout, stall_timeout))
    if raw is None:  # not rank 0 under torchrun
        return
    rows = comm_rows(raw)
    fits = latency_bandwidth(rows)
    link, link_note, ring_notes = _link(raw, rows, named)
    telemetry = _telemetry(raw)
    if json_out:
        emit_json(
            {
                "method_version": raw["method_version"],
                "ranks": raw["ranks"],
                "device": raw["device"],
                "backend": raw["backend_engine"],
                "launcher": raw["launcher"],
                "dtype": raw["dtype"],
                "torch": raw["torch"],
                "environment": environment(),
                "bytes_note": "bytes of the largest per-rank buffer (nccl-tests' size); "
                "GB/s = 1e9 bytes/s",
                "rows": rows,
                "latency_bandwidth": fits,
                "link": link.json() if link else None,
                "link_note": link_note,
                "busbw_share_of_link": comm_link.best_shares(rows),
                "ring_bound_notes": ring_notes,
                "telemetry": telemetry,
            }
        )
        return
    c = console()
    c.print(
        table(
            f"Collectives over {raw['ranks']} ranks ({raw['backend_engine']}, {raw['device']}, "
            f"{raw['dtype']}; slowest rank's median call)",
            ["op", "bytes", "time", "algbw GB/s", "busbw GB/s", "of link"],
            [
                [
                    r["op"],
                    format_bytes(r["bytes"], binary=True),
                    format_time(r["time_s"]),
                    f"{r['algbw_gbps']:.3g}",
                    f"{r['busbw_gbps']:.3g}",
                    "—" if r["busbw_share_of_link"] is None else f"{r['busbw_share_of_link']:.0%}",
                ]
                for r in rows
            ],
            caption="busbw = algbw × 2(n−1)/n (all-reduce), × (n−1)/n (all-gather, "
            "reduce-scatter, all-to-all), × 1 (broadcast). GB = 1e9 bytes. all-reduce and "
            "broadcast in place, the others out of place; every result checked element by "
            "element before timing.",
        )
    )
    if fits:
        c.print(
            table(
                "α–β fit (least squares): time = latency α + bytes / bandwidth (1/β)",
                ["op", "latency", "bandwidth GB/s", "R²"],
                [
                    [
                        op,
                        format_time(f["latency_s"]),
                        "—" if f["bandwidth_gbps"] is None else f"{f['bandwidth_gbps']:.3g}",
                        f"{f['r2']:.3f}",
                    ]
                    for op, f in fits.items()
                ],
            )
        )
    c.print(f"link: {link_note}")
    for line in ring_notes:
        c.print(f"note: {line}")
    from ceiling.report.bench_tables import telemetry_lines

    for line in telemetry_lines(telemetry or {}):
        c.print(line)


def _kind(device: str) -> str:
    """'cuda' or 'cpu': where the workers will run, for the default sweep."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _link(raw: dict[str, Any], rows: list[dict[str, Any]], named):
    """(link, note, ring-bound lines); adds each row's busbw share of the link."""
    from ceiling.hardware.catalog import match_driver_name

    on_gpu = str(raw["device"]).startswith("cuda")
    spec = named or (match_driver_name(raw.get("device_name", "")) if on_gpu else None)
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


def _run(comm, workers, op_list, sizes, iters, device, timeouts):
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    total = len(op_list) * len(sizes)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TimeElapsedColumn(),
        console=Console(file=sys.stderr),
        transient=True,
        disable=not sys.stderr.isatty(),
    ) as progress:
        task = progress.add_task(f"starting {workers} workers", total=total)
        return comm.run_comm_benchmark(
            workers,
            op_list,
            sizes,
            iters=iters,
            device=device,
            timeout_s=timeouts[0],
            stall_s=timeouts[1],
            on_progress=lambda m: progress.update(task, description=m, advance=1),
        )
