"""`serve --calibrate` on a real server: measure it at one Poisson rate, calibrate from that
run, predict other rates, and measure them.

    python benchmarks/serve_calibrate_local.py [--rates 2 4 6] [--calibrate-at 4]

A random-weight Llama served by `transformers serve --continuous-batching` on this CPU
(`benchmarks/local_server.py`). Every rate is measured with `ceiling serve hf:FOLDER
--measure URL --rate R --json` (fixed lengths, N requests); the run at `--calibrate-at` is
given to `--calibrate`, and each other rate is predicted four times: from the CPU's
measured profile alone; calibrated from that one run without its requests' times (no time a
sequence is fitted) and with them (their TPOT against the batch beside each fits the time a
sequence adds to an iteration); and calibrated from it and the run at the other rate (two
loads). Each repeat measures its own calibration run. The
table shows predicted / measured − 1 for throughput, TTFT p50 and TPOT p50, and the JSON
goes to `results/serve_calibrate_local.json`.
Timings on a shared machine are noisy: the spread of repeated runs is the context of any
figure here (`--repeats`).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from local_server import TinyLlama, local_server
from serve_measure_vs_guidellm import ROOT, ceiling_cli, cpu_profile
from trace_pool_memory import machine

FIGURES = (("output_tokens_per_s", "output tokens/s"), ("ttft_p50_s", "TTFT p50"),
           ("tpot_p50_s", "TPOT p50"))  # fmt: skip


def _figures(record: dict) -> dict:
    return {
        "output_tokens_per_s": record["output_tokens_per_s"],
        "ttft_p50_s": record["ttft_s"]["p50"],
        "tpot_p50_s": record["tpot_s"]["p50"],
    }


def _workload(args, rate: float) -> list[str]:
    return ["--rate", str(rate), "--num-requests", str(args.requests), "--input-tokens",
            str(args.prompt_tokens), "--output-tokens", str(args.output_tokens),
            "--seed", "1", "--engine", "transformers"]  # fmt: skip


def measure(args, url: str, folder: Path, rate: float, out: Path) -> dict:
    """The JSON of a measured run at `rate` (also written to `out`)."""
    record = ceiling_cli("serve", f"hf:{folder}", "--profile", str(args.profile_path),
                         "--measure", url, *_workload(args, rate))  # fmt: skip
    out.write_text(json.dumps(record))
    return record


def predict(args, folder: Path, rate: float, calibrate: list[Path]) -> dict:
    extra = [x for path in calibrate for x in ("--calibrate", str(path))]
    return ceiling_cli("serve", f"hf:{folder}", "--profile", str(args.profile_path),
                       *_workload(args, rate), *extra)  # fmt: skip


def _without_requests(path: Path) -> Path:
    """The measured run at `path` without its requests' times (beside it): a calibration
    from it fits no time a sequence, as one from a run measured before they were kept."""
    record = json.loads(path.read_text())
    record["measured"].pop("per_request", None)
    out = path.with_name(path.stem + "-without-requests.json")
    out.write_text(json.dumps(record))
    return out


def main(args) -> None:
    from ceiling.records import write_json_atomic

    args.profile_path = cpu_profile(args.profile)
    started, work = time.perf_counter(), Path(tempfile.mkdtemp(prefix="ceiling-calibrate-"))
    rows = []
    runs = []
    with local_server(TinyLlama(), continuous_batching=True) as (url, folder):
        for repeat in range(args.repeats):
            base = work / f"calibration-run-{repeat}.json"
            fitted = measure(args, url, folder, args.calibrate_at, base)
            runs.append(_figures(fitted["measured"]))
            paths = {rate: work / f"r{rate}-{repeat}.json" for rate in args.rates}
            measured = {rate: _figures(measure(args, url, folder, rate, paths[rate])["measured"])
                        for rate in args.rates}  # fmt: skip
            plain = _without_requests(base)
            for rate in args.rates:
                other = [paths[r] for r in args.rates if r != rate][:1]
                calibrated = predict(args, folder, rate, [base])
                two = predict(args, folder, rate, [base, *other])
                rows.append({"rate": rate, "repeat": repeat, "measured": measured[rate],
                             "profile_only": _figures(predict(args, folder, rate, [])),
                             "calibrated": _figures(calibrated), "two_loads": _figures(two),
                             "without_requests": _figures(predict(args, folder, rate, [plain])),
                             "calibration": calibrated["calibration"],
                             "two_load_calibration": two["calibration"]})  # fmt: skip
    show(rows)
    record = {"method_version": 3, "server": "transformers serve --continuous-batching, CPU",
              "calibrated_at_rate": args.calibrate_at, "calibration_runs": runs, "rows": rows,
              "wall_s": time.perf_counter() - started, "machine": machine()}  # fmt: skip
    out = write_json_atomic(record, ROOT / "results" / "serve_calibrate_local.json")
    print(f"wrote {out} ({record['wall_s']:.0f} s)")


def show(rows: list[dict]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title="predicted / measured − 1")
    heads = (f"{name}: profile / one load, no requests' times / one load / two"
             for _, name in FIGURES)  # fmt: skip
    for col in ("rate", "repeat", *heads):
        t.add_column(col, justify="right")
    for r in rows:
        m = r["measured"]
        kinds = ("profile_only", "without_requests", "calibrated", "two_loads")
        cells = [" / ".join(f"{r[c][k] / m[k] - 1:+.0%}" for c in kinds) for k, _ in FIGURES]
        t.add_row(f"{r['rate']:g}", str(r["repeat"]), *cells)
    Console().print(t)
    for r in rows[:: max(len({x["rate"] for x in rows}), 1)]:  # one a repeat
        for key in ("calibration", "two_load_calibration"):
            cal = r[key]
            print(
                f"repeat {r['repeat']}, {key.replace('_', ' ')}: {cal['iteration_s'] * 1e3:.2f} "
                f"ms an iteration, {cal['sequence_s'] * 1e3:.2f} ms a sequence, "
                f"{cal['request_s'] * 1e3:.1f} ms a request, device × {cal['device_scale']:.3g}"
            )
            line = cal["runs"][0].get("decode_batches")
            if line:
                (ea, eb), (lo, hi) = line["errors_s"], line["concurrency"]
                print(f"  its run's requests: {line['per_iteration_s'] * 1e3:.2f} ± {ea * 1e3:.2f}"
                      f" ms an iteration + {line['per_sequence_s'] * 1e3:.2f} ± {eb * 1e3:.2f} ms"
                      f" a sequence over {lo:.2g}–{hi:.2g} decoding"
                      f"{'' if line['separable'] else ' (too narrow: not used)'}")  # fmt: skip


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rates", type=float, nargs="+", default=[2.0, 6.0])
    p.add_argument("--calibrate-at", type=float, default=4.0)
    p.add_argument("--requests", type=int, default=48)
    p.add_argument("--prompt-tokens", type=int, default=64)
    p.add_argument("--output-tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--profile", help="machine profile for the prediction (default: saved)")
    return p.parse_args(argv)


if __name__ == "__main__":
    main(parse_args())
