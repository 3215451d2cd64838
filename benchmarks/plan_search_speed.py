"""How fast the training-plan search is: plans evaluated per second and the full search time.

Cases: GPT-3 175B on 1,024 A100s (the `ceiling plan` acceptance case) and the 1T-parameter
GPT of Narayanan et al. 2021, Table 1 (catalog `gpt-1t`: l = 128, h = 25600, a = 160,
V = 51200, s = 2048) on 3,072 A100s with a global batch of 3072; then, with every planner v2
axis on — context parallelism searched, FP8 linear layers and tensor-parallel overlap pinned
on, uneven stages, interleaving beyond 8 and partial recomputation searched — GPT-3 175B on
1,024 H100s and Llama 3 405B on 16,384 H100s (s = 8192, 2,048 sequences: 16M tokens a step,
as Llama 3's pre-training); and a 671B-class mixture-of-experts (DeepSeek-V3's shape: 61
layers, h 7168, 256 routed experts of width 2048, 8 per token; its latent attention entered
as 128 standard heads until the catalog has it) on 2,048 H800s, 15,360 sequences of 4,096,
with every axis searched — ep and etp (MoE parallel folding), FSDP inside pipeline stages,
context parallelism — and then with FP8, TP overlap and the all-to-all overlap pinned on.
Each must search in under 1 s; on a loaded machine compare the MoE search with the Llama
405B one, which evaluates about as many plans. The search evaluates every valid plan as
grids (`model.plan.grid`: each term over the axes it reads); that is set beside one flat
vectorised pass over the same plans (`enumerate_plans` + `evaluate_arrays`) and beside
evaluating them one at a time (`evaluate_plan`), all measured in the same run, with the
load average (the machine may be shared).
Also times the whole `ceiling plan ... --json` command in a fresh process, imports included.
Run: .venv/bin/python benchmarks/plan_search_speed.py
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from ceiling.hardware.catalog import get_spec
from ceiling.model.cluster import make_cluster
from ceiling.model.plan.axes import plan_at
from ceiling.model.plan.search import enumerate_plans, search
from ceiling.model.plan.step import Job, evaluate_arrays, evaluate_plan
from ceiling.model.transformer import get_model, parse_model

REPEATS = 5
ONE_AT_A_TIME = 300  # plans evaluated singly for the comparison


def best_of(fn, repeats=REPEATS) -> tuple[float, float]:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times), statistics.median(times)


ALL_AXES_ON = {"fp8": "linear", "tp_overlap": True}


def case(
    label: str, model, gpus: int, batch: int, seq=2048, device="a100-80gb", fixed=None, job=None
) -> None:
    job = job or Job(model, batch, seq, attention="unfused")
    cluster = make_cluster(get_spec(device), gpus)
    cand = enumerate_plans(job, cluster, fixed)
    n = len(cand["d"])
    t_enum, _ = best_of(lambda: enumerate_plans(job, cluster, fixed), 2)
    t_eval, _ = best_of(lambda: evaluate_arrays(job, cluster, cand), 2)
    t_full, t_med = best_of(lambda: search(job, cluster, fixed, top=5))
    found = search(job, cluster, fixed, top=1)
    best = found.plans[0]
    k = min(n, ONE_AT_A_TIME)
    singles = [plan_at(cand, i) for i in range(0, n, max(1, n // k))][:k]
    t_single, _ = best_of(lambda: [evaluate_plan(job, cluster, pl) for pl in singles], 1)
    print(f"{label}: {n} valid plans, {found.evaluated} evaluated by the search")
    print(
        f"  search (grids, enumerate + evaluate + rank + explain top 5): "
        f"best {t_full * 1e3:.1f} ms, median {t_med * 1e3:.1f} ms -> {n / t_full:,.0f} plans/s"
    )
    print(
        f"  one flat pass: enumerate {t_enum * 1e3:.1f} ms, evaluate {t_eval * 1e3:.1f} ms "
        f"({(t_enum + t_eval) / t_full:.1f}× the search); one at a time {k / t_single:,.0f} "
        f"plans/s ({(n / t_full) / (k / t_single):,.0f}× slower than the search)"
    )
    print(
        f"  best plan {best.plan.describe()}: step {best.step_time_s:.2f} s, "
        f"MFU {best.mfu:.1%}, {best.hw_tflops_per_device:.0f} TFLOP/s per device"
    )
    print(f"  load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")


def command_time() -> None:
    exe = Path(sys.executable).with_name("ceiling")
    cmd = [
        str(exe),
        "plan",
        "gpt3-175b",
        "--spec",
        "a100-80gb",
        "--gpus",
        "1024",
        "--global-batch",
        "1536",
        "--seq",
        "2048",
        "--json",
    ]
    walls = []
    for _ in range(3):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        walls.append(time.perf_counter() - t0)
    print(
        f"`{' '.join(cmd[1:])}`: {min(walls):.2f} s best, {statistics.median(walls):.2f} s "
        "median wall (fresh process, imports included)"
    )


if __name__ == "__main__":
    case("GPT-3 175B on 1,024 A100", get_model("gpt3-175b"), 1024, 1536)
    case("GPT 1T on 3,072 A100", get_model("gpt-1t"), 3072, 3072)
    gpt3, llama = get_model("gpt3-175b"), get_model("llama-3-405b")
    case("GPT-3 175B on 1,024 H100, all axes", gpt3, 1024, 1536, 2048, "h100-sxm", ALL_AXES_ON)
    case("Llama 3 405B on 16,384 H100, all axes", llama, 16384, 2048, 8192, "h100-sxm", ALL_AXES_ON)
    moe = parse_model(
        "custom:layers=61,hidden=7168,heads=128,kv_heads=128,head_dim=128,ffn_hidden=2048,"
        "ffn_kind=swiglu,vocab=129280,experts=256,active_experts=8,trained_dropout=false"
    )
    moe_job = Job(moe, 15360, 4096, dropout=False, moe_dispatcher="deepep", moe_node_limit=4)
    case("671B-class MoE on 2,048 H800, every axis", moe, 2048, 0, 0, "h800", job=moe_job)
    moe_on = {**ALL_AXES_ON, "ep_overlap": True}
    case("671B-class MoE on 2,048 H800, FP8 + overlaps", moe, 2048, 0, 0, "h800", moe_on, moe_job)
    command_time()
