"""A compiled model: its generated kernels are listed, its hints never advise compiling
it, and a CPU without a C++ compiler refuses --compile in one line. Fake profiler rows and
fake calls: nothing here compiles."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from ceiling.errors import InvalidInput, UnsupportedOnDevice
from ceiling.profile import compiled, placement


def test_generated_kernels_are_picked_from_profiler_rows_slowest_first():
    rows = [
        ("aten::addmm", 2, 190.0),
        ("graph_0_cpp_fused_gelu_native_layer_norm_0", 1, 12.0),
        ("graph_0_cpp_fused_sum_1", 1, 0.9),
        ("triton_poi_fused_add_0", 3, 30.0),
        ("graph_0_cpp_fused_sum_1", 2, 2.1),  # the same kernel in a second graph call
        ("CompiledFunction", 1, 536.9),
    ]
    found = compiled.kernels(rows)
    assert [(k.name, k.calls) for k in found] == [
        ("triton_poi_fused_add_0", 3),
        ("graph_0_cpp_fused_gelu_native_layer_norm_0", 1),
        ("graph_0_cpp_fused_sum_1", 3),
    ]
    assert found[2].time_s == pytest.approx(3.0e-6)


def _call(op, category, time_s, flops=0.0):
    return SimpleNamespace(op=op, category=category, time_s=time_s, flops=flops, bytes=4e3,
                           matmul_dims=None, phase="forward")  # fmt: skip


def test_a_compiled_model_is_never_advised_to_compile():
    # elementwise ops take 90 % of op time at no FLOPs, all short: the fuse and launch hints
    calls = [_call("aten.mm", "matmul", 1e-6, 1e6)] + [_call("aten.add", "elementwise", 9e-6)] * 9
    eager = " ".join(placement.hints(calls, 1e12, 1e11, 4))
    assert "fuse them (torch.compile)" in eager and "or torch.compile" in eager
    done = " ".join(placement.hints(calls, 1e12, 1e11, 4, compiled=True))
    assert "elementwise" in done and "launch/dispatch-bound" in done
    assert "torch.compile" not in done


def test_a_compiled_module_is_recognised():
    model = nn.Linear(2, 2)
    assert not compiled.is_compiled(model)
    assert compiled.is_compiled(torch.compile(model))  # lazily: nothing compiles yet
    model.compile()
    assert compiled.is_compiled(model)


def test_compile_without_a_cpp_compiler_is_one_line(monkeypatch):
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setattr(compiled.shutil, "which", lambda name: None)
    with pytest.raises(UnsupportedOnDevice, match="needs a C\\+\\+ compiler"):
        compiled.check_compiler("cpu")
    compiled.check_compiler("cuda:0")  # triton, not a C++ compiler, builds GPU kernels
    from ceiling.profile.run import profile_target

    with pytest.raises(InvalidInput, match="--compile"):
        profile_target("mlp", device="meta", compile=True)
