"""Packaging: the version, the bare command, commands that need torch, and the built wheel."""

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

import ceiling
from patience import HANG_S

ROOT = Path(__file__).resolve().parents[1]

# Runs CLI commands in one fresh interpreter in which `import torch` fails, as where none is
# installed (an import hook, so `torch` is absent from sys.modules as it would be, not None);
# stderr gets "@@ <exit code>" after each command.
WITHOUT_TORCH = """
import json, sys

class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "torch":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

sys.meta_path.insert(0, NoTorch())
from ceiling.cli.app import main
for argv in json.loads(sys.argv[1]):
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = exc.code or 0
    print(f"@@ {code}", file=sys.stderr, flush=True)
"""


def run_without_torch(commands: list[list[str]]) -> list[tuple[int, str]]:
    """(exit code, stderr) of each command, run where torch cannot be imported."""
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_TORCH, json.dumps(commands)],
        capture_output=True, text=True, timeout=HANG_S,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    parts = re.split(r"^@@ (\d+)\n", done.stderr, flags=re.M)
    return [(int(code), err) for err, code in zip(parts[0::2], parts[1::2], strict=False)]


def test_one_version_source(cli):
    installed = importlib.metadata.version("ceiling-perf")
    assert ceiling.__version__ == installed
    code, out, _ = cli("--version")
    assert code == 0 and out.strip() == f"ceiling {installed}"


def test_bare_command_prints_help_and_succeeds(cli):
    code, out, err = cli()
    assert code == 0 and err == ""
    assert "Usage: ceiling" in out and "plan" in out and "--version" in out


NEEDS_TORCH = [
    ["profile", "gpt:tiny", "--device", "meta"],
    ["bench", "memory", "--quick"],
    ["bench", "--quick"],
    ["report", "--only", "amdahl,planner", "-o", "{tmp}/r.html"],
    ["step", "gpt:tiny"],
    ["decode", "gpt:tiny", "--measure"],
]
CALCULATORS = [
    ["plan", "llama-3-8b", "--spec", "h100-sxm", "-n", "8"],
    ["decode", "llama-3-8b", "--spec", "h100-sxm"],
    ["amdahl", "0.9"],
    ["models"],
    ["specs", "h100"],
    ["fit", str(ROOT / "tests" / "golden" / "scaling_times.csv")],
]


def test_without_torch_measuring_refuses_in_one_line_and_calculators_run(tmp_path):
    needs = [[a.replace("{tmp}", str(tmp_path)) for a in args] for args in NEEDS_TORCH]
    results = run_without_torch(needs + CALCULATORS)
    assert len(results) == len(needs) + len(CALCULATORS)
    for args, (code, err) in zip(needs, results, strict=False):
        assert code == 2, (args, err)
        assert err.count("\n") == 1 and "pip install torch" in err, (args, err)
        assert "Traceback" not in err
    for args, (code, err) in zip(CALCULATORS, results[len(needs) :], strict=True):
        assert code == 0, (args, err)
    assert not (tmp_path / "r.html").exists()


def _copy_source(dest: Path) -> Path:
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info")
    shutil.copytree(ROOT / "src", dest / "src", ignore=skip)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, dest / name)
    return dest


@pytest.mark.slow
def test_wheel_installs_and_runs_in_a_fresh_venv(tmp_path):
    pytest.importorskip("build")
    source = _copy_source(tmp_path / "source")
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist)],
        cwd=source, check=True, capture_output=True, timeout=HANG_S,
    )  # fmt: skip
    (wheel,) = dist.glob("ceiling_perf-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    # the Python API ships with its type marker (PEP 561)
    assert "ceiling/py.typed" in names and "ceiling/api/result.py" in names
    # the table a trace's op costs are worked out from without torch
    assert "ceiling/trace/op_rules.json" in names
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
         "--no-index", str(wheel)],
        check=True, capture_output=True, timeout=HANG_S,
    )  # fmt: skip
    # The dependencies come from this environment; its editable ceiling does not (a .pth line
    # only adds the folder: the editable install's own .pth inside it is not processed).
    site = Path(
        subprocess.check_output(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            text=True,
        ).strip()
    )
    (site / "deps_from_test_env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    exe = venv / "bin" / "ceiling"
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # only the venv's paths

    def run(*args):
        done = subprocess.run(
            [str(exe), *args], capture_output=True, text=True, timeout=HANG_S, env=clean
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    version = importlib.metadata.version("ceiling-perf")
    assert run("--version").strip() == f"ceiling {version}"
    where = subprocess.check_output(
        [str(python), "-c", "import ceiling; print(ceiling.__file__)"], env=clean
    )
    assert str(venv) in where.decode()
    api = subprocess.check_output(
        [str(python), "-c", "import ceiling; print(ceiling.amdahl(0.9).to_dict()['ceiling'])"],
        env=clean,
    )
    assert float(api) == pytest.approx(10.0)
    assert "best:" in run("plan", "llama-3-8b", "--spec", "h100-sxm", "-n", "64")
    assert "tok/s" in run("decode", "llama-3-8b", "--spec", "h100-sxm", "--batch", "1,8")
