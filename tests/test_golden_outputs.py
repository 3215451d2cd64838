"""The `--json` of representative commands equals the output captured before a redesign.

Every command here is pure arithmetic over catalog data (no measurement of this machine), so
its output is the same on any machine. Fields changed on purpose are listed in CHANGED with
why; everything else must match to float noise.

Recapture (only when a change is meant, and say why in CHANGED):
    PYTHONPATH=<tree of the reference commit>/src python tests/test_golden_outputs.py --capture
"""

from __future__ import annotations

import contextlib
import fnmatch
import io
import json
import math
import sys
from pathlib import Path

import pytest

GOLDEN = Path(__file__).parent / "golden"

COMMANDS: dict[str, list[str]] = {
    "plan-llama3-8b-h100-64": ["plan", "llama-3-8b", "--spec", "h100-sxm", "-n", "64"],
    "plan-llama3-70b-h100-512-tokens": [
        "plan", "llama-3-70b", "--spec", "h100-sxm", "-n", "512", "--tokens", "1T", "-k", "3",
    ],
    "plan-gpt3-a100-fixed": [
        "plan", "gpt3-175b", "--spec", "a100-80gb", "-n", "1024",
        "--fixed", "t=8,p=8,recompute=full", "-k", "3",
    ],
    "plan-custom-zero3-flash": [
        "plan", "custom:layers=24,hidden=2048,heads=16,ffn_hidden=8192,vocab=50304",
        "--spec", "a100-40gb", "-n", "16", "--fixed", "zero=3", "--attention", "flash",
        "--seq", "2048", "-k", "3",
    ],
    "plan-mixtral-scaling": [
        "plan", "mixtral-8x7b", "--spec", "h100-sxm", "-n", "64", "--scaling", "1", "-k", "2",
    ],
    "plan-llama2-7b-fp8-slow-links": [
        "plan", "llama-2-7b", "--spec", "h100-sxm", "-n", "32", "--dtype", "fp8",
        "--intra-bw", "100GB/s", "--inter-bw", "12.5GB/s", "--no-dp-overlap", "-k", "3",
    ],
    "decode-llama3-8b-h100": ["decode", "llama-3-8b", "--spec", "h100-sxm"],
    "decode-llama3-70b-tp8-ctx": [
        "decode", "llama-3-70b", "--spec", "h100-sxm", "--tp", "8",
        "--context", "4096", "--batch", "1,16,128",
    ],
    "decode-mixtral-int4": [
        "decode", "mixtral-8x7b", "--spec", "a100-80gb", "--weights", "int4",
        "--activations", "fp16", "--prompt", "512",
    ],
    "decode-custom-fp8-kv": [
        "decode", "custom:layers=16,hidden=2048,heads=16,kv_heads=4,ffn_kind=swiglu",
        "--spec", "l40s", "--weights", "fp8", "--kv-dtype", "fp8", "--context", "2048",
    ],
    "roofline-h100-bf16": [
        "roofline", "--spec", "h100-sxm", "--dtype", "bf16", "--op", "add:100M",
        "--op", "matvec:8192", "--op", "matmul:4096x4096x4096",
    ],
    "roofline-a100-attention": [
        "roofline", "--spec", "a100-80gb", "--dtype", "fp16",
        "--op", "attention:8,32,2048,128", "--op", "matmul:1x4096x4096",
    ],
    "simulate-pipeline-1f1b": ["simulate", "pipeline"],
    "simulate-pipeline-interleaved": [
        "simulate", "pipeline", "-p", "4", "-m", "8", "--schedule", "interleaved", "-v", "2",
        "--p2p", "50ms",
    ],
    "simulate-pipeline-gpipe-uneven": [
        "simulate", "pipeline", "-p", "3", "-m", "4", "--schedule", "gpipe",
        "--forward", "10ms,12ms,8ms", "--backward", "20ms,25ms,15ms",
    ],
    "simulate-straggler": [
        "simulate", "straggler", "-n", "16", "--slow", "1.5", "--slow-count", "2",
        "--jitter", "0.05", "--seed", "3", "--allreduce", "100ms",
    ],
    "fit-strong": ["fit", "{golden}/scaling_times.csv", "--predict", "64,128"],
    "fit-weak": ["fit", "{golden}/scaling_weak.csv", "--mode", "weak"],
    "amdahl-default": ["amdahl", "0.95"],
    "amdahl-workers": ["amdahl", "0.99", "-n", "8", "-n", "64", "-n", "1000"],
    "gustafson": ["gustafson", "--serial", "0.05", "-n", "4", "-n", "256"],
    "specs-h100": ["specs", "h100-sxm"],
    "specs-mi300x": ["specs", "mi300x"],
    "models": ["models"],
    "profile-gpt-tiny-meta": ["profile", "gpt:tiny", "--device", "meta", "--spec", "h100-sxm"],
    "profile-llama2-7b-meta-train": [
        "profile", "llama-2-7b", "--device", "meta", "--train", "--dtype", "bf16",
        "--spec", "h100-sxm", "--batch", "1", "--seq", "512",
    ],
}  # fmt: skip

