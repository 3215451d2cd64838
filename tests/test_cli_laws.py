import json
import subprocess
import sys

import pytest


def test_amdahl_json(cli):
    code, out, _ = cli("amdahl", "0.95", "-n", "256", "-n", "512", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["ceiling"] == 20.0
    assert [r["n"] for r in data["rows"]] == [256, 512]
    assert data["rows"][0]["speedup"] == pytest.approx(18.62, abs=0.01)
    assert data["rows"][1]["speedup"] == pytest.approx(19.28, abs=0.01)
    assert data["rows"][0]["efficiency"] == pytest.approx(18.618 / 256, rel=1e-3)


@pytest.mark.parametrize(
    "args",
    [
        ["amdahl", "1.5"],
        ["amdahl", "-0.1"],
        ["amdahl", "0.9", "-n", "0"],
        ["gustafson", "2"],
        ["amdahl", "0.9", "--plot", "out.pdf"],
    ],
)
def test_bad_input_one_line_exit_2(cli, args):
    code, _, err = cli(*args)
    assert code == 2
    assert err.startswith("error: ")
    assert err.count("\n") == 1


def test_plot_files(tmp_path, cli):
    for name in ("a.png", "a.svg"):
        code, _, _ = cli("amdahl", "0.9", "--plot", str(tmp_path / name))
        assert code == 0
        assert (tmp_path / name).stat().st_size > 1000
    code, _, _ = cli("gustafson", "0.1", "--plot", str(tmp_path / "g.svg"))
    assert (tmp_path / "g.svg").read_text().lstrip().startswith("<?xml")


def test_fast_commands_do_not_import_torch():
    probe = (
        "import sys\n"
        "from ceiling.cli.app import main\n"
        "for args in (['--help'], ['amdahl', '0.95', '--json'], ['gustafson', '0.1']):\n"
        "    try:\n"
        "        main(args)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "heavy = [m for m in ('torch', 'matplotlib', 'scipy') if m in sys.modules]\n"
        "print('HEAVY', heavy, file=sys.stderr)\n"
    )
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert "HEAVY []" in res.stderr
