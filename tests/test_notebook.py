"""A notebook that calls plan, decode, serve, trace and profile shows each result's tables and
figure, and the user's own pyplot figure drawn afterwards still shows: ceiling draws on
figures of its own and leaves the notebook's backend alone."""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

import pytest

nbclient = pytest.importorskip("nbclient")
nbformat = pytest.importorskip("nbformat")
pytest.importorskip("ipykernel")
pytest.importorskip("pandas")

NOTEBOOK = Path(__file__).parent / "data" / "notebook" / "first-hour.ipynb"
SOURCE = Path(__file__).resolve().parents[1] / "src"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def shown(cell) -> dict[str, object]:
    """Every MIME type a code cell's outputs show, with its data; errors fail the test."""
    data: dict[str, object] = {}
    for output in cell.outputs:
        assert output.output_type != "error", "\n".join(output.traceback)
        if output.output_type in ("execute_result", "display_data"):
            data.update(output.data)
    return data


def this_pythons_kernel(folder: Path) -> str:
    """A kernel spec that runs this interpreter (not whatever "python3" names elsewhere)."""
    spec = folder / "kernels" / "ceiling-test"
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    kernel = {"argv": argv, "display_name": "ceiling test", "language": "python"}
    (spec / "kernel.json").write_text(json.dumps(kernel))
    return "ceiling-test"


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    jupyter = tmp_path_factory.mktemp("jupyter")
    kernel = this_pythons_kernel(jupyter)
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setenv("JUPYTER_PATH", str(jupyter))
    # the kernel's own default: the inline backend a fresh Jupyter kernel starts with
    monkeypatch.delenv("MPLBACKEND", raising=False)
    monkeypatch.setenv("PYTHONPATH", str(SOURCE))
    monkeypatch.setenv("CEILING_PROFILE", str(tmp_path_factory.mktemp("np") / "none.json"))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=240, kernel_name=kernel, resources={"metadata": {"path": NOTEBOOK.parent}}
    )
    try:
        client.execute()
    finally:
        monkeypatch.undo()
    return [c for c in nb.cells if c.cell_type == "code"]


def test_every_cell_shows_the_tables_and_figures_it_names(executed):
    for cell in executed:
        data = shown(cell)
        for mime in cell.metadata["expect"]:
            assert mime in data, f"{cell.source!r} shows no {mime}: {sorted(data)}"
        if "image/png" in data:
            assert base64.b64decode(data["image/png"]).startswith(PNG_SIGNATURE)
        if "text/html" in data:
            assert "<table" in data["text/html"], cell.source


def test_a_result_with_a_figure_shows_it_inside_its_html_too(executed):
    decoded = next(c for c in executed if c.source.endswith("\ndecoded"))
    assert "<img src='data:image/png;base64," in shown(decoded)["text/html"]


def test_the_users_own_figure_still_shows_after_ceilings(executed):
    last = executed[-1]
    assert "plt.plot" in last.source
    assert "image/png" in shown(last)
