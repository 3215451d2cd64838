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
def _own_cache_folder(tmp_path_factory):
    """Files ceiling keeps in the user's cache folder (the trace's memo of op costs) go to
    this run's own folder: no test reads what an earlier run, or the user, left there."""
    before = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("cache"))
    yield
    if before is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = before
