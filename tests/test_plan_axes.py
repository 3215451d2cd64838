"""Each plan axis is declared once; validation, --fixed, candidate arrays and JSON follow it."""

import pytest

from ceiling.errors import InvalidInput
from ceiling.model.parallel import Plan
from ceiling.model.plan_axes import AXES, parse_fixed, plan_at, plan_fields, plans_to_arrays

PLANS = [
    Plan(16, 8, 8, 2, 3, 1, "full", True, 16, 1),
    Plan(4, 2, 1, 1, 1, 3, "none", False, 18, 2),
]


def test_every_plan_field_is_an_axis():
    assert sorted(a.field for a in AXES) == sorted(Plan.__dataclass_fields__)
    assert set(PLANS[0].to_json()) == {a.field for a in AXES}


def test_arrays_round_trip():
    arrays = plans_to_arrays(PLANS)
    assert set(arrays) == {a.key for a in AXES}
    assert [plan_at(arrays, i, Plan) for i in range(len(PLANS))] == PLANS


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
        Plan(**{**plan_fields(PLANS[0]), field: bad})


def test_description():
    assert PLANS[0].describe() == "d=16,t=8,p=8,b=2,v=3,zero=1,recompute=full,sp=on"
    assert PLANS[1].describe() == "d=4,t=2,p=1,b=1,ep=2,zero=3,recompute=none,sp=off"
