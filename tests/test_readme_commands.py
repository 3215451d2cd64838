"""Every `ceiling ...` command the README shows runs as written (or, when it measures this
machine for long, parses), and prints its key figure. The machinery: `doc_commands.py`."""

from __future__ import annotations

from pathlib import Path

import pytest

from doc_commands import check, forms

README = Path(__file__).resolve().parents[1] / "README.md"
FORMS = forms(README.read_text(encoding="utf-8"))

# (command pattern, figure its output must show); the first matching pattern counts.
KEY_FIGURES = [
    # Llama-3-8B bf16 on an H100 SXM (80 GiB = 85.9 GB): weights 16.06 GB, KV 128 KiB per
    # token; 130 sequences of 4,097 tokens fit, batch 256 needs 153.5 GB
    (r"^decode llama-3-8b .*--batch 1,8,64,256 --context 4096$", r"256 .* does not fit.*130"),
    (r"^decode llama-3-8b .*--weights int8 --tp 2", r"tensor parallel over 2 devices"),
    (r"^decode llama-3-8b", r"Decode ceiling at context 4,096 \(the default"),
    (r"^info", r"fp32"),
    # 1/(1 − 0.95) = 20; S(256) = 1/(0.05 + 0.95/256) = 18.61
    (r"^amdahl 0\.95", r"18\.6"),
    # Gustafson: N − α(N − 1) = 8 − 0.1·7 = 7.3
    (r"^gustafson --serial 0\.1 -n 8", r"7\.3"),
    (r"^specs h100-sxm", r"H100"),
    (r"^specs", r"mi300x"),
    (r"^plan llama-3-8b", r"MFU"),
    (r"^plan gpt3-175b", r"MFU"),
    # matmul 4096³: 2·4096³ = 137.4 GFLOP
    (r"^roofline .*matmul:4096x4096x4096", r"137 G"),
    # gpt:tiny's counted forward FLOPs (checked exactly in tests/test_meta_counts.py)
    (r"^profile gpt:tiny --device meta", r"GFLOP"),
    (r"^bench matmul --dtype fp32 --sizes 256", r"fp32"),
    (r"^fit measurements\.csv", r"Amdahl"),
    (r"^models llama-3-8b", r"8\.03"),
    (r"^models", r"llama-3-8b"),
    # 1F1B, p = 4, m = 8: the bubble against the busiest stage's compute, (p − 1)/m = 3/8
    (r"^simulate pipeline -p 4 -m 8", r"bubble 37\.50%"),
    (r"^simulate straggler -n 256", r"256"),
]

# (N, seconds) of a strong-scaling run for `ceiling fit measurements.csv`: Amdahl p = 0.95
MEASUREMENTS = "n,time\n1,100\n2,52.5\n4,28.75\n8,16.875\n16,10.9375\n"


def test_the_readme_shows_commands_of_every_kind():
    texts = [f.text for f in FORMS]
    assert any(t.startswith("decode llama-3-8b") and "256" in t for t in texts)
    assert sum(f.parse_only() is None for f in FORMS) >= 15
    assert any(f.parse_only() for f in FORMS)


@pytest.mark.parametrize("form", FORMS, ids=[f.text[:60] for f in FORMS])
def test_readme_command(form, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # anything a command writes stays out of the tree
    (tmp_path / "measurements.csv").write_text(MEASUREMENTS)
    check(form, KEY_FIGURES)
