"""`ceiling serve --measure` against guidellm on one local server, the same workload.

    PYTHONPATH=src python benchmarks/serve_measure_vs_guidellm.py [--guidellm PATH]

A random-weight Llama (`local_server.py`) served by `transformers serve --continuous-batching`
on this CPU gets a closed loop of C concurrent requests, N in all, each a prompt of
`--prompt-tokens` tokens asking for `--output-tokens` tokens; guidellm and ceiling measure it
in turn (the order swapped every alternation, so a drift of the shared machine falls on
both). Per metric it prints ceiling / guidellm: the median ratio over the alternations and
its range; the goal is within 10 %.

Like with like:
- TPOT is (E2E − TTFT) / (tokens − 1) per request in ceiling (vLLM's definition), which is
  guidellm's `inter_token_latency`; guidellm's own `time_per_output_token` divides the whole
  latency by every token, the first included, and is shown only for reference.
- Warm-up: ceiling leaves out the first C requests of a closed loop (by start). guidellm is
  run with `warmup.mode=requests,warmup.value=C`, but it drops a *time window* (until the
  (C+1)-th request starts, roughly) and keeps every request that overlaps the rest, and its
  throughput is the mean of a rate sampled over that window. So a third column scores
  guidellm's own per-request records by ceiling's definitions (`guidellm_report.rescored`):
  ceiling / that ratio is what the two clients saw differently, ceiling / guidellm adds
  the difference of definitions.
- Prompts: ceiling sends "hi hi … hi" (one token a word with this tokenizer), guidellm
  synthetic text cut to the token count with the same tokenizer; both report the server's
  prompt token counts (`prompt_tokens`, from its usage report). ceiling's prompts are all
  the same: a server with a prefix cache reuses every whole cache page of them after the
  first request; `transformers serve` pages hold 256 tokens, so prompts of fewer tokens
  (the default 64) are computed in full, as guidellm's are. Both send `max_tokens`
  and ask for the usage report; `transformers serve` refuses `ignore_eos`, and the model
  never generates an end token, so every answer has exactly the asked tokens.
- Ramp-up: both clients start a closed loop's C streams at once by default. With every
  request the same length, a client whose streams finish together sends together, and its
  prompts are prefilled together (TTFT holds C prefills); guidellm's worker processes jitter
  by an iteration or more and drift apart, ceiling's threads do not, so at a ramp-up of 0
  ceiling's TTFT came out 10–27 % above guidellm's on the same server. Both are then right
  about what they sent; they sent different loads. So both are given the same ramp-up
  (`--ramp-up`, default one request's time on the idle server): stream k starts k/C of it
  in, guidellm's `rampup_duration` and ceiling's `--ramp-up` alike, and streams an
  iteration apart stay apart.
- Cores: a client on the server's cores measures a server it slows itself; guidellm's
  processes keep 0.2–0.5 of a core busy, ceiling's client under 0.1. So the server runs
  on half the cores and both clients on the others (`--server-cores N`; 0 shares them all),
  and ceiling's prediction uses a machine profile measured on the server's cores alone.
  Each client's CPU time (its processes, children included) is recorded beside its
  figures.

Beside the measurement: ceiling's own prediction for the same workload (`ceiling serve
hf:FOLDER --concurrency C … --engine transformers` on this CPU's measured profile), as
predicted / measured.
Writes results/serve_measure_vs_guidellm.json (with `--server-cores 0`,
…-shared-cores.json). guidellm is not a dependency of ceiling:
install it in its own environment (`python -m venv gl && gl/bin/pip install guidellm`) and
pass `--guidellm gl/bin/guidellm`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import guidellm_report as gr
from cpu_sampler import TreeCpu
from local_server import TinyLlama, local_server

ROOT = Path(__file__).resolve().parent.parent
METRICS = ("output_tokens_per_s", "ttft_p50_s", "ttft_mean_s", "tpot_p50_s", "tpot_mean_s")


def ceiling_cli(*args: str) -> dict:
    """The JSON `ceiling ARGS --json` prints (this checkout's source)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    cmd = [sys.executable, "-m", "ceiling", *args, "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}: {done.stderr.strip()}")
    return json.loads(done.stdout)


def _has_host_costs(path: Path) -> bool:
    """Whether the profile at `path` holds the host's time an op (profiles saved by older
    versions do not: a CPU prediction from them prices no op's host time)."""
    try:
        devices = json.loads(path.read_text()).get("devices") or []
    except (OSError, ValueError):
        return False
    return any(((d.get("extra") or {}).get("overhead") or {}).get("host_costs") for d in devices)


def cpu_profile(given: str | None, cores: set[int] | None = None) -> Path:
    """The machine profile the prediction uses: `given`, else ceiling's saved one when it
    holds the host's time an op, else one measured now (`ceiling bench --quick`, about a
    minute) into the model cache. With `cores` (the server's, when it is pinned to some):
    one measured on those cores alone, as the server runs."""
    from ceiling.hardware.profile import default_profile_path

    if given:
        return Path(given)
    if not cores and _has_host_costs(default_profile_path()):
        return default_profile_path()
    name = f"profile-cpu-{len(cores)}-cores.json" if cores else "profile-cpu.json"
    path = Path(tempfile.gettempdir()) / "ceiling-bench-models" / name
    if not _has_host_costs(path):
        where = f" on {len(cores)} of the cores" if cores else ""
        print(f"measuring a machine profile{where} into {path} (about a minute)", flush=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), CEILING_PROFILE=str(path))
        if cores:
            env["OMP_NUM_THREADS"] = str(len(cores))
        pin = (lambda: os.sched_setaffinity(0, cores)) if cores else None
        bench = [sys.executable, "-m", "ceiling", "bench", "--quick", "--device", "cpu"]
        subprocess.run(bench, env=env, check=True, capture_output=True, timeout=900, preexec_fn=pin)
    return path


