"""An op without a FLOP formula is unknown, not zero: listed, never blamed, MFU a bound."""

import textwrap

import pytest

from ceiling.profile.placement import hints, place
from ceiling.profile.recorder import OpCall, OpTotals


def _call(op, category, flops, bytes_, time_s):
    return OpCall(
        op=op, module="M", phase="forward", category=category, flops=flops, flops_exact=False,
        recomputed_flops=0.0, bytes_read=bytes_, bytes_written=0.0, bytes_exact=True,
        time_s=time_s, dtype="float32",
    )  # fmt: skip


def test_unknown_op_is_listed_and_left_out_of_the_verdicts():
    calls = [_call("aten.mm", "matmul", 1e9, 1e6, 0.002)]
    calls += [_call("mylib.mystery", "unknown", 0.0, 1e8, 0.010) for _ in range(3)]
    text = hints(calls, peak_flops_per_s=1e12, bandwidth_bytes_per_s=1e11, itemsize=4)
    assert text[0].startswith("1 op(s) have no FLOP formula (mylib.mystery)")
    assert "MFU is a lower bound" in text[0]
    # 94 % of op time, no FLOPs, many bytes: an elementwise op would be blamed twice here
    assert not any(h.startswith(("elementwise, normalisation", "memory-bound")) for h in text)
    t = OpTotals("mylib.mystery")
    for c in calls[1:]:
        t.add(c)
    assert place(t, 1e12, 1e11).bound == "unknown"


TARGET = """
import torch
from torch import nn


@torch.library.custom_op("ceiling_test_unknown::blend", mutates_args=())
def blend(x: torch.Tensor) -> torch.Tensor:
    return x * 0.5 + 1.0


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(32, 32)

    def forward(self, x):
        return blend(self.lin(x))


def make():
    return {"model": Net(), "batch": torch.randn(8, 32)}
"""


@pytest.mark.slow
def test_profile_of_a_model_with_a_custom_op_says_mfu_is_at_least(tmp_path):
    import json

    from typer.testing import CliRunner

    from ceiling.cli.app import app

    path = tmp_path / "custom_target.py"
    path.write_text(textwrap.dedent(TARGET))
    args = ["profile", f"{path}:make", "--steps", "1"]
    result = CliRunner().invoke(app, [*args, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    d = json.loads(result.stdout)
    assert d["unknown_ops"] == ["ceiling_test_unknown.blend"]
    assert d["mfu_is_lower_bound"] is True
    assert d["model_flops_per_step"] == 2 * 8 * 32 * 32  # the linear layer alone
    ops = {o["name"]: o for o in d["ops"]}
    assert ops["ceiling_test_unknown.blend"]["bound"] == "unknown"
    text = CliRunner().invoke(app, args, catch_exceptions=False).output
    assert "at least" in text and "ceiling_test_unknown.blend" in text
