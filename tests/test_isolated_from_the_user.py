"""No test reads the user's saved profile, cache, config or CEILING_* settings."""

import os
import subprocess
import sys
from pathlib import Path

from ceiling.hardware.profile import default_profile_path


def test_the_default_profile_is_this_tests_own_and_not_written(tmp_path):
    path = default_profile_path()
    assert path.parent == tmp_path
    assert not path.exists()


def test_home_cache_and_config_are_the_runs_own_folders(tmp_path_factory):
    base = tmp_path_factory.getbasetemp()
    for name in ("HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "MPLCONFIGDIR"):
        assert Path(os.environ[name]).is_relative_to(base), name
    assert Path.home().is_relative_to(base)
    assert sorted(n for n in os.environ if n.startswith("CEILING_")) == ["CEILING_PROFILE"]


def test_a_user_profile_set_outside_does_not_reach_the_tests(tmp_path):
    """A CEILING_PROFILE the user exported (here: a file that is not a profile) is not what
    the tests see."""
    bogus = tmp_path / "user-profile.json"
    bogus.write_text("not json")
    probe = tmp_path / "test_probe.py"
    probe.write_text(
        "import os\n"
        f"def test_probe():\n    assert os.environ['CEILING_PROFILE'] != {str(bogus)!r}\n"
    )
    env = {**os.environ, "CEILING_PROFILE": str(bogus), "CEILING_CATALOG": str(bogus)}
    conftest = Path(__file__).with_name("conftest.py")
    (tmp_path / "conftest.py").write_text(conftest.read_text())
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(probe)],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
