"""Output the user asked for: paths checked before any work, results kept when a write fails,
and a stdout that is full, cannot encode "×" or is 5 columns wide."""

import json
import os
import subprocess
import sys

import pytest

from patience import HANG_S


def one_line_exit_2(code: int, err: str) -> bool:
    return code == 2 and len(err.strip().splitlines()) == 1


# Every command with --plot; a path that cannot be written must stop each before it works.
PLOT_COMMANDS = [
    ["amdahl", "0.95"],
    ["gustafson", "0.1"],
    ["roofline", "--spec", "h100-sxm"],
    ["decode", "gpt:tiny", "--spec", "h100-sxm"],
    ["simulate", "straggler"],
    ["simulate", "pipeline"],
    ["profile", "mlp", "--device", "meta"],
    ["step", "mlp", "--steps", "1"],
    ["scale", "synthetic", "--workers", "1,2", "--work-ms", "1"],
    ["trace", "no-such-trace.json"],
]


@pytest.fixture
def bad_paths(tmp_path):
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    return {
        "/proc/x.png": "refuses new files|does not exist",
        str(a_file / "x.png"): "is a file, not a folder",
        str(tmp_path / "no-folder" / "x.png"): "does not exist",
        str(tmp_path / "x.txt"): "must end in .png or .svg",
        str(tmp_path): "must end in .png or .svg",
    }


@pytest.mark.parametrize("command", PLOT_COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_unwritable_plot_path_is_refused_before_any_work(cli, command, bad_paths, tmp_path):
    import re

    fit_file = tmp_path / "m.csv"
    fit_file.write_text("N,time\n1,10\n2,6\n4,4\n")
    for path, reason in bad_paths.items():
        code, out, err = cli(*command, "--plot", path)
        assert one_line_exit_2(code, err), (command, path, err)
        assert re.search(reason, err), (path, err)
        assert out == ""
    code, _, err = cli("fit", fit_file, "--plot", "/proc/x.png")
    assert one_line_exit_2(code, err)


def test_a_figure_that_fails_to_write_after_the_run_keeps_the_result(cli, tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    def disk_full(self, *args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", disk_full)
    fig = tmp_path / "s.png"
    code, out, err = cli("simulate", "straggler", "--json", "--plot", fig)
    assert json.loads(out)["step_s"] > 0  # the computed result is all there
    assert one_line_exit_2(code, err)
    assert err.startswith("warning: figure not written to") and "No space left" in err
    code, out, err = cli("amdahl", "0.9", "--plot", fig)
    assert "ceiling" in out and one_line_exit_2(code, err)
    # the next command starts clean
    code, _, err = cli("amdahl", "0.9")
    assert code == 0 and err == ""


def _run(args, **env):
    return subprocess.run(
        [sys.executable, "-m", "ceiling", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=HANG_S,
    )


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("args", [["amdahl", "0.95"], ["amdahl", "0.95", "--json"]])
def test_a_full_stdout_is_one_line(args):
    with open("/dev/full", "w") as full:
        r = subprocess.run(
            [sys.executable, "-m", "ceiling", *args],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=HANG_S,
        )
    assert one_line_exit_2(r.returncode, r.stderr), r.stderr
    assert "No space left" in r.stderr


def test_an_ascii_stdout_gets_ascii_lookalikes():
    r = _run(["amdahl", "0.95"], PYTHONIOENCODING="ascii", LANG="C", LC_ALL="C")
    assert r.returncode == 0, r.stderr
    assert "N >= 171" in r.stdout and "20x" in r.stdout


def test_a_five_column_terminal_still_shows_whole_numbers():
    r = _run(["simulate", "straggler"], COLUMNS="5")
    assert r.returncode == 0 and r.stderr == ""
    assert max(len(line) for line in r.stdout.splitlines()) >= 30


@pytest.mark.parametrize(
    "argv",
    [
        ["report", "--only", "amdahl", "-o"],
        ["bench", "--save"],
    ],
    ids=["report -o", "bench --save"],
)
def test_an_unwritable_output_file_is_refused_before_any_measurement(cli, argv, bad_paths):
    for path in list(bad_paths)[:2]:  # /proc, and a file where a folder should be
        target = path.replace(".png", ".html" if argv[0] == "report" else ".json")
        code, out, err = cli(*argv, target)
        assert one_line_exit_2(code, err), (argv, target, err)
        assert "cannot write" in err and out == ""