# Fields whose values changed on purpose since the capture: command -> {path glob: why}.
# Paths are dotted (`plans.0.step_s`); `*` matches any part. A listed path may also be absent
# on one side (a field added or removed on purpose). Entries merge: add, never overwrite.
CHANGED: dict[str, dict[str, str]] = {}


def _change(names, why: str, *globs: str) -> None:
    for name in [names] if isinstance(names, str) else names:
        CHANGED.setdefault(name, {}).update(dict.fromkeys(globs, why))


_PLANS = [n for n in COMMANDS if n.startswith("plan-")]
_DECODES = [n for n in COMMANDS if n.startswith("decode-")]
_PROFILES = [n for n in COMMANDS if n.startswith("profile-")]
_SPECS = ["specs-h100", "specs-mi300x"]

_change(
    _SPECS,
    "specs says where an entry comes from (shipped catalog, CEILING_CATALOG, a file)",
    "origin",
)
_change(_SPECS, "specs shows the node and network defaults the planner takes", "cluster_defaults*")
_change(
    _SPECS,
    "specs shows the host link (PCIe) of each device and its source",
    "pcie_bandwidth_bytes_per_s_one_way",
    "sources.pcie_bandwidth_bytes_per_s",
)
_change(
    _SPECS,
    "each entry names its architecture (CUDA compute capability, AMD's gfx target), which "
    "identifies a trace's device when the driver's name is not in the catalog, with its source",
    "compute_capability",
    "gcn_arch",
    "sources.compute_capability",
    "sources.gcn_arch",
)
_change(
    _PLANS,
    "every output says which device rule picked its device (datasheet or profile)",
    "cluster.device_source",
    "scaling.*.cluster.device_source",
)
_change(
    _DECODES,
    "every output says which device rule picked its device (datasheet or profile)",
    "device_source",
)
_change(
    _DECODES,
    "the largest batch that fits is given at a stated context (4096 when "
    "--context is not given: at context 0 it counted one-token sequences)",
    "max_batch",
    "max_batch_context",
)
_change(_DECODES, "decode shows an expected speed beside the ceiling", "expected*")
_change(
    _DECODES,
    "each row says whether its batch fits (weights + KV cache): a batch past the memory is "
    "kept and marked 'does not fit' rather than the whole sweep refused",
    "rows.*.fits",
)
_change(
    ["decode-llama3-8b-h100", "decode-mixtral-int4"],
    "decode without --context prices a stated 4,096-token context (the model's maximum when "
    "shorter) and a prompt of that length: at context 0 the KV cache was empty, and batch 256 "
    "was shown at a speed the memory cannot hold; every figure that reads the context follows",
    "context",
    "prompt_tokens",
    "kv_bytes_per_sequence",
    "crossover_batch_with_kv",
    "rows",
    "rows.*",
    "expected.rows",
    "expected.rows.*",
    "notes",
    "notes.*",
)
_change(
    _PROFILES,
    "profile lists ops it cannot count, so a low MFU is not read as exact",
    "unknown_ops",
    "mfu_is_lower_bound",
)
_change(
    _PROFILES,
    "model FLOPs beside the causal count, full attention",
    "model_flops_per_step_full_attention",
)
_change(
    _PROFILES,
    "profile shows every roof it places ops under (the overhead roof added) and "
    "the figures it can draw (the step waterfall added)",
    "roofs*",
    "figures*",
)
_change(
    _PROFILES,
    "profile says whether the model is compiled (torch.compile) and lists the compiled "
    "graph's generated kernels when it is",
    "compiled",
    "compiled_kernels",
)
_change(
    _PROFILES,
    "a compiled model's step is predicted from its kernels (each with its bytes, FLOPs and "
    "predicted time) beside the measured step; null for an eager model",
    "compiled_step",
)
_change(
    "plan-llama2-7b-fp8-slow-links",
    "pipeline sends that cross nodes are costed at the "
    "inter-node link: with t·d = 4 on 8-device nodes, 3 of the 7 hops of a p = 8 pipeline "
    "cross (they were costed intra-node)",
    "plans.*",
)
_change(
    "decode-llama3-70b-tp8-ctx",
    "decode prices its tensor-parallel all-reduces as plan "
    "does (per-step latency and collective efficiency, ring or tree by size); it used link "
    "bandwidth only",
    "rows.*",
    "notes.0",
)
_change(
    "plan-llama3-8b-h100-64",
    "a small all-reduce (d = 2, expert-free layers) takes the tree when it is faster",
    "plans.4.*",
)
_change(
    "gustafson",
    "gustafson's positional argument is the parallel fraction p, as amdahl's; "
    "it states p beside the serial share",
    "alpha",
    "p",
    "rows.*",
)
_change(
    ["fit-strong", "fit-weak"],
    "fit states the time unit of its file and the limits in that unit",
    "time_unit",
    "limits",
)
_change("fit-strong", "Gustafson's law is fitted to weak-scaling data only", "fit.gustafson")
_change(
    _PROFILES,
    "one MFU: against the dense datasheet (theoretical, CPU) peak; the share of a measured "
    "matmul rate beside it is 'of achievable', never called the peak",
    "mfu_vs_measured_peak",
    "mfu_of_achievable",
)
_change(
    "fit-weak",
    "the weak-scaling USL κ sits at its bound 0 (± 4e-4): its digits, and the "
    "N* and peak derived from it, follow the optimizer's path (the fit now runs on "
    "rescaled data)",
    "fit.usl.kappa",
    "fit.usl.n_star",
    "fit.usl.peak_*",
    "warnings.0",
)
_change(
    _PLANS,
    "planner v2 time model: GEMMs at the matmul efficiency times their tile utilisation over "
    "the SMs, causal attention blocks at the fused kernel's own efficiency, FP8 for the "
    "linear layers only (--dtype fp8 pins fp8=linear) with its casts, context parallelism "
    "(cp, searched: devices = d·t·p·cp) and overlap switches (tp_overlap, cp_overlap, "
    "prefetch) with the hidden communication beside the exposed; every plan's figures, the "
    "ranking and the count of valid plans follow (one plan per d×t×p×cp layout)",
    "plans",
    "plans.*",
    "scaling.*",
    "evaluated",
    "fitting",
    "assumptions.tp_overlap",
    "assumptions.attention_efficiency",
    "assumptions.gemm_shape",
    "cluster.attention_efficiency",
    "cluster.fp8_matmul_efficiency",
    "cluster.sources.attention",
    "fixed.fp8",
    "cluster.dtype",
    "cluster.peak_flops_per_s",
)
_change(
    _PLANS,
    "planner v2 pipeline and memory model: stage layouts (first/last stage layers, the "
    "balanced rule) and interleaving up to the layers per stage are searched, with recompute "
    "of N layers per stage and of chosen ops; the pipeline's fill and drain count each other "
    "stage's own time (the output layer and the loss only on the last), memory is the "
    "heaviest stage's, and every plan says its stage layers, the heaviest stage, the logits "
    "and rebuilt-layer memory and the recompute time",
    "plans",
    "plans.*",
    "scaling.*",
    "evaluated",
    "fitting",
)
_change(
    _PLANS,
    "the loss kernel (--loss, fp32 by default) sets the logits' memory on the last stage: "
    "Megatron's in-place fp32 softmax holds 6 bytes per token per vocabulary entry at its "
    "peak, not 4 (the 16-bit logits or gradient beside the fp32 buffer); a rebuilt layer's "
    "working set no longer adds to the loss's peak (it comes after); ZeRO-3 holds the output "
    "layer gathered at the loss",
    "assumptions.loss",
)
_change(
    _PLANS,
    "FP8 GEMMs plan at their own share of the FP8 peak: the 16-bit share times the device's "
    "published FP8/16-bit GEMM ratio (clusters.toml, with its source), shown with where it "
    "comes from; FP8 plans' times follow",
    "assumptions.fp8_matmul_efficiency",
    "assumptions.fp8_efficiency_source",
    "cluster.fp8_matmul_ratio",
    "cluster.sources.fp8",
)
_change(
    ["simulate-pipeline-1f1b", "simulate-pipeline-interleaved", "simulate-pipeline-gpipe-uneven"],
    "simulate pipeline shows the closed form the planner uses for unequal stages, "
    "m·max(t) + (Σt − max t)/v, beside the simulated step (null for gpipe)",
    "makespan_closed_form_s",
)
_change(
    _PLANS,
    "the attention kernel is one documented default for every model, wherever it comes from "
    "(catalog, custom:, hf:): flash, unless --attention says otherwise; dropout follows the "
    "model's config. Each says where it came from (it was one 'published training recipe' "
    "that hf: and catalog models of the same shapes answered differently)",
    "assumptions.attention_and_dropout_from",
    "assumptions.attention_from",
    "assumptions.dropout_from",
)
_change(
    "plan-gpt3-a100-fixed",
    "GPT-3 175B takes the default attention kernel (flash) like every model; it took the "
    "unfused Megatron-LM kernels as its catalog recipe (--attention unfused gives them)",
    "assumptions.attention",
)

