import os

import pytest


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def cli(capsys):
    """Run the ceiling CLI in-process: returns (exit code, stdout, stderr)."""
    from ceiling.cli.app import main

    def run(*args: str):
        try:
            main([str(a) for a in args])
            code = 0
        except SystemExit as exc:
            code = exc.code or 0
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


@pytest.fixture(autouse=True, scope="session")
def _own_folders(tmp_path_factory):
    """No test reads anything of the user's: the home folder, the cache and config folders
    (the trace's memo of op costs, the saved machine profile, matplotlib's settings) point at
    this run's own folders, and every CEILING_* variable the user set is cleared
    (CEILING_PROFILE points at a profile no test has written)."""
    saved = dict(os.environ)
    home = tmp_path_factory.mktemp("home")
    for name in [n for n in os.environ if n.startswith("CEILING_")]:
        del os.environ[name]
    os.environ.update(
        {
            "HOME": str(home),
            "XDG_CACHE_HOME": str(tmp_path_factory.mktemp("cache")),
            "XDG_CONFIG_HOME": str(tmp_path_factory.mktemp("config")),
            "MPLCONFIGDIR": str(tmp_path_factory.mktemp("matplotlib")),
            "CEILING_PROFILE": str(tmp_path_factory.mktemp("profile") / "profile.json"),
        }
    )
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture(autouse=True)
def _profile_of_this_test(tmp_path, monkeypatch):
    """Each test its own default profile path: what one test saves, the next never reads."""
    monkeypatch.setenv("CEILING_PROFILE", str(tmp_path / "default-profile.json"))