def workload_args(args, concurrency: int) -> list[str]:
    return ["--concurrency", str(concurrency), "--num-requests", str(args.requests),
            "--input-tokens", str(args.prompt_tokens),
            "--output-tokens", str(args.output_tokens),
            "--ramp-up", f"{args.ramp_up_s:.4f}s", "--engine", "transformers"]  # fmt: skip


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure_ceiling(args, url: str, folder: Path, concurrency: int) -> dict:
    before = children_cpu_s()
    result = ceiling_cli("serve", f"hf:{folder}", "--profile", str(args.profile_path),
                         "--weights", "fp32", "--measure", url,
                         *workload_args(args, concurrency))  # fmt: skip
    figures = gr.ceiling_measured(result)
    return figures | {"client_cpu_s": children_cpu_s() - before,
                      "notes": result["measured"]["notes"]}  # fmt: skip


def guidellm_command(args, url: str, folder: Path, concurrency: int, out: Path) -> list[str]:
    return [
        args.guidellm, "run",
        "--backend", f"kind=openai_http,target={url},model={folder},"
                     f"request_format=/v1/completions,max_tokens={args.output_tokens}",
        "--profile", f"kind=concurrent,streams={concurrency},"
                     f"rampup_duration={args.ramp_up_s:.4f},"
                     f"warmup.mode=requests,warmup.value={concurrency}",
        "--constraint", f"kind=max_requests,count={args.requests}",
        "--tokenizer", f"kind=huggingface_auto,model={folder}",
        "--data", f"kind=synthetic_text,prompt_tokens={args.prompt_tokens}",
        "--output", f"kind=json,path={out}",
        "--disable-console",
    ]  # fmt: skip


def run_guidellm(cmd: list[str]) -> tuple[subprocess.CompletedProcess, TreeCpu]:
    """Run guidellm, sampling its processes' CPU time meanwhile."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sampler = TreeCpu(proc.pid)
    try:
        out, err = proc.communicate(timeout=600)
    finally:
        sampler.stop()
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err), sampler


def measure_guidellm(args, url: str, folder: Path, concurrency: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "guidellm.json"
        before = children_cpu_s()
        done, sampler = run_guidellm(guidellm_command(args, url, folder, concurrency, out))
        cpu_s = children_cpu_s() - before
        if done.returncode != 0 or not out.exists():
            tail = (done.stderr or done.stdout).strip()[-2000:]
            raise RuntimeError(f"guidellm exited {done.returncode}: {tail}")
        report = json.loads(out.read_text())
    busy = sampler.cores_between(*gr.request_window(report))
    return {"headline": gr.headline(report), "rescored": gr.rescored(report, concurrency),
            "client_cpu_s": cpu_s, "client_cores_while_measuring": busy}  # fmt: skip


def warm_server(url: str, folder: Path, prompt_tokens: int) -> int:
    """One request before any measurement (the first one pays for loading and compiling);
    the prompt tokens the server counts (its usage report) of ceiling's prompt."""
    import httpx

    body = {"model": str(folder), "prompt": " ".join(["hi"] * prompt_tokens), "max_tokens": 4}
    answer = httpx.post(f"{url}/v1/completions", json=body, timeout=120, trust_env=False)
    return int(answer.json()["usage"]["prompt_tokens"])


def one_request_s(url: str, folder: Path, args) -> float:
    """The time one request of the workload takes on the idle server (median of three)."""
    import httpx

    body = {"model": str(folder), "prompt": " ".join(["hi"] * args.prompt_tokens),
            "max_tokens": args.output_tokens}  # fmt: skip
    times = []
    for _ in range(3):
        started = time.perf_counter()
        httpx.post(f"{url}/v1/completions", json=body, timeout=120, trust_env=False)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def ramp_up_s(given: str, url: str, folder: Path, args) -> float:
    """`--ramp-up`: seconds, or "request" for one request's time alone (each stream's first
    request a C-th of it after the one before)."""
    return one_request_s(url, folder, args) if given == "request" else float(given)