_change(
    "models",
    "the catalog adds the mixture-of-experts, latent-attention and local-attention families "
    "(DeepSeek-V2/V3/R1, Kimi-K2, Qwen1.5-MoE, gpt-oss, Llama 4, Gemma 3), each with its "
    "layer layout",
    "deepseek-*",
    "kimi-k2",
    "kimi-k2.*",
    "qwen1.5-moe-a2.7b",
    "qwen1.5-moe-a2.7b.*",
    "gpt-oss-*",
    "llama-4-*",
    "gemma-3-*",
)
_change(
    "models",
    "the catalog adds the Qwen3 family as published (dense 0.6B to 32B, 30B-A3B and "
    "235B-A22B mixtures of experts), the models the MoE recipes of today train",
    "qwen3-*",
)
_change(
    "models",
    "Mistral 7B's sliding window of 4096 in every layer is modelled (its cache and each "
    "query's keys bounded by it), no longer a note",
    "mistral-7b.sliding_window",
    "mistral-7b.local_layers",
    "mistral-7b.source",
)
_change(
    _PLANS,
    "the attention kernel's rate is said: on Hopper its published curve by head dim, causal "
    "mask and per-device length (FlashAttention-3 paper), elsewhere one share per device",
    "assumptions.attention_kernel",
)
_change(
    "plan-mixtral-scaling",
    "a mixture of experts says how it routes: the busiest expert rank's share (default 1.25) "
    "and the dispatcher; its expert GEMMs, routing and all-to-alls are priced apart",
    "assumptions.moe",
)

