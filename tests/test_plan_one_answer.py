"""One question, one answer: the same model, machine profile and GPU count give the same plan
from `ceiling plan --json`, `ceiling.plan()` and the report's planner section; and a model
given as a Hugging Face config gets the plan of the catalog model with its shapes."""

from __future__ import annotations

import json

import pytest

from ceiling.hardware.profile import MachineProfile, MeasuredDevice, save_profile

# an H100 measured at 0.707 of its dense bf16 peak and 0.85 of its bandwidth: the planner
# must take these, not the clusters.toml defaults, wherever it is asked
H100_MEASURED = MeasuredDevice(
    "NVIDIA H100 80GB HBM3", "cuda", {"bf16": 0.707 * 989.5e12}, 0.85 * 3.35e12
)
MODEL, GPUS = "llama-3-8b", 16
PLAN_KEYS = ("step_time_s", "mfu", "tokens_per_s", "memory_bytes_per_device")


@pytest.fixture
def h100_profile(tmp_path):
    prof = MachineProfile(1, "2026-01-01T00:00:00+00:00", "gpuhost", {}, [H100_MEASURED])
    return save_profile(prof, tmp_path / "h100.json")


def _axes(plan: dict) -> dict:
    from ceiling.model.plan.axes import AXES

    return {a.field: plan[a.field] for a in AXES}


def test_report_command_and_api_give_one_plan_for_one_profile(cli, tmp_path, h100_profile):
    import ceiling

    code, out, err = cli(
        "report", "--only", "planner", "--profile", h100_profile, "--model", MODEL,
        "--gpus", GPUS, "-o", tmp_path / "r.html", "--json",
    )  # fmt: skip
    assert code == 0, err
    section = next(s for s in json.loads(out)["sections"] if s["key"] == "planner")
    assert section["status"] == "ok", section["reason"]
    figures = section["key_figures"]
    code, out, err = cli(
        "plan", MODEL, "-n", GPUS, "--profile", h100_profile, "-k", "3", "--scaling", "1",
        "--json",
    )  # fmt: skip
    assert code == 0, err
    command = json.loads(out)
    api = ceiling.plan(MODEL, GPUS, machine_profile=h100_profile, top=3, scaling=1).to_dict()
    assert api == command
    # the measured efficiency, not the catalog's 0.75
    assert command["cluster"]["matmul_efficiency"] == pytest.approx(0.707)
    best = command["plans"][0]
    assert _axes(figures["best_plan"]) == _axes(best)
    for key in PLAN_KEYS:
        assert figures["best_plan"][key] == best[key], key
    assert figures["best_mfu"] == best["mfu"]
    assert figures["best_step_time_s"] == best["step_time_s"]
    assert (figures["evaluated_plans"], figures["fitting_plans"]) == (
        command["evaluated"],
        command["fitting"],
    )
    assert [_axes(p) for p in figures["plans"]] == [_axes(p) for p in command["plans"]]
    why = [p["why_slower"] for p in command["plans"]]
    assert [p["why"] or None for p in figures["plans"]] == why
    scaled = [(s["gpus"], s["mfu"]) for s in figures["scaling"]]
    assert scaled == [(r["devices"], r["best"]["mfu"]) for r in command["scaling"]]


def test_a_hugging_face_config_plans_as_the_catalog_model_of_its_shapes(cli, tmp_path):
    from ceiling.model.transformer import parse_model

    cfg = parse_model(MODEL)
    # Llama 3 8B's config.json as Hugging Face publishes it (the fields the planner reads)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "num_hidden_layers": cfg.layers,
        "hidden_size": cfg.hidden,
        "num_attention_heads": cfg.heads,
        "num_key_value_heads": cfg.kv_heads,
        "intermediate_size": cfg.ffn_hidden,
        "vocab_size": cfg.vocab,
        "max_position_embeddings": cfg.max_seq,
        "tie_word_embeddings": cfg.tied_embeddings,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "attention_dropout": 0.0,
        "attention_bias": False,
        "torch_dtype": "bfloat16",
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    plans = {}
    for name in (MODEL, f"hf:{tmp_path}"):
        code, out, err = cli("plan", name, "--spec", "h100-sxm", "-n", "64", "--json")
        assert code == 0, err
        plans[name] = json.loads(out)
    catalog, hf = plans[MODEL], plans[f"hf:{tmp_path}"]
    assert hf["params_total"] == catalog["params_total"]
    assert hf["assumptions"] == catalog["assumptions"]
    assert hf["plans"] == catalog["plans"]
    assert hf["scaling"] == catalog["scaling"]
