"""Hostile inputs explored: generated trace files, device TOML, `hf:` configs and careless
Python API calls, each run in-process and classified ok / refused (one line) / FAIL.

    PYTHONPATH=src .venv/bin/python benchmarks/hostile_inputs.py [--cases 2400] [--seed 0]

The CI test (`tests/test_fuzz_hostile.py`) runs a fixed few hundred of the same kinds; this
draws new ones (a seed per run) in the proportions below, prints the counts per surface and
every failure, and exits 1 if there was one. Nothing is measured: benchmarks and the report
stop where they would start timing the machine.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from hostile_cases import (
    EVENT,
    Tally,
    api_calls,
    careless_calls,
    hf_configs,
    nothing_measured,
    run_call,
    run_file,
    spec_files,
    trace_files,
)

SHARE = {"trace": 0.25, "spec": 0.2, "hf": 0.2, "api": 0.35}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=2400)
    parser.add_argument("--seed", type=int, default=None)
    a = parser.parse_args()
    seed = a.seed if a.seed is not None else random.randrange(2**32)
    tally = Tally()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        trace = root / "sound.json"
        trace.write_text(json.dumps({"traceEvents": [EVENT]}))
        csv = root / "m.csv"
        csv.write_text("N,time\n1,10\n2,5.6\n4,3.4\n")
        files = {"trace": trace_files(), "spec": spec_files(), "hf": hf_configs()}
        for surface, strategy in files.items():
            count = iter(range(10**9))

            def one(case, surface=surface, count=count):
                name, data = case
                outcome = run_file(surface, name, data, root / f"{surface}{next(count)}")
                tally.add(surface, outcome, f"{name} {data[:160]!r}")

            _explore(strategy, round(a.cases * SHARE[surface]), seed, one)

        def call(case):
            name, args, kwargs = case
            tally.add("api", run_call(name, args, kwargs), f"{name}{args!r} {kwargs!r}")

        with nothing_measured():
            calls = careless_calls(api_calls(str(trace), str(csv)))
            _explore(calls, round(a.cases * SHARE["api"]), seed, call)
    print(f"seed {seed}, {time.monotonic() - t0:.0f} s")
    print(tally.table())
    for failure in tally.failures:
        print("  " + failure)
    return 1 if tally.failures else 0


def _explore(strategy, examples: int, seed: int, run_one) -> None:
    """`run_one` on `examples` draws of `strategy`; failures are tallied, never raised, so
    hypothesis goes on generating (and never shrinks)."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as with_seed

    @with_seed(seed)
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def run(case):
        run_one(case)

    run()


if __name__ == "__main__":
    sys.exit(main())