_change(
    _PLANS,
    "the plan says how the host launches the layers' kernels (eager or CUDA graphs, the MoE "
    "router and permutation fused or not, µs a kernel): a layer whose kernels take longer to "
    "launch than to run is host-bound, its wait a part of the step (time_breakdown_s.host_s)",
    "assumptions.host",
)

_change(
    _PLANS,
    "every plan row carries its error band: the regime it falls in and that regime's median "
    "and p90 |error| on published runs, scored leave-one-source-out (`ceiling validate`)",
    "plans.*.accuracy*",
    "scaling.*.best.accuracy*",
)
_change(
    _DECODES,
    "every decode row, expected and ceiling, carries its error band (`ceiling validate`)",
    "accuracy*",
    "rows.*.accuracy*",
    "expected.rows.*.accuracy*",
)
_change(
    _DECODES,
    "a GEMM of at most 16 rows (decode at a small batch) pads to the tensor cores' 16-row MMA "
    "as skinny split-K kernels do, not to a 64-row tile: quantised weights are no longer "
    "slower than 16-bit ones at batch 1",
    "expected.rows.*",
)
_change(
    _PROFILES,
    "a profile records the machine's load while its steps ran (null on meta: nothing ran) and "
    "whether other work shared the machine",
    "load",
    "busy",
    "busy_reasons",
)

