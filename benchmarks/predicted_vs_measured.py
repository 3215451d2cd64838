"""Predicted step time under three roofs (compute, memory, per-op overhead) against the
measured one, on this machine; and expected decode speed against published runs. First
measures this machine quickly (best fp32 matmul rate, DRAM read bandwidth, one tiny op's
time, the first touch of a new buffer, the elementwise functions' cost per element) into a
temporary machine profile, so that the compute roof is the measured matmul ceiling, not the
datasheet's; then profiles each workload against it and prints predicted / measured (the
target is within 30 %) and checks that the waterfall's bars add up to the measured step.
Then trains twelve architectures of the field built small from their configurations
(benchmarks/architectures.py: GPT-2, Llama, BERT, T5, Mamba, Whisper, ViT, ResNet, Swin,
CLIP, torch's LSTM and TransformerEncoder) at two batch sizes, each --repeats times against
the machine measured afresh just before (a shared machine has slow spells lasting seconds,
which should hit the roofs and the step alike), and prints the median and the lowest
predicted / measured at each, a model's figure being its repeat of median ratio, the range
of its repeats beside its name (the target: median within 0.9-1.1, none below 0.7). Torch
runs on --threads threads (default 1): on a shared machine a descheduled worker thread
stalls every parallel op, which no roof describes. Every timing (steps, ops and roofs alike)
reads the main thread's CPU time (time.thread_time, --clock thread, the default with one
thread): all the work runs on that thread, and time spent descheduled by other processes on
a loaded machine is not counted (their use of the shared cache still is). --clock wall reads
the wall clock, as the commands do; it is the only clock for more than one thread. The load
average is printed before and after. Usage:

    .venv/bin/python benchmarks/predicted_vs_measured.py [--steps 5] [--threads 1]
        [--repeats 5] (--steps: at least this many timed steps per workload)
        [--clock thread|wall] [--models gpt2,clip] (--models: only these architectures,
        no built-in workloads)
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

# (target, training, timed steps): a short step gets more of them, so that the fastest is
# one other processes left alone (the mlp's ~5 ms step, 200 of them: about a second)
TRAINING = [("gpt:tiny", True, 5), ("gpt:small", True, 5), ("mlp", True, 200)]
DECODE_BATCHES = [1, 16]
TOLERANCE = 0.30
ARCHITECTURE_BATCHES = (2, 8)
# timed steps of each architecture: its fastest is taken, and a shared host's step times
# swing by 1.5× for seconds at a time, so a few more than the built-ins' 5
ARCHITECTURE_STEPS = 15


def best_matmul_flops_per_s(n: int = 1024, repeats: int = 20) -> float:
    import torch

    a, b = torch.randn(n, n), torch.randn(n, n)
    for _ in range(3):
        a @ b
    best = min(_timed(lambda: a @ b) for _ in range(repeats))
    return 2.0 * n**3 / best


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def quick_profile(path: Path) -> Path:
    from ceiling.hardware.profile import MachineProfile, MeasuredDevice, save_profile
    from ceiling.measure.decode import quick_read_bandwidth
    from ceiling.measure.first_touch import time_first_touch
    from ceiling.measure.functions import time_functions
    from ceiling.measure.machine import cpu_info
    from ceiling.measure.overhead import first_touch_row, time_tiny_op

    tiny_s, _best = time_tiny_op("cpu", warmup_ms=20.0, budget_ms=200.0)
    first_touch = first_touch_row(time_first_touch("cpu"))
    functions = time_functions("cpu").__dict__
    device = MeasuredDevice(
        name=getattr(cpu_info(), "model", "cpu"),
        kind="cpu",
        peak_flops_per_s={"fp32": best_matmul_flops_per_s()},
        # the best of a few reads: other processes only ever make a read slower
        bandwidth_bytes_per_s=max(quick_read_bandwidth("cpu", budget_ms=400.0) for _ in range(3)),
        extra={"overhead": {"tiny_op_s": tiny_s, **first_touch, "functions": functions}},
    )
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return save_profile(MachineProfile(2, when, "benchmark", {}, [device]), path)


def training_rows(profile: Path, steps: int) -> list[tuple]:
    from ceiling.profile.run import profile_target

    rows = []
    for target, train, listed in TRAINING:
        n = max(steps, listed)
        r = profile_target(target, train=train, profile=str(profile), steps=n)
        e = r.explanation
        bars = sum(b.seconds for b in e.waterfall)
        what = f"{target} {'training' if train else 'forward'}"
        fastest = min(r.step_samples_s)  # other processes only ever make a step slower
        rows.append((what, e.prediction.time_s, fastest, e.prediction.bound, bars, r.step_s))
    return rows


def architecture_rows(
    tmp: Path, steps: int, repeats: int, names: set[str] | None = None
) -> dict[int, list[tuple]]:
    """Each model at each batch, `repeats` times, each time against this machine measured
    afresh just before (a shared machine has slow spells of seconds: the roofs and the
    step are then taken in the same one); the repeat of median predicted / measured. The
    repeats are passes over every model, one after another."""
    from architectures import MAKERS
    from ceiling.measure.once import forget
    from ceiling.profile.run import profile_target

    makers = [m for m in MAKERS if not names or m.__name__ in names]
    runs: dict[tuple[int, int], list[tuple]] = {}
    # a model's repeats are spread over the run, each a pass over every model: a slow spell
    # of a minute spoils one repeat of several models, not every repeat of one
    for i in range(repeats):
        for k, make in enumerate(makers):
            for b in ARCHITECTURE_BATCHES:
                forget()  # the host costs and quick roofs a process keeps: measured again
                profile = quick_profile(tmp / f"profile-{i}.json")
                w = make(b)
                r = profile_target(w, train=True, profile=str(profile), steps=steps)
                e = r.explanation
                bars = sum(x.seconds for x in e.waterfall)
                name = f"{w.name} training, batch {b}"
                runs.setdefault((k, b), []).append((name, e.prediction.time_s,
                    min(r.step_samples_s), e.prediction.bound, bars, r.step_s))  # fmt: skip
    rows: dict[int, list[tuple]] = {b: [] for b in ARCHITECTURE_BATCHES}
    for (_k, b), each in runs.items():
        each.sort(key=lambda row: row[1] / row[2])
        what, *rest = each[len(each) // 2]
        if len(each) > 1:  # the repeats' range beside the median one's name
            what += f" ({each[0][1] / each[0][2]:.2f}-{each[-1][1] / each[-1][2]:.2f})"
        rows[b].append((what, *rest))
    return rows


def _print_rows(rows) -> None:
    print(
        f"{'workload':56} {'predicted':>10} {'measured':>10} {'pred/meas':>9} {'median':>10}  bound"
    )
    for what, predicted, measured, bound, bars, median in rows:
        ok = "" if abs(predicted / measured - 1) <= TOLERANCE else "  (outside 30 %)"
        same = bars is not None and abs(bars - median) <= 1e-9 * median
        check = "" if bars is None else f"; waterfall sums to {bars * 1e3:.4g} ms"
        check += " = the median step" if same else (" ≠ the median step" if check else "")
        print(
            f"{what:56} {predicted * 1e3:8.3g}ms {measured * 1e3:8.3g}ms "
            f"{predicted / measured:9.2f} {median * 1e3:8.3g}ms  {bound}{check}{ok}"
        )


def decode_rows(profile: Path) -> list[tuple]:
    from ceiling.measure.decode import measure_decode
    from ceiling.model.transformer import get_model

    cmp = measure_decode(get_model("gpt:small"), DECODE_BATCHES, profile=str(profile))
    return [
        (
            f"gpt:small decode, batch {r.batch}",
            r.batch / r.expected_tokens_per_s,
            r.batch / r.best_tokens_per_s,
            r.expected_limited_by,
            None,
            r.step_time_s,
        )
        for r in cmp.rows
    ]


def public_decode_rows() -> list[tuple]:
    from ceiling.hardware.resolve import resolve_device
    from ceiling.model.decode import DecodeSetup, decode_ceiling
    from ceiling.model.decode_expected import costs_for, expected_rows
    from ceiling.model.transformer import get_model

    cases = [
        ("Llama-2-70B bf16 tp2, A100-80GB", "llama-2-70b", "a100-80gb", DecodeSetup(tp=2), 21.32),
        ("Llama-2-7B int4 g32, A100-80GB", "llama-2-7b", "a100-80gb",
         DecodeSetup(weights_dtype="int4"), 196.80),
        ("Llama-2-7B bf16, MI250X GCD", "llama-2-7b", "mi250x", DecodeSetup(), 76.33),
    ]  # fmt: skip
    out = []
    for label, model, device, setup, published in cases:
        cfg, spec = get_model(model), resolve_device(device, None)
        c = decode_ceiling(cfg, spec, [1], setup)
        (e,) = expected_rows(c, cfg.layers, costs_for(spec))
        out.append((label, published, e.tokens_per_s, c.rows[0].tokens_per_s))
    return out


def _load() -> str:
    import os

    return ", ".join(f"{x:.2f}" for x in os.getloadavg()) + f" on {os.cpu_count()} CPUs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--clock", choices=("thread", "wall"), default=None)
    # five: a model's ratio moves by up to ±0.3 from one profile to the next on a shared
    # host (its quick roofs are measured in seconds), and the median of five holds steadier
    parser.add_argument("--repeats", type=int, default=5, help="profiles of each model")
    parser.add_argument("--models", default=None, help="only these architectures (by name)")
    args = parser.parse_args()
    names = set(args.models.split(",")) if args.models else None
    if names:
        from architectures import MAKERS

        unknown = names - {m.__name__ for m in MAKERS}
        if unknown:
            parser.error(f"no architecture {', '.join(sorted(unknown))}; there are "
                         + ", ".join(m.__name__ for m in MAKERS))  # fmt: skip
    args.clock = args.clock or ("thread" if args.threads == 1 else "wall")
    if args.repeats < 1 or args.steps < 1:
        parser.error("--repeats and --steps take 1 or more")
    if args.clock == "thread" and args.threads != 1:
        parser.error("--clock thread times one thread: use it with --threads 1")
    if args.clock == "thread":  # before any timing code is imported and binds its clock
        time.perf_counter, time.perf_counter_ns = time.thread_time, time.thread_time_ns
    print(f"load average before: {_load()}; clock: {args.clock}")
    import torch

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        profile = quick_profile(Path(tmp) / "profile.json")
        rows = [] if names else training_rows(profile, args.steps) + decode_rows(profile)
        steps = max(args.steps, ARCHITECTURE_STEPS)
        by_batch = architecture_rows(Path(tmp), steps, args.repeats, names)
    print(
        "measured: the fastest step; predicted: each op at its roofs, matmul and attention "
        "shapes at their median call (a step sums many calls, so it gets each one's typical "
        "time, not every call's luckiest); median step beside it"
    )
    _print_rows(rows)
    for b, arch in by_batch.items():
        print(f"\narchitectures of the field, training, batch {b}")
        _print_rows(arch)
        r = [p / m for _w, p, m, *_rest in arch]
        print(f"batch {b}: median predicted/measured {statistics.median(r):.2f}, "
              f"lowest {min(r):.2f}, highest {max(r):.2f} over {len(r)}")  # fmt: skip
    print(f"\n{'expected decode (batch 1)':34} {'published':>10} {'expected':>10} {'error':>7} "
          f"{'ceiling':>9}")  # fmt: skip
    for label, published, expected, ceiling in public_decode_rows():
        print(
            f"{label:34} {published:10.2f} {expected:10.2f} {expected / published - 1:+7.1%} "
            f"{ceiling:9.1f}" + ("" if ceiling > published else "  CEILING BELOW PUBLISHED")
        )
    print(f"load average after: {_load()}")


if __name__ == "__main__":
    main()
