"""Fuzz every command's options with valid and hostile values: each run either succeeds or
prints one line on stderr and exits 2 -- never a traceback, never a hang.

Runs in-process (the `cli` fixture) with resource caps so the whole file stays within about a
minute on two cores: small sizes, `--device meta` for profile, threads instead of worker
processes for scale. Sizes that are valid but large (a million workers, a batch of 1e8) are
the subject of the up-front memory and work checks, tested where those live; here the
options that set the amount of work get small valid values and hostile invalid ones.

The examples are derived from a fixed seed (CI sees the same runs every time); set
CEILING_FUZZ_EXAMPLES=N for N examples per command and CEILING_FUZZ_RANDOM=1 to explore.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hostile_cases import deadline as _hang_detector

FLAG = "FLAG"
PER_CALL_DEADLINE_S = 90  # a hang detector, not a speed check

# Values no option should take without a clear one-line refusal.
HOSTILE = [
    "-1",
    "0",
    "nan",
    "inf",
    "-inf",
    "1e308",
    "99999999999999999999",
    "1e-300",
    "10kg",
    "",
    "1,,2",
    "\x1b[31mred",
    "ü",
    "-0.5",
]
# The same, without values that are merely large (options that size the work).
HOSTILE_SMALL = [v for v in HOSTILE if v not in ("1e308", "99999999999999999999", "inf")]


@dataclass
class Command:
    """What to fuzz in one command. `options` reads "--flag --opt=a|b --other=@pool": a flag,
    an option's valid values, or a named pool of them; `positional` likewise, "a|b|@pool"."""

    options: str = ""
    positional: str = ""
    sizes_work: str = ""  # options whose hostile values leave out the merely large ones
    fixed: list[str] = field(default_factory=list)  # resource caps, always given
    skip: dict[str, str] = field(default_factory=dict)  # option -> why it is not fuzzed
    always: str = ""  # options every run gives (required ones)
    examples: int = 25


def _values(text: str, pools: dict[str, list[str]]) -> list[str]:
    out: list[str] = []
    for v in text.split("|"):
        out += pools[v[1:]] if v.startswith("@") else [v]
    return out


def _options(spec: Command, pools: dict[str, list[str]]) -> dict[str, list[str] | str]:
    options: dict[str, list[str] | str] = {}
    for token in spec.options.split():
        name, _, values = token.partition("=")
        options[name] = _values(values, pools) if values else FLAG
    return options


def _pools(files: dict[str, str]) -> dict[str, list[str]]:
    return {
        "plots": [files["png"], files["svg"], "/proc/x.png", files["notdir"], files["txt"]],
        "profiles": [files["profile"], files["binary"], files["newer"], "/dev/zero", "/nope.json"],
        "specs": ["h100-sxm", "a100-80gb", "mi300x", "nope"],
        "fractions": ["0.9", "0.5", "1", "0", "0.999"],
        "counts": ["8", "1,2,4", "64", "1024"],
        "times": ["1ms", "2", "0.5s", "10us", "1,2,3,4"],
        "csvs": [files[k] for k in ("csv", "one_row", "binary", "dir")]
        + ["/dev/null", "/dev/zero", "/nope.csv"],
        "traces": ["/nope.json", files["binary"], files["empty_json"], files["dir"]],
    }


LAWS = Command(
    positional="@fractions",
    options="--parallel=@fractions --serial=@fractions -n=@counts --json --plot=@plots",
)
SCALE_SKIPS = {
    "--backend": "threads: worker processes are scale's own tests",
    "--device": "cpu",
    "--model": "ddp workload only",
    "--batch": "ddp workload only",
    "--seq": "ddp workload only",
    "--size": "matmul workload only",
    "--comm-bytes": "needs worker processes",
    "--threads-per-worker": "worker processes only",
}