_change(
    _PLANS,
    "a plan names the framework whose defaults it plans (megatron unless --framework says "
    "otherwise) with each default it applied, and says what the straggler part of the step "
    "is, its size at this cluster and how to set it (--step-jitter), and the facts of the "
    "model's config it used",
    "assumptions.model_facts",
    "assumptions.model_facts.*",
    "assumptions.framework",
    "assumptions.framework_defaults",
    "assumptions.framework_defaults.*",
    "assumptions.straggler",
)
_change(
    "plan-mixtral-scaling",
    "a mixture of experts plans Megatron-Core's MoE recipes' expert tensor parallelism 1 "
    "(etp=1 pinned by the default framework's recipe, unless --fixed pins another)",
    "fixed.etp",
)

# Facts about the machine that ran the command, not results: never compared.
MACHINE = ("environment", "environment.*")

REL = 1e-9
# An iterative least-squares fit agrees only to its convergence tolerance: rescaling the data
# before fitting (so that 1e-300 s fits like 1 s) moves its last digits.
FIT_REL = {"fit-strong": 1e-6, "fit-weak": 1e-6}


def _args(name: str) -> list[str]:
    return [a.replace("{golden}", str(GOLDEN)) for a in COMMANDS[name]] + ["--json"]


def _run_json(args: list[str]) -> object:
    from ceiling.cli.app import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            main(args)
        except SystemExit as exc:
            assert not exc.code, f"exit {exc.code}"
    return _portable(json.loads(out.getvalue()))


def _portable(value: object) -> object:
    """Paths to this checkout's input files written as {golden}/..., the same in any clone."""
    if isinstance(value, str):
        return value.replace(str(GOLDEN), "{golden}")
    if isinstance(value, dict):
        return {k: _portable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_portable(v) for v in value]
    return value


def _allowed(name: str, path: str) -> bool:
    globs = (*MACHINE, *CHANGED.get(name, {}))
    return any(fnmatch.fnmatchcase(path, glob) for glob in globs)


def _diff(name: str, want: object, got: object, path: str = "") -> list[str]:
    """Every difference between two JSON values outside the fields changed on purpose."""
    if _allowed(name, path):
        return []
    if isinstance(want, dict) and isinstance(got, dict):
        out = []
        for key in sorted(set(want) | set(got), key=str):
            sub = f"{path}.{key}" if path else str(key)
            if key not in got or key not in want:
                if not _allowed(name, sub):
                    out.append(f"{sub}: {'missing' if key not in got else 'new'}")
                continue
            out += _diff(name, want[key], got[key], sub)
        return out
    if isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            return [f"{path}: length {len(want)} -> {len(got)}"]
        pairs = enumerate(zip(want, got, strict=True))
        return [d for i, (w, g) in pairs for d in _diff(name, w, g, f"{path}.{i}")]
    if isinstance(want, bool) or isinstance(got, bool):
        return [] if want is got else [f"{path}: {want!r} -> {got!r}"]
    if isinstance(want, (int, float)) and isinstance(got, (int, float)):
        rel = FIT_REL.get(name, REL)
        same = math.isclose(want, got, rel_tol=rel, abs_tol=1e-300) or want == got
        return [] if same else [f"{path}: {want!r} -> {got!r}"]
    return [] if want == got else [f"{path}: {want!r} -> {got!r}"]


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_output_matches_golden(name):
    want = json.loads((GOLDEN / f"{name}.json").read_text())
    got = _run_json(_args(name))
    diffs = _diff(name, want, got)
    assert not diffs, f"{name}: {len(diffs)} fields differ:\n" + "\n".join(diffs[:40])


def test_changed_fields_name_known_commands():
    assert set(CHANGED) <= set(COMMANDS)
    assert all(why.strip() for fields in CHANGED.values() for why in fields.values())


def test_diff_sees_a_change_and_tolerates_float_noise():
    assert _diff("x", {"a": [1.0, 2.0]}, {"a": [1.0, 2.0 * (1 + 1e-12)]}) == []
    assert _diff("x", {"a": [1.0, 2.0]}, {"a": [1.0, 2.1]}) == ["a.1: 2.0 -> 2.1"]
    assert _diff("x", {"a": 1}, {"a": 1, "b": 2}) == ["b: new"]
    assert _diff("x", {"a": True}, {"a": 1}) == ["a: True -> 1"]


def _capture() -> None:
    for name in COMMANDS:
        data = _run_json(_args(name))
        (GOLDEN / f"{name}.json").write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        print(name, file=sys.stderr)


if __name__ == "__main__" and "--capture" in sys.argv:
    _capture()
