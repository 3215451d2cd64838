"""Each framework's defaults, named; the straggler part explained; the model's config facts
(group-limited routing, published FP8 weights) used and said."""

from __future__ import annotations

import math

import pytest

import ceiling
from ceiling.model.plan.frameworks import DEFAULT_FRAMEWORK, FRAMEWORKS, recipe_defaults
from ceiling.model.plan.training import model_node_limit
from ceiling.model.transformer import get_model

QWEN3_235B = get_model("qwen3-235b-a22b")
LLAMA_70B = get_model("llama-3-70b")


@pytest.mark.parametrize(
    ("framework", "state", "etp", "overlap"),
    [
        ("megatron", None, 1, None),  # 18 bytes is the planner's default: nothing pinned
        ("nemo", 16, 1, None),
        ("torchtitan", None, 1, None),
        ("maxtext", None, 1, None),
        ("deepspeed", 16, 1, False),
    ],
)
def test_each_framework_pins_its_state_bytes_and_expert_tp(framework, state, etp, overlap):
    r = recipe_defaults(framework, QWEN3_235B)
    assert r.pins.get("state_bytes") == state and r.pins.get("etp") == etp
    assert r.job.get("overlap_dp") is overlap and r.job["framework"] == framework
    assert r.said.startswith(f"{framework} recipe: state ")
    for default in ("state", "ETP"):
        assert f"{default} {r.defaults[default]}" in r.said


def test_no_framework_plans_the_default_one_and_names_it():
    assert DEFAULT_FRAMEWORK == "megatron" and set(FRAMEWORKS) >= {"deepspeed", "nemo"}
    r = recipe_defaults(None, LLAMA_70B)
    assert r.framework == "megatron" and not r.chosen
    assert r.said.startswith("megatron recipe (the default): state 18 bytes a parameter")
    assert r.pins == {}  # a dense model: every Megatron default is the planner's own
    # TP overlap by size is NeMo's recipes'; Megatron-LM's flag is opt-in
    assert recipe_defaults("nemo", LLAMA_70B).pins["tp_overlap"] is True
    assert "off (--tp-comm-overlap is opt-in)" in r.said


def test_a_moe_layout_megatron_runs_with_etp_1_is_planned_not_refused():
    # Qwen3-235B (64 heads, 4 KV heads, 128 experts) at TP4 PP8 EP32 on 256 GPUs: a stage's
    # t·cp·d ranks are 32, which ep·etp must divide — 128 with etp = t = 4, 32 with the MoE
    # recipes' etp = 1.
    pins = "t=4,p=8,ep=32"
    args = dict(spec="h100-sxm", seq=4096, global_batch=512, top=1)
    best = ceiling.plan("qwen3-235b-a22b", 256, fixed=pins, **args).best
    assert (best.plan.ep, best.plan.etp) == (32, 1)
    with pytest.raises(ceiling.errors.InvalidInput, match="ep·etp"):
        ceiling.plan("qwen3-235b-a22b", 256, fixed=pins + ",etp=4", **args)


def test_the_straggler_part_says_what_it_is_its_size_and_how_to_set_it():
    r = ceiling.plan("llama-3-8b", 64, spec="h100-sxm", top=1)
    share = 0.02 * math.sqrt(2 * math.log(64))
    told = r.assumptions["straggler"]
    assert f"0.02·√(2 ln 64) = {share:.1%}" in told and "--step-jitter" in told
    pinned = r.best.plan.describe()
    none = ceiling.plan("llama-3-8b", 64, spec="h100-sxm", top=1, step_jitter=0, fixed=pinned)
    assert none.best.time["straggler_s"] == 0
    assert none.assumptions["straggler"] == "none (step_jitter 0; given)"
    # the same plan without its straggler part: the rest, which it is 0.02·√(2 ln 64) of
    # (the pipeline and its sends)
    rest = none.best.step_time_s
    assert r.best.step_time_s - rest == pytest.approx(r.best.time["straggler_s"], rel=1e-9)
    with pytest.raises(ceiling.errors.InvalidInput, match="step_jitter"):
        ceiling.plan("llama-3-8b", 64, spec="h100-sxm", step_jitter=1.5)


