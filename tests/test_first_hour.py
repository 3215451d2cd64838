"""What a newcomer meets in the first hour: hints that name tools that exist, an install line
with the real distribution name, tables that fit 80 columns without breaking a word."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _render(renderable, width: int = 80) -> str:
    from rich.console import Console

    out = io.StringIO()
    Console(file=out, width=width, color_system=None).print(renderable)
    return out.getvalue()


def test_a_hub_id_not_cached_names_the_current_hub_command(tmp_path, monkeypatch):
    pytest.importorskip("huggingface_hub")
    from ceiling.errors import InvalidInput
    from ceiling.hf_files import locate_config

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))  # an empty cache
    with pytest.raises(InvalidInput) as err:
        locate_config("no-such-org/no-such-model")
    message = str(err.value)
    # huggingface_hub ≥ 0.34 installs `hf`; `huggingface-cli` is gone from current releases
    assert "`hf download no-such-org/no-such-model config.json`" in message
    assert "huggingface-cli" not in message


def test_every_install_line_names_the_distribution():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    name, extras = project["name"], project["optional-dependencies"]
    texts = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    texts += sorted((ROOT / "src").rglob("*.py"))
    install = re.compile(r"pip install '?([\w.-]+)(?:\[(\w+)\])?")
    lines = [m for p in texts for m in install.findall(p.read_text())]
    assert lines, "no install line found"
    for dist, extra in lines:
        if dist.startswith("ceiling"):
            assert dist == name, f"pip install {dist}: the distribution is {name}"
            assert not extra or extra in extras, f"{dist}[{extra}]: no such extra"


def test_op_names_never_fold_inside_a_word_at_80_columns():
    from ceiling.cli.profile import _compact_table
    from ceiling.render.terminal import table

    # the rows `ceiling profile gpt:tiny --train` prints on a CPU (names and figures alike)
    rows = [
        ["mm ×63", "25.8 G", "318 MB", "922 ms", "61 %", "81", "compute", "57.2 %"],
        ["sdpa_flash_cpu_bwd ×4", "1.34 G", "33.6 MB", "77.9 ms", "5 %", "40", "compute", "35.3 %"],
        ["embedding_dense_bwd ×2", "~328 k", "5.78 MB", "21 ms", "1 %", "0.057", "memory", "1.2 %"],
        ["layer_norm_bwd ×9", "~37.7 M", "28.4 MB", "47.8 ms", "3 %", "1.3", "memory", "12.8 %"],
    ]
    cols = ["op × calls", "FLOPs", "bytes", "time", "share", "FLOP/B", "bound", "roof"]
    for text in (_render(_compact_table("ops", cols, rows)), _render(table("ops", cols, rows))):
        assert max(len(line) for line in text.splitlines()) <= 80
        for name in ("sdpa_flash_cpu_bwd", "embedding_dense_bwd", "layer_norm_bwd"):
            assert name in text, f"{name} was broken across lines:\n{text}"
    # a figure with its unit stays on one line where the columns leave room
    text = _render(table("t", ["batch", "step", "memory"], [[1, "4.95 ms", "does not fit"]]))
    assert "4.95 ms" in text and "does not fit" in text


def test_help_shows_the_real_signature_and_docstring_of_callable_packages():
    import inspect
    import pydoc

    import ceiling
    from ceiling.api.profile import profile
    from ceiling.api.trace import trace
    from ceiling.report.call import report

    for package, function in ((ceiling.profile, profile), (ceiling.report, report),
                              (ceiling.trace, trace)):  # fmt: skip
        assert inspect.signature(package) == inspect.signature(function)
        page = pydoc.render_doc(package, renderer=pydoc.plaintext)
        assert "(*args, **kwargs)" not in page
        first = inspect.getdoc(function).splitlines()[0]
        assert str(inspect.signature(function)) in page and first in page
    assert list(inspect.signature(ceiling.trace).parameters)[:2] == ["path", "spec"]
    import ceiling.trace.reader  # the package's modules stay importable

    assert callable(ceiling.trace) and ceiling.trace.reader.__name__ == "ceiling.trace.reader"


# Llama-3-8B's published config.json (meta-llama/Meta-Llama-3-8B), the fields that shape it
LLAMA3_8B = {
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 8192,
    "tie_word_embeddings": False,
}


def test_plan_and_decode_take_a_config_dict_as_the_catalog_model_of_its_shapes():
    import ceiling

    d = ceiling.decode(LLAMA3_8B, spec="h100-sxm", batch=[1, 64], context=4096)
    ref = ceiling.decode("llama-3-8b", spec="h100-sxm", batch=[1, 64], context=4096)
    assert d.model.params_total == ref.model.params_total == 8_030_261_248
    assert [r.tokens_per_s for r in d.rows] == [r.tokens_per_s for r in ref.rows]
    assert d.model.name == "hf:llama"
    p = ceiling.plan(LLAMA3_8B, 64, spec="h100-sxm", top=1)
    assert (
        p.best.step_time_s
        == ceiling.plan("llama-3-8b", 64, spec="h100-sxm", top=1).best.step_time_s
    )
    with pytest.raises(ceiling.CeilingError, match="model must be a string or a dict"):
        ceiling.decode(3.5, spec="h100-sxm")
    with pytest.raises(ceiling.CeilingError, match="model_type"):
        ceiling.plan({"hidden_size": 8}, 8, spec="h100-sxm")


def test_decode_takes_a_transformers_config_object():
    transformers = pytest.importorskip("transformers")
    import ceiling

    keys = {k: v for k, v in LLAMA3_8B.items() if k != "model_type"}
    cfg = transformers.LlamaConfig(**keys, name_or_path="meta-llama/Meta-Llama-3-8B")
    d = ceiling.decode(cfg, spec="h100-sxm", batch=[1], context=4096)
    assert d.model.params_total == 8_030_261_248
    assert d.model.name == "hf:meta-llama/Meta-Llama-3-8B"