def one_concurrency(args, url: str, folder: Path, concurrency: int) -> dict:
    """Alternations of guidellm and ceiling at one concurrency, and ceiling's prediction."""
    runs = []
    for i in range(args.alternations):
        order = ("guidellm", "ceiling") if i % 2 == 0 else ("ceiling", "guidellm")
        run = {}
        for who in order:
            started = time.perf_counter()
            measure = measure_guidellm if who == "guidellm" else measure_ceiling
            run[who] = measure(args, url, folder, concurrency)
            run[who]["wall_s"] = time.perf_counter() - started
        runs.append(run)
        print(f"C={concurrency} alternation {i + 1}: " + ", ".join(
            f"{who} {r['wall_s']:.0f} s" for who, r in run.items()), flush=True)  # fmt: skip
    before = children_cpu_s()
    predicted = gr.ceiling_predicted(ceiling_cli(
        "serve", f"hf:{folder}", "--profile", str(args.profile_path), "--weights", "fp32",
        *workload_args(args, concurrency)))  # fmt: skip
    # ceiling's start-up and simulation, the same with and without --measure
    predict_cpu_s = children_cpu_s() - before
    return {"concurrency": concurrency, "runs": runs, "predicted": predicted,
            "ceiling_cpu_s_without_measuring": predict_cpu_s}  # fmt: skip


def ratios(result: dict) -> dict:
    """Per metric: ceiling / guidellm, ceiling / guidellm rescored (median, min, max over the
    alternations) and predicted / ceiling measured (against the median measurement)."""
    out = {}
    runs = result["runs"]
    for metric in METRICS:
        ceiling = [r["ceiling"][metric] for r in runs]
        guidellm = [r["guidellm"]["headline"][metric] for r in runs]
        rescored = [r["guidellm"]["rescored"][metric] for r in runs]
        out[metric] = {
            "ceiling": statistics.median(ceiling),
            "guidellm": statistics.median(guidellm),
            "vs_guidellm": _spread([c / g for c, g in zip(ceiling, guidellm, strict=True)]),
            "vs_rescored": _spread([c / g for c, g in zip(ceiling, rescored, strict=True)]),
            "predicted_vs_measured": result["predicted"][metric] / statistics.median(ceiling),
        }
    return out


def _spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def machine_facts(guidellm: str) -> dict:
    import torch
    import transformers

    from ceiling.hardware.cpu import detect_cpu

    version = subprocess.run([guidellm, "--version"], capture_output=True, text=True).stdout
    cpu = detect_cpu()
    return {
        "cpu": cpu.model,
        "cores": cpu.cores,
        "threads": cpu.threads,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "guidellm": version.strip().rsplit(" ", 1)[-1],
    }


LABELS = {"output_tokens_per_s": "output tokens/s", "ttft_p50_s": "TTFT p50",
          "ttft_mean_s": "TTFT mean", "tpot_p50_s": "TPOT p50 (guidellm ITL)",
          "tpot_mean_s": "TPOT mean (guidellm ITL)"}  # fmt: skip


def _shown(metric: str, value: float) -> str:
    return f"{value:,.1f}" if metric == "output_tokens_per_s" else f"{value * 1e3:,.1f} ms"


def _ratio(r: dict) -> str:
    return f"{r['median']:.3f} ({r['min']:.3f}–{r['max']:.3f})"


def print_table(results: list[dict], alternations: int) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"ceiling serve --measure vs guidellm: ratios ceiling / guidellm, "
                        f"median (min–max) of {alternations} alternations")  # fmt: skip
    for name in ("C", "metric", "guidellm", "ceiling", "ceiling / guidellm",
                 "ceiling / guidellm rescored", "predicted / measured"):  # fmt: skip
        table.add_column(name, justify="left" if name == "metric" else "right")
    for result in results:
        for metric, r in result["ratios"].items():
            table.add_row(str(result["concurrency"]), LABELS[metric],
                          _shown(metric, r["guidellm"]), _shown(metric, r["ceiling"]),
                          _ratio(r["vs_guidellm"]), _ratio(r["vs_rescored"]),
                          f"{r['predicted_vs_measured']:.2f}")  # fmt: skip
    Console(width=160).print(table)


def _guidellm_prompt_tokens(results: list[dict]) -> float:
    return statistics.median(r["guidellm"]["headline"]["prompt_tokens_mean"]
                             for result in results for r in result["runs"])  # fmt: skip


