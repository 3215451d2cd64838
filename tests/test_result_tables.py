"""Every result's rows as tables: `table()` gives plain dicts, `to_pandas()` a DataFrame of the
same rows (nested values as dotted columns), `to_dict()` the whole `--json` record; the
notebook view carries the tables and, where the result draws one, its figure."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import ceiling
from ceiling.api.scale import ScaleResult
from ceiling.api.validate import ValidateResult
from ceiling.errors import InvalidInput, MissingDependency

pd = pytest.importorskip("pandas")

TRACE = Path(__file__).parent / "data" / "traces-real" / "mi250_minitoy_rocm6.json.gz"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def decoded():
    return ceiling.decode("llama-3-8b", spec="h100-sxm", batch=[1, 8, 64])


def test_a_plans_table_is_its_plans_as_the_json_gives_them():
    r = ceiling.plan("llama-3-8b", 64, spec="h100-sxm", top=3)
    plans = r.to_dict()["plans"]
    assert r.table_names() == ["plans", "summary"]
    assert r.table() == plans
    frame = r.to_pandas()
    assert list(frame["step_time_s"]) == [p["step_time_s"] for p in plans]
    assert len(frame) == len(r.plans) == 3
    # the nested error band becomes dotted columns, one per figure of the band
    band = plans[0]["accuracy"]
    for key, value in band.items():
        if not isinstance(value, (dict, list)):
            assert frame[f"accuracy.{key}"][0] == value


def test_decode_gives_its_rows_per_batch_and_the_expected_rows_by_name(decoded):
    record = decoded.to_dict()
    assert decoded.table_names() == ["rows", "expected.rows", "summary"]
    assert list(decoded.to_pandas()["batch"]) == [1, 8, 64]
    expected = decoded.to_pandas("expected.rows")
    assert len(expected) == len(record["expected"]["rows"])


def test_the_summary_is_the_records_single_values_as_one_row():
    r = ceiling.serve("llama-3-8b", spec="h100-sxm", num_requests=50)
    record = r.to_dict()
    assert r.table_names() == ["summary"]  # no curve asked: no list of rows
    (row,) = r.table()
    assert row["output_tokens_per_s"] == record["output_tokens_per_s"]
    assert "layout" not in row  # a nested value is not a single one
    assert r.to_pandas()["requests"][0] == record["requests"] == 50


def test_a_curve_is_a_table_of_its_own():
    r = ceiling.serve("llama-3-8b", spec="h100-sxm", num_requests=50, curve=True)
    frame = r.to_pandas()
    assert list(frame["rate_per_s"]) == [p["rate_per_s"] for p in r.to_dict()["curve"]]
    assert "ttft_s.p99" in frame.columns


def test_a_trace_gives_each_ranks_ops_and_steps_with_the_rank():
    r = ceiling.trace(str(TRACE))
    raw = r.to_dict()["ranks"]
    assert r.table_names()[:2] == ["ops", "steps"]
    ops = r.to_pandas()
    assert len(ops) == sum(len(rank["ops"]) for rank in raw)
    assert set(ops["rank"]) == {rank["rank"] for rank in raw}
    steps = r.to_pandas("steps")
    assert list(steps["wall_s"]) == [s["wall_s"] for rank in raw for s in rank["steps"]]
    assert "seconds.compute" in steps.columns
    (rank,) = r.table("ranks")
    assert rank["step_s"] == raw[0]["step_s"] and "ops" not in rank


def test_models_are_one_row_each_named():
    r = ceiling.models(["gpt2", "llama-3-8b"])
    frame = r.to_pandas()
    assert list(frame["name"]) == ["gpt2", "llama-3-8b"]
    assert list(frame["layers"]) == [12, 32]


def test_a_measured_benchmark_gives_its_rows():
    r = ceiling.bench.matmul(dtypes=["fp32"], sizes=[64])
    (row,) = r.table()
    assert (row["m"], row["n"], row["k"], row["dtype"]) == (64, 64, 64, "fp32")
    assert r.to_pandas()["flops"][0] == 2 * 64**3  # a multiply-add counts 2


def test_scaling_and_validation_results_give_their_rows():
    points = [{"n": 1, "time_s": 2.0, "speedup": 1.0}, {"n": 2, "time_s": 1.25, "speedup": 1.6}]
    scaled = ScaleResult({"workload": "w", "mode": "strong", "points": points, "fit": None})
    assert list(scaled.to_pandas()["speedup"]) == [1.0, 1.6]
    rows = [{"run": "a", "error": 0.1}, {"run": "b", "error": -0.2}]
    scored = ValidateResult([], rows, [], [], sources=2, seconds=0.5)
    assert scored.table_names() == ["rows", "summary"]
    assert list(scored.to_pandas()["error"]) == [0.1, -0.2]


def test_an_unknown_table_is_refused_naming_the_tables_there_are(decoded):
    with pytest.raises(InvalidInput) as caught:
        decoded.to_pandas("plans")
    assert str(caught.value) == (
        "no table 'plans' in this result; its tables: rows, expected.rows, summary"
    )


def test_without_pandas_to_pandas_says_so_in_one_line(decoded, monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)  # `import pandas` raises ImportError
    with pytest.raises(MissingDependency) as caught:
        decoded.to_pandas()
    assert str(caught.value) == (
        "to_pandas() needs pandas, which is not installed: pip install pandas"
    )
    assert decoded.table()[0]["batch"] == 1  # the plain rows need nothing


def test_a_result_with_a_figure_shows_it_as_png_and_inside_its_html(decoded):
    png = decoded._repr_png_()
    assert png.startswith(PNG_SIGNATURE)
    bundle = decoded._repr_mimebundle_()
    assert bundle["image/png"].startswith(PNG_SIGNATURE)
    assert "<img src='data:image/png;base64," in bundle["text/html"]
    assert "<table>" in bundle["text/html"]
    only_html = decoded._repr_mimebundle_(include=["text/html"])
    assert set(only_html) == {"text/html"}
    assert set(decoded._repr_mimebundle_(exclude=["text/html"])) == {"image/png"}


def test_a_result_without_a_figure_shows_tables_only():
    r = ceiling.models()
    assert r._repr_png_() is None
    assert set(r._repr_mimebundle_()) == {"text/html"}
    one_count = ScaleResult({"workload": "w", "mode": "strong", "points": [], "fit": None})
    assert one_count._repr_png_() is None  # its figure needs two worker counts


def test_a_figure_shows_itself_in_a_notebook(decoded):
    assert decoded.figure()._repr_png_().startswith(PNG_SIGNATURE)


def test_drawing_a_figure_never_imports_pyplot():
    code = (
        "import io, sys, ceiling\n"
        "ceiling.amdahl(0.9).figure().savefig(io.BytesIO(), format='png')\n"
        "ceiling.amdahl(0.9)._repr_png_()\n"
        "print('matplotlib.pyplot' in sys.modules)\n"
    )
    src = str(Path(__file__).resolve().parents[1] / "src")
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": src, "PATH": "/usr/bin:/bin"},
        check=True,
    )
    assert out.stdout.strip() == "False"
