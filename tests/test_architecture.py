"""The shape of the code: no import circle anywhere in the package, and the floors
docs/architecture.md draws are the layers import-linter holds (pyproject.toml)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]


def import_circles(package: str = "ceiling") -> set[frozenset[str]]:
    """Every set of modules that import one another in a circle (a strongly connected
    component of the import graph, imports inside functions counted, imports only for type
    checking not)."""
    import grimp
    import networkx as nx

    graph = grimp.build_graph(package, exclude_type_checking_imports=True, cache_dir=None)
    edges = nx.DiGraph()
    for module in graph.modules:
        edges.add_edges_from((module, m) for m in graph.find_modules_directly_imported_by(module))
    return {frozenset(c) for c in nx.strongly_connected_components(edges) if len(c) > 1}


def test_no_import_circle():
    circles = [sorted(c) for c in import_circles()]
    assert not circles, f"modules importing one another in a circle: {circles}"


def test_the_circle_finder_finds_a_circle(tmp_path, monkeypatch):
    """Two modules importing each other inside functions are one circle to it."""
    package = tmp_path / "ceiling_circle_probe"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    from ceiling_circle_probe import b\n")
    (package / "b.py").write_text("from ceiling_circle_probe import a\n")
    (package / "c.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from ceiling_circle_probe import a\n"
    )
    (package / "d.py").write_text("from ceiling_circle_probe import c\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    circle = frozenset({"ceiling_circle_probe.a", "ceiling_circle_probe.b"})
    assert import_circles("ceiling_circle_probe") == {circle}


def layers_contract() -> list[list[str]]:
    """The layers of pyproject.toml's layers contract, top first, each a list of modules."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["type"] == "layers"]
    return [[m.strip() for m in layer.split(":")] for layer in contract["layers"]]


def floor_line(layers: list[list[str]]) -> str:
    """The floors as docs/architecture.md draws them: a package as `name/`, a module by its
    name, the modules of one floor joined by ` · `, the floors by ` ─► `."""

    def name(module: str) -> str:
        short = module.removeprefix("ceiling.")
        package = importlib.util.find_spec(module).submodule_search_locations is not None
        return f"{short}/" if package else short

    return " ─► ".join(" · ".join(name(m) for m in layer) for layer in layers)


def test_the_architecture_page_draws_the_layers_import_linter_holds():
    page = (ROOT / "docs" / "architecture.md").read_text()
    drawn = re.search(r"```\n(.*?)\n```", page, re.S).group(1).strip()
    assert drawn == floor_line(layers_contract()), (
        "docs/architecture.md's floors differ from pyproject.toml's layers contract; draw:\n"
        + floor_line(layers_contract())
    )


def test_the_report_page_sits_above_the_api_and_the_renderers_below_it():
    tops = [layer[0] for layer in layers_contract()]
    assert tops.index("ceiling.report") < tops.index("ceiling.api") < tops.index("ceiling.render")
