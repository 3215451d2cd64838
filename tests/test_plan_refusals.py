"""A refused layout says the way out, and the way out works: every suggestion a refusal makes,
applied to the pins, plans or meets a different obstacle — never the same refusal again."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ceiling
from ceiling.errors import DoesNotFit, InvalidInput

DENSE = (
    "custom:layers=10,hidden=512,heads=8,kv_heads=4,ffn_hidden=1536,ffn_kind=swiglu,"
    "vocab=32000,max_seq=2048,norm=rmsnorm,trained_dropout=false"
)
MOE = (
    "custom:layers=7,hidden=512,heads=8,kv_heads=8,ffn_hidden=1024,ffn_kind=swiglu,"
    "vocab=32000,max_seq=2048,experts=16,active_experts=2,norm=rmsnorm,trained_dropout=false"
)
SMALL = dict(spec="h100-sxm", seq=2048, global_batch=48, top=1)


def _obstacle(message: str) -> str:
    """The rule a refusal names: without the pins it lists and the suggestions it makes."""
    rule = re.split(r"; (?:did you mean|it fits with) ", message)[0]
    return re.sub(r"\(pinned: [^)]*\)", "", rule)


def _plan(model: str, gpus: int, pins: dict, **more):
    return ceiling.plan(model, gpus, fixed=pins or None, **{**SMALL, **more})


def _check_suggestions_work(model: str, gpus: int, pins: dict, **more) -> int:
    """Plan; on a refusal apply each suggestion it makes and check it plans or names a new
    obstacle. Returns how many suggestions were applied."""
    try:
        _plan(model, gpus, pins, **more)
        return 0
    except (InvalidInput, DoesNotFit) as err:
        refusal = err
    found = getattr(refusal, "suggestions", ())
    for s in found:
        said = s.text(14, pins.get("p"))  # the words the message uses for it
        assert said.split(",")[0].split("=")[0] in str(refusal)
        try:
            _plan(model, gpus, s.applied(pins), **more)
        except (InvalidInput, DoesNotFit) as again:
            assert _obstacle(str(again)) != _obstacle(str(refusal)), (pins, s)
    return len(found)


PINS = st.fixed_dictionaries(
    {},
    optional={
        "t": st.sampled_from([1, 2, 3, 4, 8]),
        "p": st.sampled_from([1, 2, 3, 4, 5]),
        "v": st.sampled_from([1, 2, 3, 4]),
        "d": st.sampled_from([1, 2, 3, 4, 8]),
        "micro_batch": st.sampled_from([1, 2, 4, 5]),
        "recompute": st.sampled_from(["none", "full"]),
    },
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pins=PINS, gpus=st.sampled_from([4, 8, 16]))
def test_every_suggestion_of_a_refused_dense_layout_plans_or_meets_a_new_obstacle(pins, gpus):
    _check_suggestions_work(DENSE, gpus, pins)


MOE_PINS = st.fixed_dictionaries(
    {},
    optional={
        "t": st.sampled_from([1, 2, 4]),
        "p": st.sampled_from([1, 2, 7]),
        "ep": st.sampled_from([1, 2, 3, 4, 8, 16]),
        "etp": st.sampled_from([0, 1, 2, 4]),
        "d": st.sampled_from([1, 2, 4]),
    },
)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pins=MOE_PINS)
def test_every_suggestion_of_a_refused_moe_layout_plans_or_meets_a_new_obstacle(pins):
    _check_suggestions_work(MOE, 8, pins)


def test_an_interleaved_layout_the_balanced_rule_cannot_split_is_offered_one_that_works():
    # 61 layers (DeepSeek-V3's count) on p=8, v=4: the balanced rule gives 7, 7 at the ends
    # and 47 layers for 6 middle stages, which do not split evenly; the way out is an explicit
    # layout with equal middle stages.
    model = DENSE.replace("layers=10", "layers=61")
    pins = {"p": 8, "v": 4, "stages": "balanced"}
    with pytest.raises(InvalidInput) as refused:
        _plan(model, 64, pins, global_batch=64)
    message = str(refused.value)
    assert "stages=balanced where it does" not in message  # not advised again once pinned
    assert "did you mean fixed stages=6,8,8,8,8,8,8,7" in message
    first = refused.value.suggestions[0]
    assert first.applied(pins) == {"p": 8, "v": 4, "first": 6, "last": 7}
    best = _plan(model, 64, first.applied(pins), global_batch=64).best
    assert best.plan.p == 8 and best.plan.v == 4
    assert (best.plan.first_stage_layers, best.plan.last_stage_layers) == (6, 7)


def test_a_layout_one_axis_off_is_named_with_the_nearest_valid_value():
    with pytest.raises(InvalidInput) as refused:
        _plan(DENSE, 8, {"t": 3})
    assert str(refused.value) == (
        "tensor parallelism must divide the attention heads: heads(8) % t(3) = 2; "
        "did you mean fixed t=4"
    )  # the nearest of the valid t (4 before 2: 4/3 is nearer 1 than 3/2), one per axis
    assert [dict(s.edits) for s in refused.value.suggestions] == [{"t": 4}]


def test_a_layout_that_does_not_fit_is_offered_what_fits():
    # A 340B GQA model (Nemotron-4's shape) at TP8 PP8 VP12 on 128 H100: 90.2 GiB with 18
    # bytes of state a parameter (fp32 gradients); 16 (NeMo's 16-bit gradients) fits, and so
    # does full recompute in place of the pinned recompute=none.
    model = (
        "custom:layers=96,hidden=18432,heads=96,kv_heads=8,ffn_hidden=73728,ffn_kind=gelu,"
        "vocab=256000,max_seq=4096,norm=layernorm,trained_dropout=false"
    )
    pins = {"d": 2, "t": 8, "p": 8, "v": 12, "micro_batch": 1, "zero": 1, "recompute": "none"}
    args = dict(spec="h100-sxm", global_batch=32, seq=4096, headroom=0.0, top=1)
    with pytest.raises(DoesNotFit) as refused:
        ceiling.plan(model, 128, fixed=pins, **args)
    assert str(refused.value).endswith("; it fits with fixed state_bytes=16 or recompute=full")
    for s in refused.value.suggestions:
        assert ceiling.plan(model, 128, fixed=s.applied(pins), **args).best.fits


def test_a_pin_the_planner_sets_itself_is_not_offered_for_unpinning():
    # The framework's recipe pins etp=1 for a mixture of experts: "no etp pin" would give it
    # back, so that suggestion is dropped and the message says only what is left.
    from ceiling.model.plan.refusals import Suggestion, restated, without_unpinning

    found = [Suggestion((("etp", None),)), Suggestion((("ep", 4),))]
    err = restated(InvalidInput("ep·etp divides no stage's ranks"), found, 7, None)
    assert str(err).endswith("did you mean fixed no etp pin or ep=4")
    kept = without_unpinning(err, {"etp": 1}, 7, None)
    assert str(kept) == "ep·etp divides no stage's ranks; did you mean fixed ep=4"
    assert kept.suggestions == (found[1],)
    assert without_unpinning(err, {"zero": 3}, 7, None) is err


def test_a_model_whose_state_outgrows_the_cluster_is_told_how_many_devices_it_needs():
    """Llama-3-405B on 8 H100: 405.9B parameters × 18 bytes of state need ⌈6,804 GiB / 72 GiB⌉
    = 95 devices even fully sharded, so the refusal says so rather than 'a smaller micro-batch'
    (the smallest plan already has b = 1)."""
    import ceiling
    from ceiling.errors import DoesNotFit
    from ceiling.model.transformer import get_model

    params = get_model("llama-3-405b").params_total
    usable = 0.9 * 80 * 2**30
    with pytest.raises(DoesNotFit) as refused:
        ceiling.plan("llama-3-405b", 8, spec="h100-sxm")
    need = math.ceil(18 * params / usable)
    assert need == 95
    assert f"need at least {need} such devices" in str(refused.value)
    assert "smaller micro-batch" not in str(refused.value)
