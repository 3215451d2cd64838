"""Each plan axis is declared once; validation, --fixed, candidate arrays and JSON follow it."""

import pytest

from ceiling.errors import InvalidInput
from ceiling.model.plan.axes import AXES, Plan, fixed_help, parse_fixed, plan_at, plans_to_arrays

PLANS = [
    Plan(
        16,
        8,
        8,
        2,
        3,
        zero=1,
        recompute="full",
        sequence_parallel=True,
        state_bytes_per_param=16,
        ep=1,
    ),
    Plan(
        4,
        2,
        1,
        1,
        1,
        zero=3,
        recompute="none",
        sequence_parallel=False,
        state_bytes_per_param=18,
        ep=2,
    ),
]


def test_every_plan_field_is_an_axis():
    assert sorted(a.field for a in AXES) == sorted(Plan.__dataclass_fields__)
    assert set(PLANS[0].to_json()) == {a.field for a in AXES}


def test_arrays_round_trip():
    arrays = plans_to_arrays(PLANS)
    assert set(arrays) == {a.key for a in AXES}
    assert [plan_at(arrays, i) for i in range(len(PLANS))] == PLANS


def test_fixed_accepts_keys_fields_and_aliases():
    assert parse_fixed("b=4") == {"micro_batch": 4}
    assert parse_fixed("sequence_parallel=off,state_bytes_per_param=16,zero=fsdp") == {
        "sp": False,
        "state_bytes": 16,
        "zero": 3,
    }
    assert parse_fixed("context_parallel=2,fp8=linear,tp_overlap=on,prefetch=off") == {
        "cp": 2,
        "fp8": "linear",
        "tp_overlap": True,
        "prefetch": False,
    }
    with pytest.raises(InvalidInput, match="unknown key 'cq'"):
        parse_fixed("cq=2")


@pytest.mark.parametrize(
    ("field", "bad"),
    [("d", 0), ("t", 1.5), ("zero", 4), ("recompute", "some"), ("state_bytes_per_param", 17)],
)
def test_plan_validation_names_the_axis(field, bad):
    with pytest.raises(InvalidInput, match=f"{field} must be"):
        Plan(**{**PLANS[0].to_json(), field: bad})


def test_description():
    assert PLANS[0].describe() == "d=16,t=8,p=8,b=2,v=3,zero=1,recompute=full,sp=on"
    assert PLANS[1].describe() == "d=4,t=2,p=1,b=1,ep=2,zero=3,recompute=none,sp=off"


def test_defaults_and_help_come_from_the_axes():
    assert Plan().to_json() == {a.field: a.default for a in AXES}
    assert Plan().devices == 1
    text = fixed_help()
    for a in AXES:
        assert f"{a.key} (" in text and a.help in text
    assert "micro_batch (b; mb; a whole number ≥ 1)" in text
    # after v every axis is named: a positional value cannot land on the wrong axis
    with pytest.raises(TypeError):
        Plan(1, 1, 1, 1, 1, 0)


def test_plan_help_lists_every_axis_from_its_entry(cli):
    code, out, _ = cli("plan", "--help")
    assert code == 0
    # The help wraps lines at spaces and after hyphens ("Megatron-" / "Core").
    text = " ".join(out.split()).replace("- ", "-")
    for a in AXES:
        assert " ".join(a.fixed_help().split()).replace("- ", "-") in text
