"""`ceiling report` about the user's work: a Hugging Face config on a 64-GPU H100 cluster, and
a trace folder. Each page is made once (module fixtures, quick mode, a tiny model, a saved
machine profile so nothing is benchmarked) and its sections must speak of that work; the
verdict's lines each trace to a number in the JSON record."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ceiling.hardware.profile import MachineProfile, MeasuredDevice, save_profile
from ceiling.report.verdict import lookup
from patience import HANG_S
from test_report_sections import TEST_CPU
from test_trace_cuda import cuda_trace

pytestmark = pytest.mark.slow

LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "num_hidden_layers": 2,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "vocab_size": 256,
    "max_position_embeddings": 256,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


def _profile(folder):
    return save_profile(
        MachineProfile(1, "x", "h", {}, [MeasuredDevice(**TEST_CPU)]), folder / "profile.json"
    )


def _report(folder, *args):
    page = folder / "page.html"
    # this machine's profile: given with --profile, or (beside --spec, which names another
    # device) the saved one
    saved = "--spec" in map(str, args)
    mine = _profile(folder)
    env = {**os.environ, "CEILING_PROFILE": str(mine if saved else folder / "none.json")}
    cmd = [sys.executable, "-m", "ceiling", "report", "--quick", "-o", str(page), "--json"]
    proc = subprocess.run(
        [*cmd, *([] if saved else ["--profile", str(mine)]), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=HANG_S,
        cwd=folder,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return page.read_text(encoding="utf-8"), json.loads(proc.stdout)


@pytest.fixture(scope="module")
def model_page(tmp_path_factory):
    folder = tmp_path_factory.mktemp("model")
    config = folder / "tiny-llama"
    config.mkdir()
    (config / "config.json").write_text(json.dumps(LLAMA), encoding="utf-8")
    page, record = _report(
        folder,
        "--model",
        f"hf:{config}",
        "--spec",
        "h100-sxm",
        "--gpus",
        "64",
        "--seq",
        "32",
        "--global-batch",
        "64",
        "--only",
        "mfu,decode,planner",
    )
    return page, record, str(config)


@pytest.fixture(scope="module")
def trace_page(tmp_path_factory):
    folder = tmp_path_factory.mktemp("trace")
    traces = folder / "run-traces"
    traces.mkdir()
    (traces / "rank0.json").write_text(json.dumps(cuda_trace()), encoding="utf-8")
    page, record = _report(folder, "--trace", traces, "--only", "trace,planner")
    return page, record, str(traces)


def _sections(record):
    return {s["key"]: s for s in record["sections"]}


def test_every_section_speaks_of_the_users_model_and_cluster(model_page):
    page, record, config = model_page
    assert record["work"]["model"] == f"hf:{config}" and record["work"]["gpus"] == 64
    secs = _sections(record)
    for key in ("mfu", "decode", "planner"):
        s = secs[key]
        assert s["status"] == "ok", s["reason"]
        assert s["demo"] is False and s["subject"].startswith("Yours:"), s["subject"]
    # one name for the model on the whole page: the config's, not the path given
    assert secs["mfu"]["key_figures"]["model"] == "hf:tiny-llama"
    plan = secs["planner"]["key_figures"]
    assert plan["gpus"] == 64 and plan["device"].startswith("H100")
    assert plan["seq"] == 32 and plan["global_batch"] == 64
    best = plan["best_plan"]
    assert best["d"] * best["t"] * best["p"] * best.get("cp", 1) == 64
    head = secs["decode"]["key_figures"]["headline"]
    assert head["device"].startswith("H100") and not head["demo"]
    # the tiny model is small enough to decode for real here: the measured rows are its own
    assert secs["decode"]["key_figures"]["measured"]["model"] == "hf:tiny-llama"
    assert "Demo:" not in page
    assert all("hf:tiny-llama" in secs[k]["subject"] for k in ("mfu", "decode", "planner"))
    # the figures follow the user's plan: no example pipeline beside a plan without one
    pipe = secs["planner"]["key_figures"]["pipeline"]
    if best["p"] == 1:
        assert pipe is None and "(demo)" not in page
    else:
        assert (pipe["stages"], pipe["micro_batches"]) == (best["p"], best["micro_batches"])
    straggler = secs["planner"]["key_figures"]["straggler"]
    assert straggler is None or straggler["workers"] == best["d"]


def test_the_waterfall_of_that_model_sums_to_its_step(model_page):
    _, record, _ = model_page
    mfu = _sections(record)["mfu"]["key_figures"]
    bars = mfu["waterfall"]
    assert bars[0]["name"].startswith("model FLOPs at the dense peak")
    assert sum(b["seconds"] for b in bars) == pytest.approx(
        _sections(record)["mfu"]["key_figures"]["step_s"], rel=1e-9
    )


def test_modelled_figures_carry_their_validated_error(model_page):
    _, record, _ = model_page
    secs = _sections(record)
    planner = {h["label"]: h for h in secs["planner"]["highlights"]}
    assert planner["predicted MFU"]["kind"] == "modelled"
    assert planner["predicted MFU"]["error"].startswith("±")
    decode = [h for h in secs["decode"]["highlights"] if h["label"].startswith("expected")]
    assert decode and decode[0]["kind"] == "modelled" and decode[0]["error"].startswith("±")
    mfu = {h["label"]: h for h in secs["mfu"]["highlights"]}
    assert all(h["kind"] == "measured" for h in mfu.values())
    # in tables too: the modelled columns are named, and shown hatched on the page
    measured = next(t for t in secs["decode"]["tables"] if "decoding here" in t["title"])
    assert measured["modelled_columns"] == ["expected", "ceiling", "limited by"]
    assert "MFU" in secs["planner"]["tables"][0]["modelled_columns"]


def test_verdict_lines_are_traced_to_json_numbers(model_page, trace_page):
    for _, record, _ in (model_page, trace_page):
        verdict = record["verdict"]
        assert 1 <= len(verdict) <= 3
        secs = _sections(record)
        for line in verdict:
            section, _, path = line["json_key"].partition(".")
            value = lookup(secs[section]["key_figures"], path)
            assert value == line["value"]
            shown = {f"{value * 100:.1f} %", f"{value:,.0f}", f"{value:,.1f}"}
            assert any(s in line["text"] for s in shown), (line, shown)
        # the user's work comes first (after the machine having been busy, when it was)
        busy = [v["text"].startswith("The machine was busy") for v in verdict]
        assert verdict[busy[0]]["about"] == "your work" and not any(busy[1:])


def test_a_trace_folder_is_explained_and_leads_the_verdict(trace_page):
    page, record, traces = trace_page
    sec = _sections(record)["trace"]
    assert sec["status"] == "ok", sec["reason"]
    assert traces in sec["subject"] and sec["key_figures"]["ranks"] == 1
    assert record["verdict"][0]["json_key"].startswith("trace.")
    assert 'id="verdict"' in page and page.index('id="verdict"') < page.index('id="trace"')
    # what was not given stays a demo, and says so
    assert _sections(record)["planner"]["subject"].startswith("Demo:")


def test_decode_table_and_figure_share_one_classification(model_page):
    """Each measured batch is labelled by the largest of its three roofs, the same word in the
    table, the JSON and (drawn from the same list) the figure."""
    from ceiling.report.sections.decode import limited_by

    _, record, _ = model_page
    dec = _sections(record)["decode"]
    rows = dec["key_figures"]["measured"]["rows"]
    table = next(t for t in dec["tables"] if "decoding here" in t["title"])
    col = table["columns"].index("limited by")
    assert [r[col].removesuffix(" (noisy)") for r in table["rows"]] == [
        r["limited_by"] for r in rows
    ]
    assert {r["limited_by"] for r in rows} <= {"compute", "memory", "overhead", "all-reduce"}
    assert len(dec["figures"]) == 2  # the target device's roofs, and the measured batches'

    class Measured:
        expected_limited_by, bound = "launches", "memory"

    assert limited_by(Measured()) == "overhead"  # the per-op floor, said as a roof


def test_a_demo_beside_the_users_model_is_labelled_as_one(tmp_path):
    # a model too large to decode on any test machine: the section is the user's, but the
    # small model decoding here is a demo, and every figure of it says so
    big = "custom:layers=2,hidden=8192,heads=64,vocab=32000"
    _, record = _report(tmp_path, "--model", big, "--spec", "h100-sxm", "--only", "decode")
    sec = _sections(record)["decode"]
    assert sec["status"] == "ok", sec["reason"]
    assert sec["subject"].startswith("Yours:")
    assert sec["key_figures"]["measured"]["demo"] is True
    here = [h for h in sec["highlights"] if "measured here" in h["label"]]
    assert here and all("(demo)" in h["label"] for h in here)
    assert any("too large to decode on this machine" in t for t in sec["text"])