def client_lines(results: list[dict]) -> None:
    """The CPU the clients spent measuring: guidellm's processes while its requests ran;
    ceiling's whole process less the same command without --measure (start-up,
    simulation), over the time its counted requests ran (an upper bound: the probe and
    warm-up requests are in the CPU time, not in that time)."""
    for result in results:
        runs = result["runs"]
        g = statistics.median(r["guidellm"]["client_cores_while_measuring"] or 0 for r in runs)
        own = result["ceiling_cpu_s_without_measuring"]
        c = statistics.median(
            max(r["ceiling"]["client_cpu_s"] - own, 0) / r["ceiling"]["duration_s"] for r in runs
        )
        print(f"C={result['concurrency']}: cores the client kept busy while measuring: "
              f"guidellm {g:.2f}, ceiling at most {c:.2f}", flush=True)  # fmt: skip


def server_cores(count: int | None) -> set[int] | None:
    """The cores the server runs on (`--server-cores N`: the first N this process may use,
    the rest left to the clients; None: half of them); None: every core, shared with the
    clients."""
    mine = sorted(os.sched_getaffinity(0))
    count = len(mine) // 2 if count is None else count
    if count <= 0 or count >= len(mine):
        return None
    return set(mine[:count])


def main(args) -> None:
    from ceiling.records import write_json_atomic

    started = time.perf_counter()
    shape = TinyLlama()
    cores, everyone = server_cores(args.server_cores), os.sched_getaffinity(0)
    args.profile_path = cpu_profile(args.profile, cores)
    with local_server(shape, continuous_batching=True, cores=cores) as (url, folder):
        if cores:  # the clients (this process and its children) on the other cores
            os.sched_setaffinity(0, set(everyone) - cores)
        try:
            ceiling_prompt_tokens = warm_server(url, folder, args.prompt_tokens)
            args.ramp_up_s = ramp_up_s(args.ramp_up, url, folder, args)
            print(f"ramp-up: {args.ramp_up_s * 1e3:.0f} ms", flush=True)
            results = [one_concurrency(args, url, folder, c) for c in args.concurrency]
        finally:
            os.sched_setaffinity(0, everyone)  # the machine's facts are read whole
    for result in results:
        result["ratios"] = ratios(result)
    print_table(results, args.alternations)
    client_lines(results)
    print(
        f"prompt tokens the server counted: ceiling {ceiling_prompt_tokens}, guidellm "
        f"{_guidellm_prompt_tokens(results):g} (the beginning-of-sequence token included)"
    )
    record = {
        "method_version": 2,
        "machine": machine_facts(args.guidellm),
        "server": f"transformers serve --continuous-batching --device cpu, {shape.name}",
        "workload": {"prompt_tokens": args.prompt_tokens, "output_tokens": args.output_tokens,
                     "requests": args.requests, "concurrency": args.concurrency,
                     "ramp_up_s": args.ramp_up_s, "ramp_up": args.ramp_up},
        "server_prompt_tokens": {"ceiling": ceiling_prompt_tokens,
                                 "guidellm": _guidellm_prompt_tokens(results)},
        "profile": str(args.profile_path),
        "server_cores": sorted(cores) if cores else "all, shared with the clients",
        "wall_s": time.perf_counter() - started,
        "results": results,
    }  # fmt: skip
    name = "serve_measure_vs_guidellm" + ("" if cores else "-shared-cores")
    out = write_json_atomic(record, ROOT / "results" / f"{name}.json")
    print(f"wrote {out} ({record['wall_s']:.0f} s)")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--guidellm",
        default=shutil.which("guidellm") or "guidellm",
        help="the guidellm executable (default: guidellm on PATH)",
    )
    p.add_argument("--concurrency", type=int, nargs="+", default=[2, 4])
    p.add_argument("--requests", type=int, default=48)
    p.add_argument("--prompt-tokens", type=int, default=64)
    p.add_argument("--output-tokens", type=int, default=32)
    p.add_argument("--alternations", type=int, default=3)
    p.add_argument("--profile", help="machine profile for the prediction (default: saved)")
    p.add_argument("--ramp-up", default="request",
                   help="spread each closed loop's first C requests over this many seconds, "
                        "on both clients (guidellm's rampup_duration, ceiling's --ramp-up); "
                        "'request' (the default): one request's time on the idle server; 0: "
                        "all at once")  # fmt: skip
    p.add_argument("--server-cores", type=int, default=None,
                   help="run the server on this many cores and the clients on the rest, so a "
                        "client's own CPU time does not slow the server it measures (default: "
                        "half the cores; 0: all, shared with the clients)")  # fmt: skip
    args = p.parse_args(argv)
    if shutil.which(args.guidellm) is None:
        p.error(f"no guidellm executable at {args.guidellm!r}: install it in its own "
                "environment (python -m venv gl && gl/bin/pip install guidellm) and pass "
                "--guidellm gl/bin/guidellm")  # fmt: skip
    return args


if __name__ == "__main__":
    main(parse_args())