COMMANDS = {
    "amdahl": LAWS,
    "gustafson": LAWS,
    "info": Command(options="--json", examples=2),
    "specs": Command(
        positional="h100-sxm|nope|a100-80gb", options="--template --json", examples=10
    ),
    "models": Command(positional="llama-3-8b|nope|gpt:tiny", options="--json", examples=8),
    "roofline": Command(
        options="--op=matmul:64|add:1000|matmul:4096x4096x4096|bogus "
        "--dtype=fp32|bf16|fp8|int4|zz --spec=@specs --profile=@profiles --json --plot=@plots",
        skip={"--measure": "measures this machine (roofline tests cover it)"},
    ),
    "decode": Command(
        positional="gpt:tiny|llama-3-8b|nope|custom:layers=2,hidden=64,heads=4",
        options="--spec=@specs --profile=@profiles --batch=1|8|1,64 --context=0|2048|4k "
        "--prompt=128|1k --weights=bf16|int8|int4|zz --kv-dtype=bf16|fp8 "
        "--activations=bf16|fp32 --tp=1|2|8 --json --plot=@plots",
        always="--spec",
        skip={
            "--measure": "runs the model (decode --measure tests, with memory checks)",
            "--device": "only used with --measure",
        },
    ),
    "serve": Command(
        positional="llama-3-8b|gpt:tiny|nope|mixtral-8x7b",
        options="--spec=@specs --profile=@profiles --gpus=1|2|8 --tp=1|2|8 --pp=1|2 "
        "--replicas=1|2 --weights=bf16|fp8|awq|gptq|mxfp4|zz --kv-dtype=bf16|fp8 "
        "--activations=bf16|fp32 --input-tokens=128|1000 --output-tokens=16|64 "
        "--dataset=sharegpt|nope --requests=@csvs --rate=1|20|0.5 --concurrency=1|8 "
        "--ramp-up=0|2s|-1|zz "
        "--offline=10|20 --max-num-seqs=4|256 --max-batched-tokens=512|8192 "
        "--scheduler-steps=1|10|0 "
        "--no-chunked-prefill --chunked-prefill --prefix-hit-rate=0|0.5|0.99 "
        "--speculative=ngram|gpt:tiny|nope --spec-tokens=0|3 --acceptance=0|0.7 --reserve-kv "
        "--slo=ttft_p99=2s,tpot_p99=200ms|ttft_p50=1ms|e2e_p99=zz|x=1 --target-rate=5|50 "
        "--seed=0|7 --engine=generic|vllm|sglang|trtllm|transformers|nope "
        "--memory-utilization=0.9|0.5|1.5 "
        "--deadlines=connect=1s|idle=0|run=zz|x=1s --calibrate=@traces "
        "--json --plot=@plots",
        sizes_work="--gpus --replicas --input-tokens --output-tokens --concurrency --offline "
        "--max-num-seqs --max-batched-tokens --spec-tokens --target-rate --num-requests --rate "
        "--scheduler-steps",
        fixed=["--num-requests", "20"],
        examples=15,
        always="--spec",
        skip={
            "--measure": "sends requests to a server (test_serve_measure starts one on loopback)",
            "--num-requests": "fixed at 20: the size of every run",
        },
    ),
    "plan": Command(
        positional="llama-3-8b|gpt:tiny|nope",
        options="--gpus=8|64|1024 --spec=@specs --profile=@profiles --gpus-per-node=8|4 "
        "--global-batch=64|1024 --seq=2048|4096 --top=1|5 --fixed=tp=2|pp=2 "
        "--attention=flash|unfused --dropout --no-dp-overlap --headroom=0.1|0.5 "
        "--matmul-efficiency=0.5|0.9 --intra-bw=900GB/s --inter-bw=50GB/s|1B/s "
        "--dtype=bf16|fp8|zz --tokens=1T|15e12 --scaling=0|3 --loss=eager|fused|zz "
        "--calibrate=@traces --framework=megatron|torchtitan|nemo|maxtext|deepspeed|zz "
        "--attention-kernel=fa2|fa3|cudnn|zz --moe-dispatcher=alltoall|deepep|zz "
        "--moe-imbalance=1|1.5|0.5 --moe-node-limit=0|4|-1 --cuda-graphs --no-cuda-graphs "
        "--moe-fusion --no-moe-fusion --host-kernel-us=0|10|-1|zz --step-jitter=0|0.05|1|zz "
        "--json --plot=@plots",
        always="--gpus --spec",
    ),
    "profile": Command(
        positional="gpt:tiny|mlp|nope|custom:layers=1,hidden=32,heads=2",
        options="--train --dtype=fp32|bf16|zz --spec=@specs --profile=@profiles --batch=1|4 "
        "--seq=8|16 --steps=1|2 --top=3|12 --timeout=60 --json --plot=@plots --compile",
        sizes_work="--batch --seq --steps --timeout",
        fixed=["--device", "meta"],
        skip={"--device": "fixed to meta: counts without running"},
        examples=10,
    ),
    "step": Command(
        positional="mlp|nope",
        options="--slow-data --data-delay-ms=0|1 --dtype=fp32|zz --batch=2|4 --steps=1|2 "
        "--threads=1 --json --plot=@plots",
        sizes_work="--data-delay-ms --batch --steps --threads",
        fixed=["--workers", "0"],
        skip={
            "--workers": "fixed to 0: loader worker processes are step's own tests",
            "--device": "cpu only here",
        },
        examples=8,
    ),
    "scale": Command(
        positional="synthetic|python|nope",
        options="--workers=1|1,2|2 --mode=strong|weak|zz --steps=1|2 --warmup=0|1 "
        "--imbalance=0|0.2 --serial=0.1|0.5 --work-ms=1|2 --iterations=1000 --timeout=60 "
        "--stall-timeout=30 --predict=8|16,32 --json --plot=@plots",
        sizes_work="--workers --steps --warmup --work-ms --iterations --timeout --stall-timeout",
        fixed=["--backend", "threads", "--work-ms", "1", "--iterations", "1000"],
        skip=SCALE_SKIPS,
        examples=10,
    ),
    "fit": Command(
        positional="@csvs",
        options="--mode=strong|weak|zz --weak --time-unit=s|ms|zz --predict=16|8,64 --json "
        "--plot=@plots",
    ),
    "repeat": Command(
        positional="matmul|reduction|nope|nope:nothing",
        options="--runs=2|3 --threads=1|1,2 --no-deterministic-check --timeout=60 --json",
        sizes_work="--runs --threads --timeout",
        skip={"--deterministic-check": "its negation is fuzzed"},
        examples=12,
    ),
    "trace": Command(
        positional="@traces",
        options="--spec=@specs --profile=@profiles --dtype=bf16|zz --top=3|10 --workers=1|2|0 "
        "--json --plot=@plots --verbose --critical-path "
        "--what-if=gemm=2x,comm=overlap|launch=3us|link=400GB/s|gemm=0x|zz=1|link=0GB/s",
        skip={"--dask": "starts a cluster: tests/test_dask_peers.py runs it against hostile peers"},
        examples=20,
    ),
    "simulate pipeline": Command(
        options="--stages=1|4|8 --micro-batches=1|8|32 --schedule=gpipe|1f1b|interleaved|zz "
        "--chunks=1|2 --forward=@times --backward=@times --p2p=0|1ms --json --plot=@plots",
        sizes_work="--stages --micro-batches --chunks",
    ),
    "simulate straggler": Command(
        options="--workers=1|64|1024 --step=1s|10ms --slow=1|1.5|3 --slow-count=0|1|8 "
        "--jitter=0|0.1 --allreduce=0|5ms --seed=0|7 --json --plot=@plots",
        sizes_work="--workers",
    ),
}


