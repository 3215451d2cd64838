"""`ceiling bench comm`: collective bandwidth (algbw, busbw) between torch.distributed workers."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from ceiling.cli.bench import bench_app
from ceiling.cli.device_options import SPEC_FORMS
from ceiling.cli.output import LIST_HELP, JsonOption, comma_list, console, emit_json, table
from ceiling.errors import InvalidInput


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
            help=f"The device whose link bounds busbw: {SPEC_FORMS}. Default: the GPU's own "
            "entry, found by its driver name.",
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
    from ceiling.api import bench as api_bench
    from ceiling.measure import comm
    from ceiling.units import parse_bytes

    if device not in ("auto", "cpu", "cuda"):
        raise InvalidInput(f"device must be auto, cpu or cuda, got {device!r}")
    given = comma_list(ops) if ops is not None else list(api_bench.ALL_COLLECTIVES)
    op_list = [o.replace("-", "_") for o in given]
    if not op_list:
        raise InvalidInput("give at least one collective with --ops")
    # read even with --quick, so that a bad value is refused rather than ignored
    low = int(parse_bytes(min_bytes))
    kind = api_bench.device_kind(device)
    top = comm.DEFAULT_MAX_BYTES[kind] if max_bytes is None else parse_bytes(max_bytes)
    sizes = [4 * 2**10, 256 * 2**10, 4 * 2**20] if quick else comm.default_sizes(low, int(top))
    result = _run(api_bench, workers, op_list, sizes, iters, device, spec,
                  (timeout, stall_timeout))  # fmt: skip
    if result is None:  # not rank 0 under torchrun
        return
    if json_out:
        emit_json(result.to_dict())
        return
    _render(result)


def _render(result) -> None:
    """The sweep's table, the α–β fit per collective, the link busbw is set against."""
    from ceiling.units import format_bytes, format_time

    raw, rows, fits = result.raw, result.rows, result.latency_bandwidth
    link_note, ring_notes, telemetry = result.link_note, result.ring_notes, result.telemetry
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
    from ceiling.render.bench_tables import telemetry_lines

    for line in telemetry_lines(telemetry or {}):
        c.print(line)


def _run(api_bench, workers, op_list, sizes, iters, device, spec, timeouts):
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
        return api_bench.comm(
            workers,
            op_list,
            sizes,
            iters=iters,
            device=device,
            spec=spec,
            timeout_s=timeouts[0],
            stall_timeout_s=timeouts[1],
            on_progress=lambda m: progress.update(task, description=m, advance=1),
        )
