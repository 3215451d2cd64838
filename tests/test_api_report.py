"""`ceiling.report(...)`: the report's sections through the Python API."""

from __future__ import annotations

import json

import pytest

import ceiling
from ceiling.errors import CeilingError


@pytest.mark.slow
def test_report_writes_the_page_and_returns_its_record(tmp_path):
    page = tmp_path / "r.html"
    r = ceiling.report(page, only=["amdahl"])
    record = r.to_dict()
    assert [s["status"] for s in record["sections"]] == ["ok"]
    assert record["html"] == str(page.resolve()) and page.read_text().startswith("<!")
    assert json.loads(page.with_suffix(".json").read_text()) == record
    assert r._repr_html_().startswith("<iframe srcdoc=")
    with pytest.raises(CeilingError):
        ceiling.report(tmp_path / "r.pdf")
    with pytest.raises(CeilingError):
        ceiling.report(only=["no-such-section"])


def test_report_only_takes_one_name_or_a_comma_list():
    # "amdahl" is one section, not six letters
    r = ceiling.report(only="amdahl")
    assert [s["key"] for s in r.to_dict()["sections"]] == ["amdahl"]
    with pytest.raises(CeilingError) as info:
        ceiling.report(only="amdahl,no-such-section")
    assert "no-such-section" in str(info.value) and "'a'" not in str(info.value)
