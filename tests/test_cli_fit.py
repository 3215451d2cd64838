import json

import pytest

SPECSDM91 = (
    "load,throughput\n1,64.9\n18,995.9\n36,1652.4\n72,1853.2\n108,1828.9\n144,1775.0\n216,1702.2\n"
)


def test_fit_specsdm91_csv_matches_r_usl(cli, tmp_path):
    f = tmp_path / "specsdm91.csv"
    f.write_text(SPECSDM91)
    fig = tmp_path / "fit.svg"
    code, out, err = cli("fit", f, "--json", "--plot", fig)
    assert code == 0, err
    doc = json.loads(out)
    usl = doc["fit"]["usl"]
    assert usl["sigma"] == pytest.approx(0.02773, rel=0.02)
    assert usl["kappa"] == pytest.approx(0.0001044, rel=0.02)
    assert usl["lam"] == pytest.approx(90.0, rel=0.02)
    assert usl["n_star"] == pytest.approx(96, abs=1)
    assert doc["measure"] == "throughput"
    assert doc["fit"]["best"] == "usl"
    assert fig.read_text().lstrip().startswith("<?xml")


def test_fit_human_output_names_the_law(cli, tmp_path):
    f = tmp_path / "m.csv"
    f.write_text(SPECSDM91)
    code, out, _ = cli("fit", f)
    assert code == 0
    assert "Universal Scalability Law" in out
    assert "N* ≈ 96" in out


def test_fit_json_rows_of_times_and_columns(cli, tmp_path):
    p, t1 = 0.8, 3.0
    rows = [{"N": n, "time": t1 * ((1 - p) + p / n)} for n in (1, 2, 4, 8)]
    f = tmp_path / "rows.json"
    f.write_text(json.dumps(rows))
    code, out, err = cli("fit", f, "--json", "--predict", "16,32")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["fit"]["amdahl"]["p"] == pytest.approx(p, abs=1e-6)
    assert [x["n"] for x in doc["fit"]["predictions"]] == [16, 32]
    cols = tmp_path / "cols.json"
    cols.write_text(json.dumps({"workers": [1, 2, 4, 8], "seconds": [r["time"] for r in rows]}))
    code, out, _ = cli("fit", cols, "--json")
    assert json.loads(out)["fit"]["amdahl"]["p"] == pytest.approx(p, abs=1e-6)


def test_fit_weak_mode_gives_gustafson(cli, tmp_path):
    alpha = 0.25
    lines = ["n,time_s"] + [f"{n},{n / (n - alpha * (n - 1))}" for n in (1, 2, 4, 8)]
    f = tmp_path / "weak.csv"
    f.write_text("\n".join(lines) + "\n")
    code, out, _ = cli("fit", f, "--mode", "weak", "--json")
    assert code == 0
    assert json.loads(out)["fit"]["gustafson"]["alpha"] == pytest.approx(alpha, abs=1e-6)


def test_fit_reads_a_scale_result(cli, tmp_path):
    doc = {"mode": "strong", "points": [{"n": n, "time_s": 1 / n} for n in (1, 2, 4)]}
    f = tmp_path / "scale.json"
    f.write_text(json.dumps(doc))
    code, out, _ = cli("fit", f, "--json")
    assert code == 0
    assert json.loads(out)["fit"]["amdahl"]["p"] == pytest.approx(1.0, abs=1e-4)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("a,b\n1,2\n", "need a column N"),
        ("n,time\n1,abc\n", "row 2"),
        ("n,time\n2,1.0\n2,1.1\n", "two or more different worker counts"),
        ("n,time\n1,1.0\n2,-1\n", "positive"),
        ("{not json", "not valid JSON"),
    ],
)
def test_fit_bad_files_are_one_line(cli, tmp_path, content, message):
    f = tmp_path / ("bad.json" if content.startswith("{") else "bad.csv")
    f.write_text(content)
    code, _, err = cli("fit", f)
    assert code == 2
    assert err.startswith("error: ")
    assert message in err
    assert err.count("\n") == 1


def test_fit_missing_file(cli, tmp_path):
    code, _, err = cli("fit", tmp_path / "nope.csv")
    assert code == 2
    assert "no such file" in err


def test_fit_a_folder_or_a_binary_file_is_one_line(cli, tmp_path):
    code, _, err = cli("fit", tmp_path)
    assert code == 2
    assert err.startswith("error: ") and "is a folder" in err and err.count("\n") == 1
    f = tmp_path / "blob.csv"
    f.write_bytes(b"\x00\x01\xffN,time")
    code, _, err = cli("fit", f)
    assert code == 2
    assert "binary file" in err and err.count("\n") == 1


@pytest.mark.parametrize("sep", ["\t", ";", " "])
def test_fit_reads_tab_semicolon_and_space_separated_files(cli, tmp_path, sep):
    p = 0.75
    lines = [f"N{sep}time"] + [f"{n}{sep}{(1 - p) + p / n}" for n in (1, 2, 4, 8)]
    f = tmp_path / "m.csv"
    f.write_text("\n".join(lines) + "\n")
    code, out, err = cli("fit", f, "--json")
    assert code == 0, err
    assert json.loads(out)["fit"]["amdahl"]["p"] == pytest.approx(p, abs=1e-6)