# Commands left out, and why.
NOT_FUZZED = {
    "report": "measures the machine for minutes; its inputs are checked by test_report_cli",
    "bench": "measures the machine; its inputs are checked by test_bench_cli",
    "validate": "predicts the whole corpus (a minute or more); its inputs are checked by "
    "test_validation",
}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    import json

    from ceiling.hardware.profile import MachineProfile, MeasuredDevice

    d = tmp_path_factory.mktemp("fuzz")
    (d / "m.csv").write_text("N,time\n1,10\n2,5.6\n4,3.4\n8,2.35\n")
    (d / "one.csv").write_text("N,time\n1,10\n")
    (d / "blob.bin").write_bytes(bytes(range(256)) * 4)
    (d / "a-file").write_text("x")
    (d / "empty.json").write_text("{}")
    device = MeasuredDevice(
        name="cpu", kind="cpu", peak_flops_per_s={"fp32": 2e11}, bandwidth_bytes_per_s=2e10
    )
    profile = MachineProfile(
        method_version=2, created="2026-01-01", host="h", environment={}, devices=[device]
    ).to_json()
    (d / "profile.json").write_text(json.dumps(profile))
    (d / "newer.json").write_text(json.dumps({**profile, "method_version": 99}))
    return {
        "csv": str(d / "m.csv"),
        "one_row": str(d / "one.csv"),
        "binary": str(d / "blob.bin"),
        "empty_json": str(d / "empty.json"),
        "dir": str(d),
        "profile": str(d / "profile.json"),
        "newer": str(d / "newer.json"),
        "png": str(d / "f.png"),
        "svg": str(d / "f.svg"),
        "txt": str(d / "f.txt"),
        "notdir": str(d / "a-file" / "f.png"),
    }


