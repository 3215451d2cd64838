#!/usr/bin/env bash
# Validate every GPU path of ceiling on one CUDA machine (made for an NVIDIA H200), offline.
#
# Runs, in order of importance, each under its own time cap and one overall deadline
# (H200_DEADLINE_S, default 480 s, so the whole script ends in about 8 minutes):
#   ceiling info; ceiling bench (full: every dtype incl. fp8, memory, overhead with the
#   CPU<->GPU crossover, transfers) on cuda; a plain torch.mm bf16 8192^3 loop timed with CUDA
#   events as the reference, with the acceptance checks; the gpu-marked tests; ceiling
#   roofline --measure on the seed's three ops; ceiling bench --quick on the CPU (same
#   profile file, so the profile holds the CPU beside the GPU); ceiling profile gpt:small
#   --train on cuda; ceiling decode gpt:small --measure on cuda.
# Writes at most 8 files, all directly under $OUT (default ./h200-out):
#   log.txt  info.json  bench.json  profile.json  summary.json  roofline.json
#   profile_gpt.json  decode.json
# Needs python3 with torch (CUDA), numpy, scipy, matplotlib, rich, psutil, pytest and typer
# (any typer: before 0.29 it runs on click, from 0.29 on its own copy of click, which needs
# pydantic at parse time). If typer is missing, carry a wheel in .whl/ (ignored by git):
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#     --implementation cp --platform manylinux2014_x86_64 -d .whl typer==0.29.2
# and the script installs it into /tmp/site first. Exit status: 0 when every acceptance
# check in summary.json passed, 1 otherwise (the other steps' failures are in the log).

set -u -o pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:-$REPO/h200-out}"
PY="${PYTHON:-python3}"
DEADLINE_S="${H200_DEADLINE_S:-480}"
mkdir -p "$OUT"
LOG="$OUT/log.txt"
: >"$LOG"

export PYTHONUNBUFFERED=1 MPLBACKEND=Agg
export CEILING_PROFILE="$OUT/profile.json"
if compgen -G "$REPO/.whl/*.whl" >/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site "$REPO"/.whl/*.whl >>"$LOG" 2>&1 && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$REPO/src${PYTHONPATH:+:$PYTHONPATH}"
cd "$REPO" || exit 1

say() { echo "== $* (t=${SECONDS}s)" | tee -a "$LOG"; }

# step NAME CAP_S STDOUT_FILE CMD...: run CMD with at most CAP_S seconds (less if the
# deadline is nearer); stdout to STDOUT_FILE ('-' = the log), stderr always to the log.
step() {
    local name="$1" cap="$2" dest="$3"
    shift 3
    local left=$((DEADLINE_S - SECONDS))
    local limit=$((cap < left ? cap : left))
    if ((left < 15)); then
        say "$name: SKIPPED, only ${left}s left before the deadline"
        return 0
    fi
    say "$name (at most ${limit}s)"
    local rc
    if [[ "$dest" == "-" ]]; then
        timeout -k 10 "$limit" "$@" >>"$LOG" 2>&1
        rc=$?
    else
        timeout -k 10 "$limit" "$@" >"$dest" 2>>"$LOG"
        rc=$?
    fi
    if ((rc == 124 || rc == 137)); then
        say "$name: TIMED OUT after ${limit}s"
    elif ((rc != 0)); then
        say "$name: exit status $rc"
    fi
    return 0
}

CEILING=("$PY" -m ceiling)  # an array, so `timeout` can run it (it cannot run a function)

say "machine"
{
    nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.sm,driver_version \
        --format=csv 2>&1 || echo "nvidia-smi not available"
    "$PY" -c "import torch, typer; print('torch', torch.__version__, 'cuda', torch.version.cuda)
print('typer', typer.__version__)" 2>&1 || true
} >>"$LOG"
"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" || {
    say "no CUDA device visible to torch: nothing to validate"
    exit 1
}

step "ceiling info" 60 - "${CEILING[@]}" info
step "ceiling info --json" 60 "$OUT/info.json" "${CEILING[@]}" info --json
step "ceiling bench (full, cuda)" 240 "$OUT/bench.json" "${CEILING[@]}" bench --device cuda --json
step "reference torch.mm loop and checks" 90 - \
    "$PY" benchmarks/h200_reference.py --bench "$OUT/bench.json" --out "$OUT/summary.json"
step "gpu-marked tests" 150 - "$PY" -m pytest -q -m gpu -p no:cacheprovider \
    --continue-on-collection-errors tests
step "ceiling roofline --measure (fp32, seed ops)" 90 "$OUT/roofline.json" \
    "${CEILING[@]}" roofline --op add:100000000 --op matvec:8192 --op matmul:4096x4096x4096 \
    --measure --json
step "ceiling roofline --measure (bf16)" 60 - "${CEILING[@]}" roofline --dtype bf16 \
    --op add:100000000 --op matvec:8192 --op matmul:8192x8192x8192 --measure
step "ceiling bench --quick (cpu)" 90 - "${CEILING[@]}" bench --device cpu --quick
step "ceiling profile gpt:small --train (cuda)" 90 "$OUT/profile_gpt.json" \
    "${CEILING[@]}" profile gpt:small --train --device cuda --dtype bf16 --json
step "ceiling decode gpt:small --measure (cuda)" 90 "$OUT/decode.json" \
    "${CEILING[@]}" decode gpt:small --measure --device cuda --json

say "files"
ls -la "$OUT" >>"$LOG" 2>&1
if [[ -s "$OUT/summary.json" ]]; then
    "$PY" - "$OUT/summary.json" <<'EOF' | tee -a "$LOG"
import json, sys
s = json.load(open(sys.argv[1]))
ok = all(c["pass"] for c in s["checks"].values())
for name, c in s["checks"].items():
    print(("PASS " if c["pass"] else "FAIL ") + name, c.get("value"))
sys.exit(0 if ok else 1)
EOF
    exit $?
fi
say "no summary.json: the bench or the reference step failed (see the log)"
exit 1