def _deepseek_v3(tmp_path, **more) -> str:
    from test_hf_config import DEEPSEEK_V3, write_config

    return f"hf:{write_config(tmp_path / 'ds', {**DEEPSEEK_V3, **more})}"


FP8_CONFIG = {
    "quantization_config": {
        "activation_scheme": "dynamic",
        "fmt": "e4m3",
        "quant_method": "fp8",
        "weight_block_size": [128, 128],
    }
}


def test_group_limited_routing_sets_the_node_limit_and_is_said(tmp_path):
    from ceiling.model.transformer import parse_model

    model = _deepseek_v3(tmp_path)
    assert model_node_limit(parse_model(model)) == 4  # topk_group 4 of n_group 8
    assert model_node_limit(QWEN3_235B) == 0
    r = ceiling.plan(model, 256, spec="h100-sxm", top=1, moe_dispatcher="deepep", fixed="p=8")
    assert r.job.moe_node_limit == 4
    assert any("from 4 of 8 groups, at most 4 nodes" in f for f in r.assumptions["model_facts"])
    given = ceiling.plan(
        model, 256, spec="h100-sxm", top=1, moe_dispatcher="deepep", moe_node_limit=2, fixed="p=8"
    )
    assert given.job.moe_node_limit == 2


def test_fp8_weights_in_the_config_are_read_by_decode_and_planned_in_fp8(tmp_path):
    from ceiling.model.transformer import parse_model

    model = _deepseek_v3(tmp_path, **FP8_CONFIG)
    cfg = parse_model(model)
    assert cfg.stored_weights == "fp8" and "weights stored in fp8" in cfg.source
    d = ceiling.decode(model, spec="h200-sxm", tp=8, batch=1)
    # FP8 weights: one byte a parameter read each token
    assert d.setup.weights_dtype == "fp8"
    # read as 16-bit, 671B parameters do not fit 8 H200: the refusal the config's FP8 avoids
    with pytest.raises(ceiling.errors.DoesNotFit, match=r"bf16 weights need 167\.8 GB"):
        ceiling.decode(model, spec="h200-sxm", tp=8, batch=1, weights="bf16")
    r = ceiling.plan(model, 256, spec="h100-sxm", top=1, fixed="p=8")
    assert r.best.plan.fp8 == "linear"
    assert (
        "weights published in FP8 (quantization_config): linear layers in FP8"
        in (r.assumptions["model_facts"])
    )
    a100 = ceiling.plan(model, 512, spec="a100-80gb", top=1, fixed="p=16")
    assert a100.best.plan.fp8 == "off"  # no FP8 tensor cores: planned in 16 bits, and said
    assert any("in 16 bits" in f for f in a100.assumptions["model_facts"])


@pytest.mark.parametrize(
    ("quant", "stored"),
    [
        ({"quant_method": "gptq", "bits": 4}, "gptq"),
        ({"quant_method": "awq", "bits": 4}, "awq"),
        ({"quant_method": "gptq", "bits": 8}, None),
        ({"quant_method": "bitsandbytes"}, None),
    ],
)
def test_quantization_config_formats(tmp_path, quant, stored):
    from ceiling.model.transformer import parse_model
    from test_hf_config import write_config

    raw = {
        "model_type": "llama", "num_hidden_layers": 2, "hidden_size": 256,
        "num_attention_heads": 4, "intermediate_size": 512, "vocab_size": 1000,
        "quantization_config": quant,
    }  # fmt: skip
    cfg = parse_model(f"hf:{write_config(tmp_path / 'q', raw)}")
    assert cfg.stored_weights == stored
    if stored is None:
        assert "not modelled: weights as 16-bit" in cfg.source