def _value(draw, valid: list[str], hostile: list[str]) -> str:
    """A valid value three times in four, so that runs get past the first check."""
    pool = hostile if draw(st.integers(0, 3)) == 0 else valid
    return draw(st.sampled_from(pool))


@st.composite
def invocations(draw, name: str, spec: Command, pools: dict[str, list[str]]) -> list[str]:
    args = name.split()
    if spec.positional:
        args.append(_value(draw, _values(spec.positional, pools), HOSTILE))
    options = _options(spec, pools)
    always = spec.always.split()
    optional = sorted(set(options) - set(always))
    chosen = [*always, *draw(st.lists(st.sampled_from(optional), unique=True, max_size=4))]
    for opt in chosen:
        valid = options[opt]
        if valid == FLAG:
            args.append(opt)
            continue
        hostile = HOSTILE_SMALL if opt in spec.sizes_work.split() else HOSTILE
        args += [opt, _value(draw, list(valid), hostile)]
    return args + spec.fixed


TALLY: dict[str, dict[str, int]] = {}


def _examples(spec: Command) -> int:
    return int(os.environ.get("CEILING_FUZZ_EXAMPLES", spec.examples))


COMMAND_NAMES = list(COMMANDS)


@pytest.mark.slow
@pytest.mark.parametrize("name", COMMAND_NAMES)
def test_every_run_succeeds_or_says_one_line(cli, files, name, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # anything a command writes by default lands here
    monkeypatch.setenv("CEILING_PROFILE", files["profile"])  # not this machine's own profile
    spec, pools = COMMANDS[name], _pools(files)
    tally = TALLY.setdefault(name, {"tried": 0, "clean": 0, "ok": 0})

    @settings(
        max_examples=_examples(spec),
        deadline=None,
        derandomize=not os.environ.get("CEILING_FUZZ_RANDOM"),
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(argv=invocations(name, spec, pools))
    def run(argv):
        with _hang_detector(PER_CALL_DEADLINE_S):
            code, _out, err = cli(*argv)
        tally["tried"] += 1
        lines = err.strip().splitlines()
        ok = code == 0 and "Traceback" not in err
        refused = code == 2 and len(lines) == 1 and lines[0].startswith(("error:", "warning:"))
        assert ok or refused, (argv, code, err[-2000:])
        tally["clean"] += 1
        tally["ok"] += ok

    run()
    print(f"\nfuzz {name}: tried {tally['tried']}, clean {tally['clean']}, ok {tally['ok']}")


def test_every_option_of_every_command_is_fuzzed_or_excluded_with_a_reason(files):
    """A new option cannot slip past the fuzzing unnoticed."""
    import typer.main

    from ceiling.cli.app import app

    root = typer.main.get_command(app)
    pools = _pools(files)
    seen = set()

    def walk(command, path):
        for sub_name, sub in getattr(command, "commands", {}).items():
            walk(sub, [*path, sub_name])
        if getattr(command, "commands", None):
            return
        name = " ".join(path)
        if path[0] in NOT_FUZZED:
            return
        assert name in COMMANDS, f"`ceiling {name}` is neither fuzzed nor in NOT_FUZZED"
        seen.add(name)
        spec = COMMANDS[name]
        for param in command.params:
            if not param.opts[0].startswith("-") or param.opts[0] in ("--help",):
                continue
            names = set(param.opts) | set(getattr(param, "secondary_opts", []))
            covered = set(_options(spec, pools)) | set(spec.skip) | set(spec.fixed)
            assert names & covered, (
                f"`ceiling {name}` {param.opts[0]} is neither fuzzed nor skipped with a reason"
            )

    walk(root, [])
    assert seen == set(COMMAND_NAMES)
